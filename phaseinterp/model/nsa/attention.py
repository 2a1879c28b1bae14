"""NSA attention, step by step: the library's `SparseAttention` holds the weights, this module runs
its forward one step at a time so that hook points sit between the steps.

The library (native-sparse-attention-pytorch 0.2.3, `SparseAttention.forward`, training path,
`causal=True`, no Triton or flex attention) computes, for input x [batch, pos, d_model]:

1. q, k, v = `to_qkv(x)`; **compressed branch**: the raw (unrotated) k and v of positions
   0 .. floor(T/S)*S - 1 are cut into windows of W every S (W - S zeros prepended), added to the
   learned `k_intrablock_positions` / `v_intrablock_positions`, and folded by an MLP
   (`k_compress`, `v_compress`) into one entry per window; one learned memory entry
   (`compress_mem_kv`) is prepended. Entry j (ending at jS + S - 1) is visible to query t iff
   jS + S - 1 < t (strictly: a query does not read the window that ends at itself); the memory
   entry always. Unrotated queries attend over them (scale d_head^-0.5).
2. **selection branch**: the compressed logits (masked ones at -max/10), averaged over the query
   heads of a KV head, get a -1e3 column prepended, a softmax, and the column dropped: the
   importance of each block. The top k blocks with importance > 1e-10 are read exactly (rotated
   q and k), together with the causal part of the query's own block.
3. **sliding branch**: rotated q attends to rotated keys t - w .. t.
4. gates = sigmoid(`strategy_combine_mlp(x)`) per head and branch (not normalized);
   out = g_compress z_compress + g_select z_select + g_sliding z_sliding, heads merged,
   `combine_heads`.

Masks here are dense [pos, pos] boolean matrices (the library gathers blocks instead), so this is
an independent implementation of the same function; `tests/test_nsa.py` checks it against
`SparseAttention.forward` on random input.
"""

from __future__ import annotations

import contextlib
import io

import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float
from torch import Tensor, nn

from phaseinterp.model.hook_point import HookPoint
from phaseinterp.model.nsa.config import NSAConfig

#: Branch order of the gates and of `hook_branch_gates`' last axis (the library's stacking order).
BRANCHES = ("compress", "select", "sliding")

INSTALL_HINT = "pip install 'phaseinterp[nsa]'"


def require_nsa():
    """The library's `SparseAttention` class; ImportError with the install command when missing."""
    try:
        from native_sparse_attention_pytorch import SparseAttention
    except ImportError as e:
        raise ImportError(f"NSA models need the optional package native-sparse-attention-pytorch: {INSTALL_HINT}") from e
    return SparseAttention


def _max_neg(t: Tensor) -> float:
    return -torch.finfo(t.dtype).max


class _Hooks(nn.Module):
    """A named group of hook points (so names read `attn.select.hook_indices`)."""

    def __init__(self, *names: str):
        super().__init__()
        for name in names:
            setattr(self, name, HookPoint())


def compressed_visible(seq_len: int, n_entries: int, stride: int, device=None) -> Bool[Tensor, "pos entry"]:
    """[pos, entry] visibility of compressed entries (memory entry excluded): entry j ends at
    jS + S - 1 and is visible to query t iff that end is < t (NSA's rule, one step later than
    our compressor's `end <= t`)."""
    ends = (torch.arange(n_entries, device=device) + 1) * stride - 1
    return ends[None, :] < torch.arange(seq_len, device=device)[:, None]


