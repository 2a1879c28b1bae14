"""phaseinterp: mechanistic interpretability of phase sensitivity in chunk-compressed KV caches."""

import beartype  # noqa: F401  (import before nnsight anywhere downstream: nnsight breaks a later beartype import)

__version__ = "0.1.0"

from phaseinterp.checkpoint import load  # noqa: E402
from phaseinterp.config import CompressionConfig, ModelConfig  # noqa: E402
from phaseinterp.model import HookedCompressedTransformer  # noqa: E402
from phaseinterp.presets import PRESETS, preset  # noqa: E402

__all__ = ["CompressionConfig", "HookedCompressedTransformer", "ModelConfig", "PRESETS", "load", "preset", "__version__"]
