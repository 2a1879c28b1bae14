"""HuggingFace DeepSeek-V4 compressors (`DeepseekV4CSACompressor`, `DeepseekV4HCACompressor`) ->
our `Compressor` with the "deepseek-csa" / "hca" layouts.

HF CSA projects each token to `2 * head_dim` channels: the first half (`a`) feeds the next block's
entry, the second half (`b`) the current block's. Our deepseek-csa window for entry j lists the
previous block's `a` slots (offsets 0..S-1, map 0) then block j's `b` slots (offsets S..2S-1,
map 1); the per-offset per-channel bias `position_bias[i]` splits the same way.
"""

from __future__ import annotations

import torch

from phaseinterp.config import CompressionConfig


def compression_config_from_hf(hf_cfg, layer_type: str) -> CompressionConfig:
    """Our layer config for a HF DeepSeek-V4 layer type ("compressed_sparse_attention" or
    "heavily_compressed_attention"). The lightning indexer (top-k entry selection) is not modelled:
    every visible entry is attended."""
    m = hf_cfg.compress_rates[layer_type]
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
    if layer_type == "compressed_sparse_attention":
        return CompressionConfig(window=2 * m, layout="deepseek-csa", **common)
    if layer_type == "heavily_compressed_attention":
        return CompressionConfig(window=m, layout="hca", **common)
    raise ValueError(f"layer_type={layer_type!r}: allowed 'compressed_sparse_attention', 'heavily_compressed_attention'")


@torch.no_grad()
def load_hf_compressor(ours, hf) -> None:
    """Copy a HF DeepSeek-V4 compressor's weights into our `Compressor` (n_kv_heads = 1)."""
    d = ours.d_head
    if ours.cc.layout == "deepseek-csa":
        kv, gate, bias = hf.kv_proj.weight, hf.gate_proj.weight, hf.position_bias
        ours.W_C.copy_(torch.stack([kv[:d].T, kv[d:].T]))
        ours.W_Z.copy_(torch.stack([gate[:d].T, gate[d:].T]))
        ours.b_Z.copy_(torch.cat([bias[:, :d], bias[:, d:]]))
    elif ours.cc.layout == "hca":
        ours.W_C.copy_(hf.kv_proj.weight.T[None])
        ours.W_Z.copy_(hf.gate_proj.weight.T[None])
        ours.b_Z.copy_(hf.position_bias)
    else:
        raise ValueError(f"layout={ours.cc.layout!r}: allowed 'deepseek-csa' or 'hca' for HF compressors")
    ours.norm.weight.copy_(hf.kv_norm.weight)
