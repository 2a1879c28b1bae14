"""Native Sparse Attention (the `native-sparse-attention-pytorch` package) as a hooked model.

`NSAConfig` needs nothing optional; `NSATransformer` needs the package
(`pip install 'phaseinterp[nsa]'`). See docs/nsa.md.
"""

from typing import TYPE_CHECKING

from phaseinterp._lazy import lazy_exports

if TYPE_CHECKING:  # what a type checker reads; at run time each name is imported on first use
    from phaseinterp.model.nsa.attention import (
        BRANCHES as BRANCHES, NSAAttention as NSAAttention, require_nsa as require_nsa)
    from phaseinterp.model.nsa.config import NSAConfig as NSAConfig
    from phaseinterp.model.nsa.transformer import NSATransformer as NSATransformer

_EXPORTS = {
    "NSAConfig": "config",
    "require_nsa": "attention",
    "NSAAttention": "attention",
    "NSATransformer": "transformer",
    "BRANCHES": "attention",
}

if not TYPE_CHECKING:  # a type checker reads the imports above: an unknown name is an error there too
    __getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
__all__ = sorted(_EXPORTS)
