"""Native Sparse Attention models (`model.nsa.NSATransformer`, checkpoint format
"phaseinterp-nsa-checkpoint-v1", config `NSAConfig`; loading needs `pip install 'phaseinterp[nsa]'`):
run behind `NSABackend`, trained without mitigations (NSA compresses with an MLP: no gates) or
compilation."""

from __future__ import annotations

from typing import Any

from phaseinterp.family import ModelFamily, register_family
from phaseinterp.model.nsa.config import NSA_FORMAT, NSAConfig


def _as_config(obj: Any) -> NSAConfig | None:
    if isinstance(obj, NSAConfig):
        return obj
    return NSAConfig.from_dict(obj) if NSAConfig.is_nsa_dict(obj) else None


def _build(cfg: NSAConfig, seed: int | None):
    from phaseinterp.model.nsa.transformer import NSATransformer

    return NSATransformer(cfg, seed=seed)


def _backend(model: Any, stride: int | None):
    from phaseinterp.backends.nsa import NSABackend

    if stride is not None:
        raise ValueError(f"stride={stride} is invalid for an NSA model: allowed None (its stride comes from its config)")
    return NSABackend(model)


FAMILY = register_family(ModelFamily(
    name="nsa", recognizes=lambda m: getattr(m, "is_nsa", False), backend=_backend, formats=(NSA_FORMAT,),
    as_config=_as_config, build=_build, trainable=True, data_parallel=True))

__all__ = ["FAMILY"]
