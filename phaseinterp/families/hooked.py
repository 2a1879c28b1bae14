"""Our `HookedCompressedTransformer` (checkpoint format "phaseinterp-checkpoint-v1", config
`ModelConfig`): built from its config, run behind `HookedBackend`, trained with mitigations and
`torch.compile`."""

from __future__ import annotations

from typing import Any

from phaseinterp.checkpoint_io import FORMAT
from phaseinterp.config import ModelConfig
from phaseinterp.family import ModelFamily, no_stride, register_family


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


def _backend(model: Any, stride: int | None):
    from phaseinterp.backends.hooked import HookedBackend

    no_stride("our model", stride)
    return HookedBackend(model)


FAMILY = register_family(ModelFamily(
    name="hooked", recognizes=_recognizes, backend=_backend, formats=(FORMAT,), as_config=_as_config, build=_build,
    trainable=True, mitigations=True, compile=True, data_parallel=True))

__all__ = ["FAMILY"]
