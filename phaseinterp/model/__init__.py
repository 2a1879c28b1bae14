"""The hooked compressed-KV transformer and its parts."""

from phaseinterp.model.compressor import window_positions
from phaseinterp.model.joint_attention import key_positions
from phaseinterp.model.transformer import HookedCompressedTransformer

__all__ = ["HookedCompressedTransformer", "key_positions", "window_positions"]
