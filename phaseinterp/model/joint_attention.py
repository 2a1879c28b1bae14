"""Attention of a compressed layer: one joint softmax over visible entries, the exact local window
and the optional sink. No T x T matrix is built.

Key axis of the explicit scores/pattern (`hook_attn_scores`, `hook_pattern`, [batch, head, q_pos,
key]): keys `0..n-1` are the compressed entries (entry j covers the positions of
`window_positions(cc, T)[j]`), keys `n..n+L-1` are local slots: slot i holds position
`t - L + 1 + i` for query t (L = `cc.local_length()`). Masked keys score -inf and weigh 0.

Two implementations give the same numbers: `explicit_joint_attention` builds the [T, n + L]
scores so hooks can read and edit them; `fused_joint_attention` runs
`scaled_dot_product_attention` over query blocks (each block sees all entries plus the tokens its
local windows can reach) and is used when no hook reads scores or pattern.
"""

from __future__ import annotations

import functools
from fractions import Fraction

import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float, Int
from torch import Tensor

from phaseinterp.config import CompressionConfig
from phaseinterp.model.compressor import window_positions


def entry_ends(cc: CompressionConfig, seq_len: int, device=None) -> Int[Tensor, " entry"]:
    """Last absolute position covered by each entry: entry j is visible to query t iff end_j <= t."""
    return window_positions(cc, seq_len, device)[:, -1]


def last_visible_end(cc: CompressionConfig, t: Int[Tensor, " *query"]) -> Int[Tensor, " *query"]:
    """End of the newest entry visible at each query position t, or -1 when none is."""
    first_end = cc.window - 1 - cc.pad
    j = torch.div(t - first_end, cc.entry_stride, rounding_mode="floor")
    return torch.where(t >= first_end, j * cc.entry_stride + first_end, torch.full_like(t, -1))


def local_key_mask(cc: CompressionConfig, t: Int[Tensor, "*#shape"], pos: Int[Tensor, "*#shape"]) -> Bool[Tensor, "*#shape"]:
    """May query t read the exact token at pos? (broadcasting t against pos)."""
    ok = (pos >= 0) & (pos <= t)
    if cc.local_window == "tail":
        return ok & (pos > last_visible_end(cc, t))
    return ok & (pos > t - cc.local_window)


def joint_mask(cc: CompressionConfig, seq_len: int, device=None) -> Bool[Tensor, "pos key"]:
    """[q_pos, n + L] boolean mask in the explicit key layout."""
    t = torch.arange(seq_len, device=device)
    L = cc.local_length()
    entries = entry_ends(cc, seq_len, device)[None, :] <= t[:, None]
    local_pos = t[:, None] - L + 1 + torch.arange(L, device=device)[None, :]
    return torch.cat([entries, local_key_mask(cc, t[:, None], local_pos)], dim=1)


def _local_windows(x: Tensor, L: int) -> Tensor:
    """[batch, pos, kv_head, d] -> [batch, pos, kv_head, d, L], slot i = position t - L + 1 + i."""
    return F.pad(x, (0, 0, 0, 0, L - 1, 0)).unfold(1, L, 1)


