"""The final-position path through a training-free compressed layer (`CompressedLlamaAttention`).

An edit at the final (query) position t of a row changes nothing at positions < t, so every
compressed entry whose window ends before t, and every exact key and value before t, is the base
run's. Only the entry whose window ends exactly at t (it holds t and is visible to t) changes: it
is rebuilt from the base run's keys and values of positions t - W + 1 .. t - 1 plus the unit's own
key and value at t (for the `score` rule, weighted by the unit's own query at t). Entries ending
after t are invisible to t. `CompressedPrefix.from_base` keeps, per row group sharing t, what
position t reads; `final_position_attention` is the layer's one-position forward for many units
at once (rows unit-major), one softmax over the shared prefix and each unit's own keys, as the
full forward computes it. `backends.kv_cache.KVCacheFinalRun` builds the prefixes from its base
run and passes them as `shared_prefix` through the model's own decoder layers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor

from phaseinterp.backends.prompts import fill_rows


def _rotate_half(x: Tensor) -> Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def _rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x [batch, n, heads, d] rotated by cos/sin [batch or 1, n, d]."""
    return x * cos[:, :, None] + _rotate_half(x) * sin[:, :, None]


@dataclass
class CompressedPrefix:
    """What position t of one compressed layer reads from the base run, for the rows sharing t.

    Attributes:
        t: the query position.
        keys, values: [b, m, kv_head, d_head], the base run's entries that end before t (rotated
            keys), then its exact keys (rotated) and values of the sink and local positions < t.
        window: None when no window ends at t; else (entry index, [b, W - 1, kv, d] keys the
            entry pools (before RoPE unless the anchor is `post`), [b, W - 1, kv, d] values,
            [b, W - 1, kv, d] rotated keys (the `score` rule's)) of positions t - W + 1 .. t - 1.
        self_visible: whether t sees its own key exactly (local window >= 1).
    """

    t: int
    keys: Tensor
    values: Tensor
    window: tuple[int, Tensor, Tensor, Tensor] | None
    self_visible: bool

    @staticmethod
    def plan(spec: Any, t: int, sliding_window: int | None = None) -> dict[str, Any]:
        """Which base-run pieces position t reads: entries `lo` .. `n_old` - 1 (ends < t; `lo` > 0
        only on a sliding-window layer, whose query reads positions t - sliding_window + 1 .. t),
        the exact positions `exact` (< t: sink, then local), the entry `new` whose window ends at t
        (or None), and `positions` = `exact` then that window's positions before t."""
        n = spec.n_entries(t + 1)
        ends = torch.arange(n) * spec.stride + spec.window - 1
        n_old = int((ends < t).sum())
        new = n_old if n > n_old else None  # ends increase: at most one ends at t
        first = 0 if sliding_window is None else t - sliding_window + 1  # the first position t may read
        starts = ends - spec.window + 1
        lo = min(int((starts < first).sum()), n_old)  # starts increase: the hidden entries come first
        if new is not None and new * spec.stride < first:
            new = None  # the window reaches past the sliding window: invisible
        first_local = t - spec.local + 1
        exact = [p for p in range(min(spec.sink, t)) if first <= p < first_local] + list(range(max(first_local, first, 0), t))
        win = [] if new is None else list(range(new * spec.stride, t))
        return {"lo": lo, "n_old": n_old, "n_exact": len(exact), "new": new,
                "positions": torch.tensor(exact + win, dtype=torch.long)}

    @classmethod
    def capture(cls, attn: Any, layer_groups: list[tuple[int, Tensor]], store: dict[int, dict[str, Tensor]],
                offset: list[int] | None = None) -> list:
        """Forward hooks on `attn`'s hook points that keep, for group i (t, rows) in `store[i]`,
        the rows' keys before RoPE and values at `plan`'s positions and their entries ending
        before t (sliced as the base run passes: nothing else of the layer is held). `rows` index
        the whole base run; when it runs in chunks of prompts, `offset[0]` is the current chunk's
        first row (0 by default)."""
        plans = [cls.plan(attn.spec, t, getattr(attn, "sliding_window", None)) for t, _ in layer_groups]

        def keep(name: str, entries: bool):
            def hook(module, args, out):
                lo = 0 if offset is None else offset[0]
                for i, ((_, rows), plan) in enumerate(zip(layer_groups, plans)):
                    rows = rows.to(out.device)
                    here = (rows >= lo) & (rows < lo + len(out))
                    if not here.any():
                        continue
                    x = out[rows[here] - lo]
                    sel = x[:, plan["lo"]: plan["n_old"]] if entries else x[:, plan["positions"].to(out.device)]
                    fill_rows(store.setdefault(i, {}), name, len(rows), here, sel.detach())
            return hook

        return [attn.hook_k.register_forward_hook(keep("k", False)),
                attn.hook_v.register_forward_hook(keep("v", False)),
                attn.hook_rot_entries.register_forward_hook(keep("k_ent", True)),
                attn.compress_v.hook_out.register_forward_hook(keep("v_ent", True))]

    @classmethod
    def build(cls, attn: Any, t: int, kept: dict[str, Tensor]) -> "CompressedPrefix":
        """The prefix of position t from what `capture` kept for its group."""
        spec = attn.spec
        plan = cls.plan(spec, t, getattr(attn, "sliding_window", None))
        k, v = kept["k"], kept["v"]
        pos = plan["positions"].to(k.device)
        k_rot = _rope(k, *attn._cos_sin(k, pos.to(torch.float32))) if len(pos) else k
        e = plan["n_exact"]
        keys = torch.cat([kept["k_ent"], k_rot[:, :e]], 1)
        values = torch.cat([kept["v_ent"], v[:, :e]], 1)
        window = None
        if plan["new"] is not None:
            pooled = (k_rot if spec.anchor == "post" else k)[:, e:]
            window = (plan["new"], pooled, v[:, e:], k_rot[:, e:])
        # t reads its own key exactly through the local window, or (local = 0) as a sink slot
        return cls(t, keys, values, window, spec.local >= 1 or t < spec.sink)


