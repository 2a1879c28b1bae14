"""The registry of compressor layouts: where each window of a compressed layer sits, which payload
and gate map each of its offsets uses, and where its entry is rotated. Adding a layout is one
`register_layout` call (here, or in user code); the config, the compressor, the HF converter and
the DeepSeek-V4 backend ask the registry, not the name.

    generic       W-token windows every S tokens, window j starts at jS (any 1 <= S <= W)
    deepseek-csa  W = 2S: the previous block's `a` slots then the current block's `b` slots, one
                  map per half, entries rotated at the current block's start (DeepSeek-V4 CSA)
    hca           W = S: one block per entry (DeepSeek-V4 HCA)

Example:
    >>> layout_of("deepseek-csa").lookback, layout_of("hca").window_rule(4), list(LAYOUTS)
    (1, '= stride (4)', ['generic', 'deepseek-csa', 'hca'])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from phaseinterp.registry import Registry


@dataclass(frozen=True)
class Layout:
    """One compressor layout. Positions are in units of the layer's stride S.

    Attributes:
        name: the value of `CompressionConfig.layout`.
        window_strides: the window is this many strides long (`W = window_strides * S`;
            deepseek-csa 2, hca 1); None: any window `W >= S`.
        lookback: strides a window reaches back before its own block: window j starts at
            `(j - lookback) S` (deepseek-csa 1), so the first `lookback * S` slots of the first
            entries lie before position 0 and get weight 0 (`CompressionConfig.pad`).
        rope_shift: strides from a window's start to the position its key entry is rotated at
            (deepseek-csa 1: the current block's start; `CompressionConfig.rope_position`).
        block_maps: offset i uses payload and gate map `i // S`, one per stride-long block of the
            window, whatever `payload` and `gate_maps` say (deepseek-csa: the `a` and `b` halves).
        requires: other `CompressionConfig` fields the layout fixes, as (field, value) pairs
            (deepseek-csa: kv "tied" and gate "vector").
        hf_layer_type: the HuggingFace DeepSeek-V4 layer type this layout converts (None: HF has
            no such compressor). HF projects each token to one `head_dim` slice per map.
    """

    name: str
    window_strides: int | None = None
    lookback: int = 0
    rope_shift: int = 0
    block_maps: bool = False
    requires: tuple[tuple[str, Any], ...] = ()
    hf_layer_type: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"name={self.name!r} is invalid: allowed a non-empty string")
        if self.window_strides is not None and (isinstance(self.window_strides, bool)
                                                or not isinstance(self.window_strides, int) or self.window_strides < 1):
            raise ValueError(f"window_strides={self.window_strides!r} is invalid: allowed None or an integer >= 1")
        for field in ("lookback", "rope_shift"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{field}={value!r} is invalid: allowed an integer >= 0")

    def window_rule(self, stride: int) -> str | None:
        """The window this layout allows at stride S, as the config's error states it
        ("2 * stride = 8", "= stride (4)"); None when any W >= S is allowed."""
        if self.window_strides is None:
            return None
        if self.window_strides == 1:
            return f"= stride ({stride})"
        return f"{self.window_strides} * stride = {self.window_strides * stride}"


_REGISTRY: Registry[Layout] = Registry(Layout, noun="layout", arg="layout", field="layout")
LAYOUTS: dict[str, Layout] = _REGISTRY.entries

register_layout = _REGISTRY.register  # add a Layout (a name already taken raises ValueError); returns it
layout_of = _REGISTRY.get  # the Layout of that name; ValueError listing the registered names otherwise


def hf_layouts() -> dict[str, Layout]:
    """HF DeepSeek-V4 layer type -> the layout that converts it, in registration order."""
    return {layout.hf_layer_type: layout for layout in LAYOUTS.values() if layout.hf_layer_type is not None}


register_layout(Layout("generic"))
register_layout(Layout("deepseek-csa", window_strides=2, lookback=1, rope_shift=1, block_maps=True,
                       requires=(("kv", "tied"), ("gate", "vector")), hf_layer_type="compressed_sparse_attention"))
register_layout(Layout("hca", window_strides=1, hf_layer_type="heavily_compressed_attention"))

__all__ = ["LAYOUTS", "Layout", "hf_layouts", "layout_of", "register_layout"]
