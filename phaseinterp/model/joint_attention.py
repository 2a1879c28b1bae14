"""Attention of a compressed layer: one joint softmax over visible entries, the exact local window
and the optional sink. No T x T matrix is built.

Key axis of the explicit scores/pattern (`hook_attn_scores`, `hook_pattern`, [batch, head, q_pos,
key]): keys `0..n-1` are the compressed entries (entry j covers the positions of
`window_positions(cc, T)[j]`), keys `n..n+L-1` are local slots: slot i holds position
`t - L + 1 + i` for query t (L = `cc.local_length()`). Masked keys score -inf and weigh 0.

Two implementations give the same numbers: `explicit_joint_attention` builds the [T, n + L]
scores so hooks can read and edit them; `fused_joint_attention` runs
`scaled_dot_product_attention` over query blocks (each block reads the entries visible to its last
query plus the tokens its local windows can reach) and is used when no hook reads scores or pattern.
"""

from __future__ import annotations


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


def local_windows(x: Tensor, L: int) -> Tensor:
    """[batch, pos, kv_head, d] -> [batch, pos, kv_head, d, L], slot i = position t - L + 1 + i."""
    return F.pad(x, (0, 0, 0, 0, L - 1, 0)).unfold(1, L, 1)


#: Queries per step of the explicit path: its transients stay [chunk, keys], not [pos, keys].
EXPLICIT_CHUNK = 1024


