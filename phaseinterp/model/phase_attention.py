"""Inference path of a compressed layer's attention on CPU: the entries through causal flash
attention, one call per phase, the local window explicitly, the two merged by log-sum-exp.

Entry j is visible to query t iff its window has ended, `end_j = j * E + first_end <= t` (E the
entry stride). Queries of one phase r (t = r + E * i) then see entries 0 .. i + c_r - 1 with
c_r = floor((r - first_end) / E) + 1: after dropping the queries that see none, row a of that
phase sees entries 0..a, which is exactly causal attention over the entries. Flash attention
skips the blocks above the diagonal, so the entries cost only the visible (query, entry) pairs,
and no mask is built. The local window (at most L tokens per query) is read explicitly when short,
through flash attention over chunks of queries when long. Same numbers as `joint_attention.explicit_scores`
+ `softmax_with_sink` + `explicit_mix` (tests/test_model_semantics.py).

It needs the log-sum-exp of each part, which only the CPU flash kernel returns
(`aten::_scaled_dot_product_flash_attention_for_cpu`), and has no backward for it: callers use it
on CPU without autograd (`usable`) and the block path otherwise.
"""

from __future__ import annotations

import torch
from jaxtyping import Float
from torch import Tensor

from phaseinterp.config import CompressionConfig
from phaseinterp.model.joint_attention import fused_joint_attention, local_key_mask, local_windows
from phaseinterp.model.static import tracing

_flash_with_lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu


def phase_offsets(cc: CompressionConfig) -> list[int]:
    """c_r for each phase r < E: a phase-r query at t = r + E * i sees i + c_r entries."""
    first_end = cc.window - 1 - cc.pad
    return [(r - first_end) // cc.entry_stride + 1 for r in range(cc.entry_stride)]


def usable(cc: CompressionConfig, *tensors: Tensor) -> bool:
    """This path applies: CPU, no autograd, a local window, and no phase sees an entry more
    than its row index (true of every layout whose first window ends at or after position 0)."""
    if any(x.device.type != "cpu" or (torch.is_grad_enabled() and x.requires_grad) for x in tensors):
        return False
    return cc.local_length() > 0 and max(phase_offsets(cc)) <= 1


def _entries(cc: CompressionConfig, q: Tensor, ek: Tensor, ev: Tensor, scale: float) -> tuple[Tensor, Tensor]:
    """Entry part: output [batch, pos, head, d] and log-sum-exp [batch, head, pos] (-inf: no entry)."""
    batch, seq_len, n_heads, d = q.shape
    E = cc.entry_stride
    out = q.new_zeros(batch, seq_len, n_heads, d)
    lse = q.new_full((batch, n_heads, seq_len), float("-inf"))
    if ek.shape[1] == 0:
        return out, lse
    keys, values = ek.transpose(1, 2), ev.transpose(1, 2)
    for r, c in enumerate(phase_offsets(cc)):
        first = r + max(0, 1 - c) * E  # the phase's first query that sees an entry
        if first >= seq_len:
            continue
        o, s = _flash_with_lse(q[:, first::E].transpose(1, 2), keys, values, 0.0, True, scale=scale)
        out[:, first::E] = o.transpose(1, 2)
        lse[:, :, first::E] = s
    return out, lse


#: Local windows up to this many tokens are read explicitly (one small matmul per query); longer
#: ones through flash attention over chunks of queries, whose per-call cost only pays off there.
EXPLICIT_LOCAL_MAX = 32


def _local(cc: CompressionConfig, q: Tensor, k: Tensor, v: Tensor, scale: float, chunk: int | None) -> tuple[Tensor, Tensor]:
    """Local part, like `_entries`, from the exact tokens each query may read."""
    if cc.local_length() <= EXPLICIT_LOCAL_MAX:
        return _local_explicit(cc, q, k, v, scale, chunk or 1024)
    return _local_flash(cc, q, k, v, scale, chunk or max(256, cc.local_length()))


def _local_explicit(cc: CompressionConfig, q: Tensor, k: Tensor, v: Tensor, scale: float, chunk: int) -> tuple[Tensor, Tensor]:
    """Scores of each query against its own L window slots (`local_windows`), by chunks of queries."""
    batch, seq_len, n_heads, d = q.shape
    kv_heads, L = k.shape[2], cc.local_length()
    group = n_heads // kv_heads
    out = q.new_empty(batch, seq_len, n_heads, d)
    lse = q.new_empty(batch, n_heads, seq_len)
    for t0 in range(0, seq_len, chunk):
        t1 = min(t0 + chunk, seq_len)
        lo = max(t0 - L + 1, 0)  # slots before position 0 are zero padding, masked below
        kw = local_windows(k[:, lo:t1], L)[:, t0 - lo:]  # [batch, t, kv_head, d, L]
        vw = local_windows(v[:, lo:t1], L)[:, t0 - lo:]
        scores = torch.einsum("btkgd,btkdl->btkgl", q[:, t0:t1].reshape(batch, t1 - t0, kv_heads, group, d), kw) * scale
        t = torch.arange(t0, t1, device=q.device)[:, None]
        allowed = local_key_mask(cc, t, t - L + 1 + torch.arange(L, device=q.device)[None, :])  # [t, L]
        scores = scores.masked_fill(~allowed[None, :, None, None, :], float("-inf"))
        s = scores.logsumexp(-1)  # [batch, t, kv_head, group]
        p = (scores - s[..., None].masked_fill(s[..., None] == float("-inf"), 0.0)).exp()
        out[:, t0:t1] = torch.einsum("btkgl,btkdl->btkgd", p, vw).reshape(batch, t1 - t0, n_heads, d)
        lse[:, :, t0:t1] = s.reshape(batch, t1 - t0, n_heads).transpose(1, 2)
    return out, lse


def _local_flash(cc: CompressionConfig, q: Tensor, k: Tensor, v: Tensor, scale: float, chunk: int) -> tuple[Tensor, Tensor]:
    """Flash attention of each chunk of queries over the tokens its local windows reach (chunk +
    L - 1 keys, masked to each query's own window)."""
    batch, seq_len, n_heads, d = q.shape
    L = cc.local_length()
    out = q.new_empty(batch, seq_len, n_heads, d)
    lse = q.new_empty(batch, n_heads, seq_len)
    for t0 in range(0, seq_len, chunk):
        t1 = min(t0 + chunk, seq_len)
        lo = max(t0 - L + 1, 0)
        t = torch.arange(t0, t1, device=q.device)[:, None]
        allowed = local_key_mask(cc, t, torch.arange(lo, t1, device=q.device)[None, :])
        mask = torch.zeros(allowed.shape, dtype=q.dtype, device=q.device).masked_fill_(~allowed, float("-inf"))
        o, s = _flash_with_lse(q[:, t0:t1].transpose(1, 2), k[:, lo:t1].transpose(1, 2), v[:, lo:t1].transpose(1, 2),
                               0.0, False, attn_mask=mask, scale=scale)
        none = ~allowed.any(dim=-1)  # "tail" windows are empty right after an entry completes
        if tracing() or none.any():  # masking nothing is a no-op; the test reads a value on the host
            o, s = o.masked_fill(none[:, None], 0.0), s.masked_fill(none, float("-inf"))
        out[:, t0:t1] = o.transpose(1, 2)
        lse[:, :, t0:t1] = s
    return out, lse


def fast_joint_attention(
    cc: CompressionConfig,
    q: Float[Tensor, "batch pos head d"],
    k: Float[Tensor, "batch pos kv_head d"],
    v: Float[Tensor, "batch pos kv_head d"],
    ek: Float[Tensor, "batch entry kv_head d"],
    ev: Float[Tensor, "batch entry kv_head d"],
    scale: float,
    sink: Float[Tensor, " head"] | None,
) -> Float[Tensor, "batch pos head d"]:
    """The attention of a compressed layer when no hook reads its scores: by phase where
    `usable`, else SDPA over query blocks (`joint_attention.fused_joint_attention`)."""
    if usable(cc, q, k, v, ek, ev):
        return phase_joint_attention(cc, q, k, v, ek, ev, scale, sink)
    return fused_joint_attention(cc, q, k, v, ek, ev, scale, sink)


def phase_joint_attention(
    cc: CompressionConfig,
    q: Float[Tensor, "batch pos head d"],
    k: Float[Tensor, "batch pos kv_head d"],
    v: Float[Tensor, "batch pos kv_head d"],
    ek: Float[Tensor, "batch entry kv_head d"],
    ev: Float[Tensor, "batch entry kv_head d"],
    scale: float,
    sink: Float[Tensor, " head"] | None,
    chunk: int | None = None,
) -> Float[Tensor, "batch pos head d"]:
    """The joint softmax over visible entries, local tokens and the sink, as the merge of its parts."""
    o_e, lse_e = _entries(cc, q, ek, ev, scale)
    o_l, lse_l = _local(cc, q, k, v, scale, chunk)
    lse_e, lse_l = lse_e.transpose(1, 2)[..., None], lse_l.transpose(1, 2)[..., None]  # [batch, pos, head, 1]
    top = torch.maximum(lse_e, lse_l)
    if sink is not None:
        top = torch.maximum(top, sink.view(1, 1, -1, 1).to(top.dtype))
    top = top.masked_fill(top == float("-inf"), 0.0)  # no key at all: both weights are 0
    w_e, w_l = (lse_e - top).exp(), (lse_l - top).exp()
    total = w_e + w_l
    if sink is not None:
        total = total + (sink.view(1, 1, -1, 1).to(top.dtype) - top).exp()
    # in place: both parts are this function's own buffers (no autograd on this path)
    return o_e.mul_(w_e).add_(o_l.mul_(w_l)).div_(total.clamp_min(torch.finfo(total.dtype).tiny))
