"""HuggingFace DeepSeek-V4 compressors (`DeepseekV4CSACompressor`, `DeepseekV4HCACompressor`) ->
our `Compressor` with the layouts that name an HF layer type ("deepseek-csa" / "hca", see
`phaseinterp.layouts`).

HF CSA projects each token to `2 * head_dim` channels: the first half (`a`) feeds the next block's
entry, the second half (`b`) the current block's. Our deepseek-csa window for entry j lists the
previous block's `a` slots (offsets 0..S-1, map 0) then block j's `b` slots (offsets S..2S-1,
map 1); the per-offset per-channel bias `position_bias[i]` splits the same way. In general HF
projects each token to one `head_dim` slice per map of the layout, slice m feeding map m (HCA: one).
"""

from __future__ import annotations

import torch

from phaseinterp.config import CompressionConfig
from phaseinterp.layouts import hf_layouts, layout_of

#: DeepSeek-V4 layer types with a compressor (a `compress_rates` key each).
CSA, HCA = "compressed_sparse_attention", "heavily_compressed_attention"


def _field(hf_cfg, name: str):
    return hf_cfg.get(name) if isinstance(hf_cfg, dict) else getattr(hf_cfg, name, None)


def layer_strides(hf_cfg) -> tuple[int | None, ...]:
    """The compressor stride of every layer (its layer type's compress rate; None for a layer
    without a compressor), from a DeepSeek-V4 config object or its dict: the one place the
    strides are read from a DeepSeek-V4 config."""
    rates = _field(hf_cfg, "compress_rates") or {}
    return tuple(int(rates[t]) if t in (CSA, HCA) else None for t in _field(hf_cfg, "layer_types") or [])


def compression_config_from_hf(hf_cfg, layer_type: str) -> CompressionConfig:
    """Our layer config for a HF DeepSeek-V4 layer type ("compressed_sparse_attention" or
    "heavily_compressed_attention"). The lightning indexer (top-k entry selection) is not modelled:
    every visible entry is attended."""
    rates = {t: m for t, m in zip(hf_cfg.layer_types, layer_strides(hf_cfg)) if m is not None}
    if layer_type not in rates:
        raise ValueError(f"layer_type={layer_type!r}: allowed a compressed layer type of this config {sorted(rates)}")
    m = rates[layer_type]
    rope = hf_cfg.rope_parameters["compress"]
    rope_dims = int(hf_cfg.head_dim * rope.get("partial_rotary_factor", 1.0))
    if rope.get("rope_type", "default") != "default":
        raise ValueError(f"compress rope_type={rope.get('rope_type')!r} is not supported: allowed 'default'")
    common = dict(
        stride=m, gate="vector", kv="tied", payload="shared", gate_maps="shared", rope_style="interleaved",
        rope="full" if rope_dims == hf_cfg.head_dim else "partial",
        rope_dims=None if rope_dims == hf_cfg.head_dim else rope_dims,
        rope_theta=float(rope["rope_theta"]), local_window=hf_cfg.sliding_window, sink=True,
    )
    layouts = hf_layouts()
    if layer_type not in layouts:
        raise ValueError(f"layer_type={layer_type!r}: allowed {', '.join(repr(t) for t in layouts)}")
    layout = layouts[layer_type]
    return CompressionConfig(window=layout.window_strides * m, layout=layout.name, **common)


@torch.no_grad()
def load_hf_compressor(ours, hf) -> None:
    """Copy a HF DeepSeek-V4 compressor's weights into our `Compressor` (n_kv_heads = 1)."""
    d = ours.d_head
    if layout_of(ours.cc.layout).hf_layer_type is None:
        allowed = " or ".join(repr(layout.name) for layout in hf_layouts().values())
        raise ValueError(f"layout={ours.cc.layout!r}: allowed {allowed} for HF compressors")
    # one head_dim slice of the HF projections (and of the bias channels) per map of the layout
    ours.W_C.copy_(torch.stack([part.T for part in hf.kv_proj.weight.split(d)]))
    ours.W_Z.copy_(torch.stack([part.T for part in hf.gate_proj.weight.split(d)]))
    ours.b_Z.copy_(torch.cat(hf.position_bias.split(d, dim=1)))
    ours.norm.weight.copy_(hf.kv_norm.weight)