def explicit_scores(cc: CompressionConfig, q: Float[Tensor, "batch pos head d"], k: Float[Tensor, "batch pos kv_head d"],
                    ek: Float[Tensor, "batch entry kv_head d"], scale: float) -> Float[Tensor, "batch head pos key"]:
    """Masked joint scores [batch, head, q_pos, n + L], written into one buffer by query chunks."""
    batch, seq_len, n_heads, d = q.shape
    kv_heads = k.shape[2]
    n, L = ek.shape[1], cc.local_length()
    qg = q.view(batch, seq_len, kv_heads, n_heads // kv_heads, d)
    scores = q.new_empty(batch, kv_heads, n_heads // kv_heads, seq_len, n + L)
    for t0 in range(0, seq_len, EXPLICIT_CHUNK):
        t1 = min(t0 + EXPLICIT_CHUNK, seq_len)
        scores[:, :, :, t0:t1, :n] = torch.einsum("btkgd,bnkd->bkgtn", qg[:, t0:t1], ek)
    if L:
        scores[..., n:] = torch.einsum("btkgd,btkdl->bkgtl", qg, local_windows(k, L))
    scores = scores.view(batch, n_heads, seq_len, n + L).mul_(scale)
    return scores.masked_fill_(~joint_mask(cc, seq_len, q.device), float("-inf"))


def softmax_with_sink(scores: Float[Tensor, "batch head pos key"], sink: Float[Tensor, " head"] | None,
                      inplace: bool = False) -> Float[Tensor, "batch head pos key"]:
    """Softmax over the last axis; `sink` [head] adds exp(sink) to the denominator only.

    Rows with no visible key (possible only with L = 0 and no sink) get all-zero weights.
    `inplace` overwrites `scores` (no second [pos, key] buffer; only where nothing else holds
    the scores and no gradient flows through them).
    """
    if scores.shape[-1] == 0:  # no key at all (L = 0 before the first entry): nothing to weigh
        return scores if inplace else scores.clone()
    top = scores.amax(dim=-1, keepdim=True)
    if sink is not None:
        top = torch.maximum(top, sink.view(1, -1, 1, 1).to(scores.dtype))
    top = top.masked_fill(top == float("-inf"), 0.0)  # an empty row: exp(-inf - 0) = 0 everywhere
    p = scores.sub_(top).exp_() if inplace else (scores - top).exp()
    total = p.sum(dim=-1, keepdim=True)
    if sink is not None:
        total = total + (sink.view(1, -1, 1, 1).to(scores.dtype) - top).exp()
    total = total.clamp_min(torch.finfo(p.dtype).tiny)
    return p.div_(total) if inplace else p / total


def explicit_mix(cc: CompressionConfig, pattern: Float[Tensor, "batch head pos key"], v: Float[Tensor, "batch pos kv_head d"],
                 ev: Float[Tensor, "batch entry kv_head d"]) -> Float[Tensor, "batch pos head d"]:
    """z [batch, pos, head, d] from the joint pattern, entry values `ev` and local values `v`."""
    batch, n_heads, seq_len, _ = pattern.shape
    kv_heads, d = v.shape[2], v.shape[3]
    n = ev.shape[1]
    p = pattern.view(batch, kv_heads, n_heads // kv_heads, seq_len, -1)
    z = v.new_empty(batch, seq_len, kv_heads, n_heads // kv_heads, d)
    for t0 in range(0, seq_len, EXPLICIT_CHUNK):
        t1 = min(t0 + EXPLICIT_CHUNK, seq_len)
        z[:, t0:t1] = torch.einsum("bkgtn,bnkd->btkgd", p[:, :, :, t0:t1, :n], ev)
    L = cc.local_length()
    if L:
        z = z + torch.einsum("bkgtl,btkdl->btkgd", p[..., n:], local_windows(v, L))
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
    block: int = 64,
) -> Float[Tensor, "batch pos head d"]:
    """Same result as the explicit path, through SDPA over query blocks of `block` positions.

    Block [t0, t1) reads exactly the entries complete by t1 - 1 and the positions t0-L+1..t1-1,
    so its scores are [B, n_visible + B + L - 1]: at most B/S + B + L - 1 keys per query more
    than the explicit layout, and no mask larger than one block's is ever built. The sink rides
    on key 0: queries gain a channel holding sink_h / scale, the sink key is the unit vector on
    it, its value is 0.
    """
    batch, seq_len, n_heads, d = q.shape
    kv_heads = k.shape[2]
    L = cc.local_length()
    s0 = 0 if sink is None else 1
    block = min(block, seq_len)
    keys, values = _KeyBuffer(ek, s0, block + L - 1), _KeyBuffer(ev, s0, block + L - 1)
    if sink is not None:
        keys.buf[:, :, 0, -1] = 1.0
        sink_channel = (sink / scale).to(q.dtype).view(1, 1, n_heads, 1)
    out = q.new_empty(batch, seq_len, n_heads, d)
    for t0 in range(0, seq_len, block):
        t1 = min(t0 + block, seq_len)
        n_vis = cc.n_entries(t1)
        lo = t0 - L + 1
        qb = q[:, t0:t1]
        if sink is not None:
            qb = torch.cat([qb, sink_channel.expand(batch, t1 - t0, n_heads, 1)], dim=-1)
        kb = keys.with_local(n_vis, k, lo, t1)
        vb = values.with_local(n_vis, v, lo, t1)
        mask = _block_mask(cc, t0, t1, n_vis, s0, L, q.device, q.dtype)
        z = F.scaled_dot_product_attention(qb.transpose(1, 2), kb, vb, attn_mask=mask, scale=scale,
                                           enable_gqa=kv_heads != n_heads)
        out[:, t0:t1] = z[..., :d].transpose(1, 2)
        keys.restore(n_vis, t1 - lo)
        values.restore(n_vis, t1 - lo)
    return out


class _KeyBuffer:
    """Keys (or values) of one layer laid out [batch, kv_head, s0 + entries + span, d (+1 with a
    sink)]: entries are written once; each query block writes its local positions right after its
    visible entries, reads the prefix, then puts back the entries it overwrote. Under autograd the
    block's keys are concatenated instead, since SDPA keeps its inputs for the backward."""

    def __init__(self, e: Tensor, s0: int, span: int):
        batch, n, kv_heads, d = e.shape
        self.e, self.s0, self.d = e, s0, d
        self.grad = torch.is_grad_enabled() and e.requires_grad
        self.buf = e.new_zeros(batch, kv_heads, s0 + (0 if self.grad else n + span), d + s0)
        if not self.grad:
            self.buf[:, :, s0:s0 + n, :d] = e.transpose(1, 2)

    def with_local(self, n_vis: int, x: Tensor, lo: int, t1: int) -> Tensor:
        local = F.pad(x[:, max(lo, 0):t1], (0, self.s0, 0, 0, max(-lo, 0), 0)).transpose(1, 2)
        end = self.s0 + n_vis
        if self.grad:
            entries = F.pad(self.e[:, :n_vis].transpose(1, 2), (0, self.s0))
            return torch.cat([self.buf, entries, local], dim=2)
        self.buf[:, :, end:end + local.shape[2]] = local
        return self.buf[:, :, :end + local.shape[2]]

    def restore(self, n_vis: int, width: int) -> None:
        if self.grad:
            return
        n = self.e.shape[1]
        stop = min(n_vis + width, n)
        self.buf[:, :, self.s0 + n_vis:self.s0 + stop, :self.d] = self.e[:, n_vis:stop].transpose(1, 2)


def _block_mask(cc: CompressionConfig, t0: int, t1: int, n_vis: int, s0: int, L: int, device, dtype) -> Tensor:
    """Additive mask (0 or -inf) [t1 - t0, s0 + n_vis + t1 - t0 + L - 1] of queries t0..t1-1:
    the sink key, the visible entries (all but the newest few are visible to every query), the
    block's local span."""
    t = torch.arange(t0, t1, device=device)[:, None]
    first = cc.n_entries(t0)  # entries complete before t0: visible to the whole block
    ends = entry_ends(cc, t1, device)[first:n_vis]
    local = torch.arange(t0 - L + 1, t1, device=device)
    allowed = torch.cat([ends[None, :] <= t, local_key_mask(cc, t, local[None, :])], dim=1)
    mask = torch.zeros(t1 - t0, s0 + n_vis + local.shape[0], dtype=dtype, device=device)
    mask[:, s0 + first:].masked_fill_(~allowed, float("-inf"))
    return mask


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
