"""phaseinterp: mechanistic interpretability of phase sensitivity in chunk-compressed KV caches."""

import beartype  # noqa: F401  (import before nnsight anywhere downstream: nnsight breaks a later beartype import)

__version__ = "0.1.0"

from phaseinterp._lazy import lazy_exports

_EXPORTS = {
    **dict.fromkeys(('load',), "sources"),
    **dict.fromkeys(('models',), "catalog"),
    **dict.fromkeys(('CompressionConfig', 'ModelConfig'), "config"),
    **dict.fromkeys(('HookedCompressedTransformer',), "model"),
    **dict.fromkeys(('PRESETS', 'preset'), "presets"),
    **dict.fromkeys(('Unit', 'head_units'), "units"),
}
__all__ = [*sorted(_EXPORTS), "__version__"]
__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
