"""Our `HookedCompressedTransformer` (checkpoint format "phaseinterp-checkpoint-v1", config
`ModelConfig`): built from its config, run behind `HookedBackend` (which says that the trainer may
use mitigations, `torch.compile` and DDP on it)."""

from __future__ import annotations

from typing import Any

from phaseinterp.checkpoint_io import FORMAT
from phaseinterp.config import ModelConfig
from phaseinterp.family import ModelFamily, register_family


def _as_config(obj: Any) -> ModelConfig | None:
    if isinstance(obj, ModelConfig):
        return obj
    if isinstance(obj, dict) and {"d_model", "layers"} <= set(obj) and "arch" not in obj:
        return ModelConfig.from_dict(obj)
    return None


def _build(cfg: ModelConfig, seed: int | None):
    from phaseinterp.model import HookedCompressedTransformer

    return HookedCompressedTransformer(cfg, seed=seed)


def _recognizes(model: Any) -> bool:
    from phaseinterp.model import HookedCompressedTransformer

    return isinstance(model, HookedCompressedTransformer)


FAMILY = register_family(ModelFamily(
    name="hooked", backend="phaseinterp.families.hooked.backend.HookedBackend", recognizes=_recognizes, formats=(FORMAT,),
    as_config=_as_config, build=_build))

__all__ = ["FAMILY"]
