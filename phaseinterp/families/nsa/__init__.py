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


FAMILY = register_family(ModelFamily(
    name="nsa", backend="phaseinterp.families.nsa.backend.NSABackend", recognizes=lambda m: getattr(m, "is_nsa", False),
    formats=(NSA_FORMAT,), as_config=_as_config, build=_build))

__all__ = ["FAMILY"]
