"""The hooked compressed-KV transformer and its parts."""

from phaseinterp.model.transformer import HookedCompressedTransformer

__all__ = ["HookedCompressedTransformer"]
