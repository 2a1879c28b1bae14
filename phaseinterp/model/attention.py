"""Grouped-query attention with QK-norm and RoPE; full causal or compressed (per-layer config).

Hooks (TransformerLens names and shapes): `hook_q` [batch, pos, head, d_head] (projection, before
QK-norm), `hook_k`, `hook_v` [batch, pos, kv_head, d_head], `hook_rot_q`, `hook_rot_k` (after
QK-norm and RoPE), `hook_attn_scores`, `hook_pattern` [batch, head, q_pos, key], `hook_z`
[batch, pos, head, d_head]. Compressed layers add `hook_rot_entries` [batch, entry, kv_head,
d_head] (key entries after RoPE) and compressor branches `compress_k`/`compress_v` (or one
`compress_kv` when K/V are tied). Query head h reads KV head h // (n_heads / n_kv_heads).

Scores and pattern are materialized only when a hook is attached to them (or `explicit` is set);
otherwise attention runs through `scaled_dot_product_attention` and those hooks do not fire. A
compressed layer then takes one of two paths (`model.phase_attention`): on CPU without autograd,
causal flash attention over the entries by phase; otherwise SDPA over query blocks. They agree to
float rounding (about 1e-6), not bit for bit, so compare outputs computed in the same grad mode.
"""

from __future__ import annotations

import contextlib
import math
from typing import Iterator

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor, nn

from phaseinterp.config import CompressionConfig, ModelConfig
from phaseinterp.model import joint_attention as joint
from phaseinterp.model.phase_attention import fast_joint_attention
from phaseinterp.model.compressor import Compressor, entry_rope_positions
from phaseinterp.model.layers import RMSNorm, apply_rope, rope_angles
from phaseinterp.model.hook_point import HookPoint


def in_nnsight_trace(module: nn.Module) -> bool:
    """Is `module` instrumented by nnsight (its `forward` replaced by a controller) and is a trace
    running? Read from the controller's state, without importing nnsight."""
    state = getattr(module.__dict__.get("forward"), "state", None)
    active = getattr(state, "active", None)
    return callable(active) and active()[0] is not None


_ENGINE_TRACES = [0]  # a module-level count, not a context variable: nnsight may run the model in another thread


@contextlib.contextmanager
def engine_trace() -> Iterator[None]:
    """Marks the backends' own traces (`Backend._trace`), which read and edit only their sites (heads, layers,
    gates, entries), never attention patterns or a press's kept sets: inside one, layers need not build those."""
    _ENGINE_TRACES[0] += 1
    try:
        yield
    finally:
        _ENGINE_TRACES[0] -= 1