def final_position_attention(attn: Any, x: Float[Tensor, "row 1 d_model"], position_embeddings: tuple[Tensor, Tensor],
                             prefix: CompressedPrefix) -> tuple[Tensor, None]:
    """`attn` (a `CompressedLlamaAttention`) at position t for `x`, rows unit-major (unit * b + row
    of the group), reading `prefix`; the output projection applied, as the layer's forward."""
    spec, d, G = attn.spec, attn.head_dim, attn.group
    b = prefix.keys.shape[0]
    n_rows = x.shape[0]
    U = n_rows // b
    cos, sin = position_embeddings
    q = _rope(attn.heads("q", x), cos, sin)[:, 0]  # [rows, H, d]
    k_pre = attn.heads("k", x)
    k_rot = _rope(k_pre, cos, sin)[:, 0]
    v = attn.v_proj(x).view(n_rows, -1, d)
    K = k_rot.shape[1]
    qg = q.view(U, b, K, G, d)
    own_k: list[Tensor] = []  # [U, b, K, d] each
    own_v: list[Tensor] = []
    if prefix.window is not None:
        new, pooled, win_v, win_krot = prefix.window
        expand = lambda w: w.expand(U, *w.shape)  # noqa: E731  (the base window, shared by every unit)
        own_pooled = (k_rot if spec.anchor == "post" else k_pre[:, 0]).view(U, b, 1, K, d)
        keys = torch.cat([expand(pooled), own_pooled], 2)  # [U, b, W, K, d]
        vals = torch.cat([expand(win_v), v.view(U, b, 1, K, d)], 2)
        a = _pool_weights(attn, qg, torch.cat([expand(win_krot), k_rot.view(U, b, 1, K, d)], 2))
        ek = torch.einsum("ubwk,ubwkd->ubkd", a, keys)
        ev = torch.einsum("ubwk,ubwkd->ubkd", a, vals)
        if spec.anchor != "post":
            where = torch.tensor([new * spec.stride + attn.anchor_shift], device=x.device, dtype=cos.dtype)
            ek = _rope(ek.reshape(n_rows, 1, K, d), *attn._cos_sin(ek, where)).view(U, b, K, d)
        own_k.append(ek)
        own_v.append(ev)
    if prefix.self_visible:
        own_k.append(k_rot.view(U, b, K, d))
        own_v.append(v.view(U, b, K, d))
    scores = [torch.einsum("ubkgd,bnkd->ubkgn", qg, prefix.keys)]
    scores += [torch.einsum("ubkgd,ubkd->ubkg", qg, ko)[..., None] for ko in own_k]
    s = torch.cat(scores, -1) * attn.scaling
    n = prefix.keys.shape[1]
    if s.shape[-1] == 0:  # nothing visible (local=0, before the first window completes): zero output
        z = qg.new_zeros(U, b, K, G, d)
    else:
        p = s.softmax(-1)
        z = torch.einsum("ubkgn,bnkd->ubkgd", p[..., :n], prefix.values)
        for i, vo in enumerate(own_v):
            z = z + p[..., n + i, None] * vo[:, :, :, None]
    return attn.o_proj(z.reshape(n_rows, 1, -1)), None


def _pool_weights(attn: Any, q: Float[Tensor, "unit row kv group d"], k_rot: Float[Tensor, "unit row window kv d"]
                  ) -> Float[Tensor, "unit row window kv"]:
    """a_i of the window ending at t (`CompressedLlamaAttention.pool_weights` for one window)."""
    spec = attn.spec
    U, b, W, K, _ = k_rot.shape
    if spec.rule == "mean":
        return k_rot.new_full((U, b, W, K), 1.0 / W)
    if spec.rule == "evict":
        a = k_rot.new_zeros((U, b, W, K))
        a[:, :, spec.kept_offset] = 1.0
        return a
    scores = torch.einsum("ubkgd,ubwkd->ubkgw", q, k_rot) * attn.scaling
    return scores.softmax(-1).mean(3).permute(0, 1, 3, 2)
