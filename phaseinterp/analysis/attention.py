"""Attention by source token: a compressed layer's pattern mapped back onto positions.

A compressed layer's `hook_pattern` has a key axis of compressed entries then local slots
(docs/hooks.md, "The key axis"), so it cannot answer "how much did query t read from token s".
`pattern_by_token` spreads each entry's weight over the tokens of its window by the value gates
that built the entry (the gates of the branch whose payload the query reads: `compress_v`, or the
tied `compress_kv`; vector gates averaged over channels) and adds the local slots' weights at
their own positions. The result is `[batch, head, query_pos, key_pos]` like full attention's
pattern: rows sum to 1 (minus the sink's share when the layer has a sink), and for a
full-attention layer it is `hook_pattern` itself.
"""

from __future__ import annotations

import torch
from jaxtyping import Float, Int
from torch import Tensor

from phaseinterp.config import CompressionConfig
from phaseinterp.model.compressor import window_positions


def spread_pattern(cc: CompressionConfig, pattern: Float[Tensor, "batch head pos key"],
                   gates: Float[Tensor, "batch entry offset kv_head"]) -> Float[Tensor, "batch head pos pos"]:
    """The pattern of a compressed layer by source position, from its explicit-layout pattern
    (`n` entries then `L` local slots, slot i of query t = position t - L + 1 + i) and the value
    gates of its entries (one weight per window offset and KV head; query head h reads KV head
    h // (heads / kv_heads)).

    Example:
        >>> cc = CompressionConfig(window=2, stride=2, local_window=1)
        >>> pattern = torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.0, 1.0], [0.6, 0.0, 0.4], [0.7, 0.0, 0.3]])
        >>> gates = torch.tensor([[0.25, 0.75], [0.5, 0.5]])[:, :, None]  # [entry, offset, kv_head]
        >>> [round(w, 3) for w in spread_pattern(cc, pattern[None, None], gates[None])[0, 0, 3].tolist()]  # query 3
        [0.175, 0.525, 0.0, 0.3]
    """
    batch, heads, T, keys = pattern.shape
    n, L = gates.shape[1], cc.local_length()
    if keys != n + L:
        raise ValueError(f"pattern has {keys} keys: allowed entries + local slots = {n} + {L}")
    group = heads // gates.shape[-1]
    g = gates.repeat_interleave(group, dim=-1).permute(0, 3, 1, 2)  # [batch, head, entry, offset]
    out = pattern.new_zeros(batch, heads, T, T)
    if n:
        pos = window_positions(cc, T, pattern.device)[:n]  # [entry, offset]; before 0: gate weight 0
        weight = torch.einsum("bhtn,bhnw->bhtnw", pattern[..., :n], g).reshape(batch, heads, T, -1)
        out.scatter_add_(-1, pos.clamp(min=0).reshape(1, 1, 1, -1).expand_as(weight), weight)
    if L:
        local = torch.arange(T, device=pattern.device)[:, None] - L + 1 + torch.arange(L, device=pattern.device)
        out.scatter_add_(-1, local.clamp(min=0).expand(batch, heads, T, L), pattern[..., n:] * (local >= 0))
    return out


def pattern_by_token(model, tokens: Int[Tensor, "batch pos"], layer: int) -> Float[Tensor, "batch head pos pos"]:
    """How much each query read from each source token in `layer` (see the module docstring).

    Example:
        >>> pattern_by_token(model, tokens[:2, :16], layer=1).sum(-1).allclose(torch.ones(2, 4, 16))
        True
    """
    if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < model.cfg.n_layers:
        raise ValueError(f"layer={layer!r} is invalid: allowed 0..{model.cfg.n_layers - 1}")
    cc = model.cfg.compression(layer)
    pattern_name = f"blocks.{layer}.attn.hook_pattern"
    if cc is None:
        _, cache = model.run_with_cache(tokens, names_filter=[pattern_name])
        return cache[pattern_name]
    branch = "compress_kv" if cc.kv == "tied" else "compress_v"
    gate_name = f"blocks.{layer}.attn.{branch}.hook_gate"
    _, cache = model.run_with_cache(tokens, names_filter=[pattern_name, gate_name])
    gates = cache[gate_name]
    if gates.ndim == 5:  # vector gates: one weight per channel, averaged
        gates = gates.mean(-1)
    return spread_pattern(cc, cache[pattern_name], gates)


__all__ = ["pattern_by_token", "spread_pattern"]
