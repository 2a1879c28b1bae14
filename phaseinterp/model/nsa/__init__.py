"""Native Sparse Attention (the `native-sparse-attention-pytorch` package) as a hooked model.

`NSAConfig` needs nothing optional; `NSATransformer` needs the package
(`pip install 'phaseinterp[nsa]'`). See docs/nsa.md.
"""

from phaseinterp._lazy import lazy_exports

_EXPORTS = {
    "NSAConfig": "config",
    "require_nsa": "attention",
    "NSAAttention": "attention",
    "NSATransformer": "transformer",
    "BRANCHES": "attention",
}

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
__all__ = sorted(_EXPORTS)