class NSAAttention(nn.Module):
    """One NSA layer with hook points (names and shapes in docs/nsa.md).

    Attributes:
        nsa: the library's `SparseAttention` (weights; `nsa(x)` is the library's own forward).
    """

    def __init__(self, cfg: NSAConfig, layer: int):
        super().__init__()
        SparseAttention = require_nsa()
        self.cfg, self.layer = cfg, layer
        # the library prints a notice for k = 0 (an ablation it supports); the config says it already
        with contextlib.redirect_stdout(io.StringIO()):
            self.nsa = SparseAttention(
                dim=cfg.d_model, dim_head=cfg.d_head, heads=cfg.n_heads, kv_heads=cfg.n_kv_heads,
                sliding_window_size=cfg.sliding_window, compress_block_size=cfg.compress_block,
                compress_block_sliding_stride=cfg.compress_stride, selection_block_size=cfg.selection_block,
                num_selected_blocks=cfg.num_selected, causal=True, norm=False,  # our block's ln1 normalizes
                compress_mlp_expand_factor=cfg.compress_mlp_expand_factor)
        for name in ("hook_q", "hook_k", "hook_v", "hook_rot_q", "hook_rot_k", "hook_pattern_compress",
                     "hook_z_compress", "hook_z_select", "hook_z_sliding", "hook_branch_gates", "hook_z"):
            setattr(self, name, HookPoint())
        self.compress_k = _Hooks("hook_out")
        self.compress_v = _Hooks("hook_out")
        self.select = _Hooks("hook_scores", "hook_indices")

    # ---- the three branches --------------------------------------------------------------------
    def _compress(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Compressed entries [batch, kv_head, entry, d_head] of raw k, v [batch, kv_head, pos, d_head]."""
        c, nsa = self.cfg, self.nsa
        W, S = c.compress_block, c.compress_stride
        b, h, T, d = k.shape
        m = T // S
        out = []
        for x, pos_emb, mlp in ((k, nsa.k_intrablock_positions, nsa.k_compress),
                                (v, nsa.v_intrablock_positions, nsa.v_compress)):
            if m == 0:
                windows = x.new_zeros(b, h, 0, W, d)
            else:
                padded = F.pad(x[:, :, : m * S], (0, 0, W - S, 0))            # zeros before position 0
                windows = padded.unfold(2, W, S).transpose(-1, -2) + pos_emb[:, None]  # [b, h, m, W, d]
            out.append(mlp(windows))
        return out[0], out[1]

    def _selection(self, csim: Tensor, T: int) -> tuple[Tensor, Tensor]:
        """(importance [batch, kv_head, pos, entry], chosen block indices [batch, kv_head, pos, k'],
        -1 where the library's importance threshold drops a pick; k' = min(k, entries))."""
        c = self.cfg
        G = c.n_heads // c.n_kv_heads
        scores = csim[..., 1:]                                             # drop the memory entry
        b, _, _, m = scores.shape
        scores = scores.view(b, c.n_kv_heads, G, T, m).mean(2)
        probs = F.pad(scores, (1, 0), value=-1e3).softmax(-1)[..., 1:]    # a -1e3 "none" column, as NSA
        k = min(c.num_selected, m)
        if k == 0:
            return probs, torch.zeros(b, c.n_kv_heads, T, 0, dtype=torch.long, device=csim.device)
        values, indices = probs.topk(k, dim=-1)
        return probs, torch.where(values > 1e-10, indices, torch.full_like(indices, -1))

    def _select_mask(self, indices: Tensor, T: int) -> Tensor:
        """[batch, kv_head, pos, pos] keys the selection branch reads: chosen blocks that are
        visible (edits of the indices cannot break causality), plus the query's own block causally."""
        B = self.cfg.selection_block
        n_blocks = -(-T // B)
        pos = torch.arange(T, device=indices.device)
        block = pos // B
        chosen = torch.zeros(*indices.shape[:3], n_blocks + 1, dtype=torch.bool, device=indices.device)
        chosen.scatter_(-1, torch.where(indices >= 0, indices, n_blocks), True)  # -1 -> a spare column
        chosen = chosen[..., :n_blocks] & compressed_visible(T, n_blocks, B, indices.device)
        own = (block[:, None] == block[None, :]) & (pos[None, :] <= pos[:, None])
        return chosen[..., block] | own

    @staticmethod
    def _attend(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, fill: float | None = None) -> tuple[Tensor, Tensor]:
        """Softmax attention of q [b, H, i, d] over k, v [b, H, j, d] where mask [.., i, j] is True."""
        sim = q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5
        sim = sim.masked_fill(~mask, _max_neg(sim) if fill is None else fill)
        attn = sim.softmax(-1)
        return attn @ v, attn

    def forward(self, x: Float[Tensor, "batch pos d_model"]) -> Float[Tensor, "batch pos d_model"]:
        c, nsa = self.cfg, self.nsa
        b, T, _ = x.shape
        H, K, d, G = c.n_heads, c.n_kv_heads, c.d_head, c.n_heads // c.n_kv_heads
        q, k, v = nsa.to_qkv(x).split(nsa.qkv_split, dim=-1)
        q = self.hook_q(q.view(b, T, H, d)).transpose(1, 2)                # [b, H, T, d]
        k = self.hook_k(k.view(b, T, K, d)).transpose(1, 2)                # [b, K, T, d]
        v = self.hook_v(v.view(b, T, K, d)).transpose(1, 2)

        # 1. compressed branch (unrotated q and entries; the memory entry first)
        ck, cv = self._compress(k, v)
        ck = self.compress_k.hook_out(ck.transpose(1, 2)).transpose(1, 2)  # hooks: [b, entry, K, d]
        cv = self.compress_v.hook_out(cv.transpose(1, 2)).transpose(1, 2)
        m = ck.shape[2]
        mem_k, mem_v = (t[None].expand(b, -1, -1, -1) for t in nsa.compress_mem_kv)
        ck, cv = torch.cat([mem_k, ck], 2), torch.cat([mem_v, cv], 2)
        visible = F.pad(compressed_visible(T, m, c.compress_stride, x.device), (1, 0), value=True)
        csim = q @ ck.repeat_interleave(G, 1).transpose(-1, -2) * d ** -0.5
        csim = csim.masked_fill(~visible, _max_neg(csim) // 10)           # NSA's fill: its scores feed selection
        cattn = self.hook_pattern_compress(csim.softmax(-1))
        z_compress = cattn @ cv.repeat_interleave(G, 1)

        # 2. selection branch (rotated q, k)
        probs, indices = self._selection(csim, T)
        self.select.hook_scores(probs.transpose(1, 2))                    # [b, T, K, entry] (observed)
        indices = self.select.hook_indices(indices.transpose(1, 2)).transpose(1, 2)
        q = self.hook_rot_q(nsa.rotary_emb.rotate_queries_or_keys(q).transpose(1, 2)).transpose(1, 2)
        k = self.hook_rot_k(nsa.rotary_emb.rotate_queries_or_keys(k).transpose(1, 2)).transpose(1, 2)
        k_rep, v_rep = k.repeat_interleave(G, 1), v.repeat_interleave(G, 1)
        select_mask = self._select_mask(indices, T).repeat_interleave(G, 1)
        z_select, _ = self._attend(q, k_rep, v_rep, select_mask)

        # 3. sliding branch: keys t - w .. t
        pos = torch.arange(T, device=x.device)
        dist = pos[:, None] - pos[None, :]
        z_sliding, _ = self._attend(q, k_rep, v_rep, (dist >= 0) & (dist <= c.sliding_window))

        # 4. gates and mixing (hooks: [b, T, H, d])
        z_compress = self.hook_z_compress(z_compress.transpose(1, 2))
        z_select = self.hook_z_select(z_select.transpose(1, 2))
        z_sliding = self.hook_z_sliding(z_sliding.transpose(1, 2))
        gates = self.hook_branch_gates(nsa.to_strategy_combine(x).permute(0, 2, 1, 3))  # [b, T, H, 3]
        z = self.hook_z(gates[..., 0:1] * z_compress + gates[..., 1:2] * z_select + gates[..., 2:3] * z_sliding)
        return nsa.combine_heads(z.reshape(b, T, H * d))


__all__ = ["BRANCHES", "INSTALL_HINT", "NSAAttention", "compressed_visible", "require_nsa"]