def explicit_scores(cc: CompressionConfig, q: Float[Tensor, "batch pos head d"], k: Float[Tensor, "batch pos kv_head d"],
                    ek: Float[Tensor, "batch entry kv_head d"], scale: float) -> Float[Tensor, "batch head pos key"]:
    """Masked joint scores [batch, head, q_pos, n + L]."""
    batch, seq_len, n_heads, d = q.shape
    kv_heads = k.shape[2]
    qg = q.view(batch, seq_len, kv_heads, n_heads // kv_heads, d)
    s_entries = torch.einsum("btkgd,bnkd->bkgtn", qg, ek)
    L = cc.local_length()
    if L:
        s_local = torch.einsum("btkgd,btkdl->bkgtl", qg, _local_windows(k, L))
        scores = torch.cat([s_entries, s_local], dim=-1)
    else:
        scores = s_entries
    scores = scores.reshape(batch, n_heads, seq_len, -1) * scale
    return scores.masked_fill(~joint_mask(cc, seq_len, q.device), float("-inf"))


def softmax_with_sink(scores: Float[Tensor, "batch head pos key"], sink: Float[Tensor, " head"] | None
                      ) -> Float[Tensor, "batch head pos key"]:
    """Softmax over the last axis; `sink` [head] adds exp(sink) to the denominator only.

    Rows with no visible key (possible only with L = 0 and no sink) get all-zero weights.
    """
    empty = torch.isinf(scores).all(dim=-1, keepdim=True) & (scores < 0).all(dim=-1, keepdim=True)
    scores = scores.masked_fill(empty, 0.0)
    if sink is not None:
        sink_col = sink.view(1, -1, 1, 1).expand(*scores.shape[:-1], 1).to(scores.dtype)
        return torch.cat([scores, sink_col], dim=-1).softmax(dim=-1)[..., :-1].masked_fill(empty, 0.0)
    return scores.softmax(dim=-1).masked_fill(empty, 0.0)


def explicit_mix(cc: CompressionConfig, pattern: Float[Tensor, "batch head pos key"], v: Float[Tensor, "batch pos kv_head d"],
                 ev: Float[Tensor, "batch entry kv_head d"]) -> Float[Tensor, "batch pos head d"]:
    """z [batch, pos, head, d] from the joint pattern, entry values `ev` and local values `v`."""
    batch, n_heads, seq_len, _ = pattern.shape
    kv_heads, d = v.shape[2], v.shape[3]
    n = ev.shape[1]
    p = pattern.view(batch, kv_heads, n_heads // kv_heads, seq_len, -1)
    z = torch.einsum("bkgtn,bnkd->btkgd", p[..., :n], ev)
    L = cc.local_length()
    if L:
        z = z + torch.einsum("bkgtl,btkdl->btkgd", p[..., n:], _local_windows(v, L))
    return z.reshape(batch, seq_len, n_heads, d)


def fused_joint_attention(
    cc: CompressionConfig,
    q: Float[Tensor, "batch pos head d"],
    k: Float[Tensor, "batch pos kv_head d"],
    v: Float[Tensor, "batch pos kv_head d"],
    ek: Float[Tensor, "batch entry kv_head d"],
    ev: Float[Tensor, "batch entry kv_head d"],
    scale: float,
    sink: Float[Tensor, " head"] | None,
    block: int = 256,
    segments: int = 4,
) -> Float[Tensor, "batch pos head d"]:
    """Same result as the explicit path, through SDPA over query blocks of `block` positions.

    Block b holds queries bB..bB+B-1 and reads entries plus positions bB-L+1..bB+B-1, so its
    scores are [B, n + B + L - 1] instead of [B, T]. Blocks are grouped into at most `segments`
    consecutive segments (a constant, not growing with T), each reading only the entries that can
    be visible to its last query; this skips about 3/8 of the never-visible (query, entry) pairs.
    The sink rides on one extra key: queries gain a channel holding sink_h / scale, the sink key
    is the unit vector on it, its value is 0.
    """
    batch, seq_len, n_heads, d = q.shape
    block = min(block, seq_len)
    n_blocks = -(-seq_len // block)
    padded = n_blocks * block
    L = cc.local_length()
    span = block + L - 1

    def local_blocks(x: Tensor) -> Tensor:  # view [n_blocks, batch, kv_head, span, d]
        x = F.pad(x, (0, 0, 0, 0, L - 1, padded - seq_len)).unfold(1, span, block)
        return x.permute(1, 0, 2, 4, 3)

    k_local, v_local = local_blocks(k), local_blocks(v)
    q_blocks = F.pad(q, (0, 0, 0, 0, 0, padded - seq_len)).view(batch, n_blocks, block, n_heads, d)
    q_blocks = q_blocks.permute(1, 0, 3, 2, 4)  # [n_blocks, batch, head, block, d]
    n_seg = min(segments, n_blocks)
    bounds = [round(Fraction(i * n_blocks, n_seg)) for i in range(n_seg + 1)]  # evenly spaced, ties to even
    out = []
    for b0, b1 in zip(bounds[:-1], bounds[1:]):
        n_visible = cc.n_entries(min(b1 * block, seq_len))
        out.append(
            _fused_blocks(cc, seq_len, block, b0, b1, q_blocks[b0:b1], k_local[b0:b1], v_local[b0:b1],
                          ek[:, :n_visible], ev[:, :n_visible], scale, sink)
        )
    z = torch.cat(out, dim=0)  # [n_blocks, batch, head, block, d]
    return z.permute(1, 0, 3, 2, 4).reshape(batch, padded, n_heads, d)[:, :seq_len]


def _fused_blocks(cc, seq_len, block, b0, b1, qb, k_local, v_local, ek, ev, scale, sink) -> Tensor:
    n_blocks, batch, n_heads, _, d = qb.shape
    kv_heads, span, n = k_local.shape[2], k_local.shape[3], ek.shape[1]
    rows = n_blocks * batch  # block-major, so the mask broadcasts over the batch

    def keys_of(e: Tensor, local: Tensor) -> Tensor:  # -> [rows, kv_head, n + span, d]
        out = local.new_empty(n_blocks, batch, kv_heads, n + span, d)
        out[:, :, :, :n] = e.permute(0, 2, 1, 3)[None]
        out[:, :, :, n:] = local
        return out.view(rows, kv_heads, n + span, d)

    keys, values = keys_of(ek, k_local), keys_of(ev, v_local)
    qb = qb.reshape(rows, n_heads, block, d)
    mask = _block_mask(cc, seq_len, block, b0, b1, n, qb.device, qb.dtype)  # [n_blocks, 1, block, n + span]
    if sink is not None:
        qb = torch.cat([qb, (sink / scale).view(1, n_heads, 1, 1).expand(rows, n_heads, block, 1)], -1)
        unit = keys.new_zeros(rows, kv_heads, 1, d + 1)
        unit[..., -1] = 1.0
        keys = torch.cat([F.pad(keys, (0, 1)), unit], dim=2)
        values = torch.cat([values, values.new_zeros(rows, kv_heads, 1, d)], dim=2)
        mask = F.pad(mask, (0, 1), value=0.0)
    if batch > 1:
        mask = mask.repeat_interleave(batch, dim=0)
    z = F.scaled_dot_product_attention(qb, keys, values, attn_mask=mask, scale=scale, enable_gqa=kv_heads != n_heads)
    return z.view(n_blocks, batch, n_heads, block, d)


@functools.lru_cache(maxsize=16)
def _block_mask(cc: CompressionConfig, seq_len: int, block: int, b0: int, b1: int, n: int, device, dtype) -> Tensor:
    """Additive mask (0 or -inf) for blocks b0..b1-1 reading the first n entries and their local
    spans; cached so layers with the same config share it."""
    L = cc.local_length()
    span = block + L - 1
    t = torch.arange(b0 * block, b1 * block, device=device).view(b1 - b0, block, 1)
    first_local = (torch.arange(b0, b1, device=device) * block - (L - 1)).view(-1, 1, 1)
    allowed = torch.cat(
        [
            (entry_ends(cc, seq_len, device)[:n].view(1, 1, n) <= t).expand(b1 - b0, block, n),
            local_key_mask(cc, t, first_local + torch.arange(span, device=device)),
        ],
        dim=-1,
    )
    mask = torch.zeros(allowed.shape, dtype=dtype, device=device).masked_fill_(~allowed, float("-inf"))
    return mask[:, None]


def key_positions(cc: CompressionConfig, seq_len: int, query: int, key: int) -> list[int]:
    """Absolute positions behind key index `key` of a compressed layer's pattern for query `query`
    (an entry's window, clipped at 0, or the one local position); [] if the key is masked there."""
    n = cc.n_entries(seq_len)
    L = cc.local_length()
    if not 0 <= query < seq_len:
        raise ValueError(f"query={query} is invalid: allowed 0..{seq_len - 1}")
    if not 0 <= key < n + L:
        raise ValueError(f"key={key} is invalid: allowed 0..{n + L - 1} (n_entries={n}, local slots={L})")
    if not joint_mask(cc, seq_len)[query, key]:
        return []
    if key < n:
        return [p for p in window_positions(cc, seq_len)[key].tolist() if p >= 0]
    return [query - L + 1 + (key - n)]