def nnsight_may_read(module: nn.Module) -> bool:
    """Could the running nnsight trace read `module`'s output: a trace is running and it is not the engine's."""
    return not _ENGINE_TRACES[0] and in_nnsight_trace(module)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__()
        self.cfg = cfg
        self.cc: CompressionConfig | None = cfg.compression(layer)
        H, K, D, d = cfg.n_heads, cfg.n_kv_heads, cfg.d_model, cfg.d_head
        self.W_Q = nn.Parameter(torch.empty(H, D, d))
        self.W_K = nn.Parameter(torch.empty(K, D, d))
        self.W_V = nn.Parameter(torch.empty(K, D, d))
        self.W_O = nn.Parameter(torch.empty(H, d, D))
        self.q_norm = RMSNorm(d, cfg.norm_eps) if cfg.qk_norm else None
        self.k_norm = RMSNorm(d, cfg.norm_eps) if cfg.qk_norm else None
        self.scale = 1.0 / math.sqrt(d)
        self.explicit = False
        cc = self.cc
        if cc is not None:
            args = (cc, D, K, d, cfg.norm_eps)
            if cc.kv == "tied":
                self.compress_kv = Compressor(*args)
            else:
                self.compress_k = Compressor(*args)
                self.compress_v = Compressor(*args)
            self.sink = nn.Parameter(torch.zeros(H)) if cc.sink else None
            self.hook_rot_entries = HookPoint()
        for name in ("q", "k", "v", "rot_q", "rot_k", "attn_scores", "pattern", "z"):
            setattr(self, f"hook_{name}", HookPoint())

    @property
    def rope_dims(self) -> int:
        cc, d = self.cc, self.cfg.d_head
        if cc is None or cc.rope == "full":
            return d
        return 0 if cc.rope == "none" else cc.rope_dims

    @property
    def rope_style(self) -> str:
        return "neox" if self.cc is None else self.cc.rope_style

    @property
    def rope_theta(self) -> float:
        return self.cfg.rope_theta if self.cc is None or self.cc.rope_theta is None else self.cc.rope_theta

    def rotate(self, x: Float[Tensor, "*lead pos head d"], positions: Int[Tensor, " pos"]) -> Float[Tensor, "*lead pos head d"]:
        return apply_rope(x, rope_angles(positions, self.rope_dims, self.rope_theta), self.rope_style)

    def needs_explicit(self) -> bool:
        """Materialize scores and patterns: when asked (`explicit`), when a TransformerLens hook
        reads them, or inside an nnsight trace (which may read them; nnsight sets no hooks) other than the
        backends' own (`engine_trace`)."""
        if self.explicit or self.hook_attn_scores.has_hooks() or self.hook_pattern.has_hooks():
            return True
        return nnsight_may_read(self.hook_pattern) or nnsight_may_read(self.hook_attn_scores)

    def forward(self, x: Float[Tensor, "batch pos d_model"]) -> Float[Tensor, "batch pos d_model"]:
        seq_len = x.shape[1]
        positions = torch.arange(seq_len, device=x.device)
        q = self.hook_q(torch.einsum("btd,hde->bthe", x, self.W_Q))
        k = self.hook_k(torch.einsum("btd,hde->bthe", x, self.W_K))
        v = self.hook_v(torch.einsum("btd,hde->bthe", x, self.W_V))
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q = self.hook_rot_q(self.rotate(q, positions))
        k = self.hook_rot_k(self.rotate(k, positions))
        z = self._full(q, k, v) if self.cc is None else self._compressed(x, q, k, v)
        z = self.hook_z(z)
        return torch.einsum("bthe,hed->btd", z, self.W_O)

    def _full(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        group = self.cfg.n_heads // self.cfg.n_kv_heads
        if not self.needs_explicit():
            out = F.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True, enable_gqa=group > 1
            )
            return out.transpose(1, 2)
        seq_len = q.shape[1]
        kr = k.repeat_interleave(group, dim=2)
        scores = torch.einsum("bqhd,bkhd->bhqk", q, kr) * self.scale
        causal = torch.ones(seq_len, seq_len, dtype=torch.bool, device=q.device).tril()
        scores = self.hook_attn_scores(scores.masked_fill(~causal, float("-inf")))
        pattern = self.hook_pattern(scores.softmax(dim=-1))
        return torch.einsum("bhqk,bkhd->bqhd", pattern, v.repeat_interleave(group, dim=2))

    def entries(self, x: Float[Tensor, "batch pos d_model"]
                ) -> tuple[Float[Tensor, "batch entry kv_head d_head"], Float[Tensor, "batch entry kv_head d_head"]]:
        """Key entries (RoPE at each entry's position) and value entries, [batch, entry, kv_head, d]."""
        cc = self.cc
        if cc.kv == "tied":
            ek = ev = self.compress_kv(x)
        else:
            ek, ev = self.compress_k(x), self.compress_v(x)
        rope_positions = entry_rope_positions(cc, ek.shape[1], x.device)
        return self.hook_rot_entries(self.rotate(ek, rope_positions)), ev

    def _scores_unread(self, scores: Tensor) -> bool:
        """May the softmax overwrite the scores? Not if a hook or nnsight may hold them or a
        gradient flows through them."""
        if self.hook_attn_scores.has_hooks() or nnsight_may_read(self.hook_attn_scores):
            return False
        return not (torch.is_grad_enabled() and scores.requires_grad)

    def _compressed(self, x: Tensor, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        cc = self.cc
        ek, ev = self.entries(x)
        if self.needs_explicit() or cc.local_length() == 0:
            scores = self.hook_attn_scores(joint.explicit_scores(cc, q, k, ek, self.scale))
            pattern = self.hook_pattern(joint.softmax_with_sink(scores, self.sink, inplace=self._scores_unread(scores)))
            return joint.explicit_mix(cc, pattern, v, ev)
        return fast_joint_attention(cc, q, k, v, ek, ev, self.scale, self.sink)
