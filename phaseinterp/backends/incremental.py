"""Recompute one query position per row after an edit, reusing the base run for everything else.

An edit at the final position t of a row (a head's output `z`, or the residual stream entering a
layer) cannot change anything at positions < t. From the edited layer upward only position t is
recomputed; its attention reads the base run's rotated keys and values of earlier positions and
its compressed entries, except the entry whose window ends exactly at t (it contains t, is
visible to t, and is rebuilt from the base layer inputs of its window plus the new input at t).
Entries ending after t are invisible to t. The result equals a full forward with the same edit
(tested against the hook path); many units run together as one batched computation.

Part of `HookedBackend` (our model's fast path): interventions reach it through
`backend.final_position_run(tokens, query_pos)`, never directly.
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float, Int
from torch import Tensor

from phaseinterp.backends.prompts import units_per_forward
from phaseinterp.backends.tl_hooks import final_logits, has_hooks, model_device
from phaseinterp.checks import check_at_least_one
from phaseinterp.model import joint_attention as joint
from phaseinterp.units import check_layers

KINDS = ("z", "resid_pre")


def checked_query_pos(query_pos: Tensor, tokens: Tensor) -> Tensor:
    """`query_pos` as long on `tokens`' device, after checking it holds one position of `tokens` per row."""
    T = tokens.shape[1]
    query_pos = query_pos.to(tokens.device).long()
    if query_pos.shape != (tokens.shape[0],) or ((query_pos < 0) | (query_pos >= T)).any():
        raise ValueError(f"query_pos must hold one position in [0, {T - 1}] per row; got {query_pos.tolist()}")
    return query_pos


def final_run_inputs(backend, tokens: Tensor, query_pos: Tensor) -> tuple[Tensor, Tensor]:
    """(tokens, query_pos) of a final-position run on `backend`, checked; refuses active edits (the run
    recomputes position t without them)."""
    if backend.has_hooks():
        raise ValueError("the final-position path ignores active edits (an enclosing intervene or selecting "
                         "block): allowed outside them (or method='hooks')")
    tokens = backend._check_tokens(tokens)
    return tokens, checked_query_pos(query_pos, tokens)


class _Group:
    """Rows sharing one query position t, and what each layer needs to recompute t."""

    def __init__(self, t: int, rows: Int[Tensor, " row"], model):
        self.t, self.rows = t, rows
        self.layers: list[dict] = []
        for block in model.blocks:
            cc = block.attn.cc
            info: dict = {}
            if cc is None:
                info["ctx"] = torch.arange(t)
                info["self"] = True
            else:
                T = t + 1
                ends = joint.entry_ends(cc, T) if cc.n_entries(T) else torch.zeros(0, dtype=torch.long)
                info["n_old"] = int((ends < t).sum())
                new = (ends == t).nonzero()
                info["new"] = int(new[0, 0]) if len(new) else None
                pos = torch.arange(t)
                tt = torch.tensor(t)
                info["ctx"] = pos[joint.local_key_mask(cc, tt, pos)]
                info["self"] = bool(joint.local_key_mask(cc, tt, tt))
                if info["new"] is not None:
                    info["win"] = torch.arange(max(cc.window_start(info["new"]), 0), t)
            self.layers.append(info)
        self.store: list[dict[str, Tensor]] = [{} for _ in model.blocks]


class FinalPositionRun:
    """A base forward, cached so that the query position of every row can be recomputed after
    edits at that position, for many edits at once.

    Args:
        model: a HookedCompressedTransformer with no hooks attached.
        tokens: [batch, pos] token ids.
        query_pos: [batch] the position scored in each row (edits apply there).

    Attributes:
        logits: base next-token logits at `query_pos`, [batch, vocab].

    Example:
        >>> run = FinalPositionRun(model, batch.tokens, batch.query_pos)
        >>> z = run.base_z(0)  # [batch, head, d_head]
        >>> mask = torch.tensor([[True, False, False, False]])
        >>> run.run_z([0], mask, torch.zeros(1, *z.shape)).shape  # [1, batch, vocab]
        torch.Size([1, 8, 512])
    """

    def __init__(self, model, tokens: Int[Tensor, "batch pos"], query_pos: Int[Tensor, " batch"]):
        if has_hooks(model):
            raise ValueError("FinalPositionRun needs a model without hooks attached (their effect would be "
                             "ignored when position t is recomputed); remove them or use method='hooks'")
        self.model = model
        dev = model_device(model)
        self.tokens, self.query_pos = tokens.to(dev), query_pos.to(dev)
        T = tokens.shape[1]
        if ((query_pos < 0) | (query_pos >= T)).any():
            bad = int(query_pos[(query_pos < 0) | (query_pos >= T)][0])
            raise ValueError(f"query_pos={bad} is invalid: allowed 0..{T - 1}")
        self.groups = [_Group(int(t), (self.query_pos == t).nonzero()[:, 0], model)
                       for t in torch.unique(self.query_pos).tolist()]
        self.logits = final_logits(model, self.tokens, self.query_pos, self._cache_hooks())

    # ---- the base run ---------------------------------------------------------------------------
    def _cache_hooks(self) -> list:
        hooks = []
        for layer, block in enumerate(self.model.blocks):
            cc = block.attn.cc
            pre = f"blocks.{layer}"

            def store(key: str, layer: int = layer, at_t: bool = False, index: str | None = None):
                def hook(x: Tensor, hook) -> None:
                    for g in self.groups:
                        xs = x[g.rows]
                        if at_t:
                            g.store[layer][key] = xs[:, g.t].detach()
                        elif index == "n_old":
                            g.store[layer][key] = xs[:, : g.layers[layer]["n_old"]].detach()
                        elif index is not None:
                            idx = g.layers[layer].get(index)
                            if idx is not None:
                                g.store[layer][key] = xs[:, idx.to(x.device)].detach()
                return hook

            hooks += [(f"{pre}.hook_resid_pre", store("resid", at_t=True)),
                      (f"{pre}.attn.hook_z", store("z", at_t=True)),
                      (f"{pre}.attn.hook_rot_k", store("k", index="ctx")),
                      (f"{pre}.attn.hook_v", store("v", index="ctx"))]
            if cc is not None:
                value_hook = "compress_kv" if cc.kv == "tied" else "compress_v"
                hooks += [(f"{pre}.ln1.hook_normalized", store("win", index="win")),
                          (f"{pre}.attn.hook_rot_entries", store("ek", index="n_old")),
                          (f"{pre}.attn.{value_hook}.hook_out", store("ev", index="n_old"))]
        return hooks

    def base_z(self, layer: int) -> Float[Tensor, "batch head d_head"]:
        """Base attention output of every query head at each row's query position."""
        return self._gather(layer, "z")

    def base_resid(self, layer: int) -> Float[Tensor, "batch d_model"]:
        """Base residual stream entering `layer` at each row's query position."""
        return self._gather(layer, "resid")

    def _gather(self, layer: int, key: str) -> Tensor:
        first = self.groups[0].store[layer][key]
        out = first.new_empty(len(self.query_pos), *first.shape[1:])
        for g in self.groups:
            out[g.rows] = g.store[layer][key]
        return out

    # ---- recomputation --------------------------------------------------------------------------
    def run_z(self, layers: Sequence[int], masks: Bool[Tensor, "unit head"],
              values: Float[Tensor, "unit batch head d_head"], *, max_rows: int = 8192
              ) -> Float[Tensor, "unit batch vocab"]:
        """Logits at the query positions when unit u sets `z[:, t, masks[u]]` of layer
        `layers[u]` to `values[u][:, masks[u]]` (other heads keep their base output)."""
        return self._run(list(layers), "z", masks, values, max_rows)

    def run_resid(self, layers: Sequence[int], values: Float[Tensor, "unit batch d_model"], *,
                  max_rows: int = 8192) -> Float[Tensor, "unit batch vocab"]:
        """Logits at the query positions when unit u replaces the residual stream entering layer
        `layers[u]` at position t by `values[u]`."""
        return self._run(list(layers), "resid_pre", None, values, max_rows)

    def _run(self, layers: list[int], kind: str, masks, values: Tensor, max_rows: int) -> Tensor:
        n_layers = len(self.model.blocks)
        if len(layers) != values.shape[0]:
            raise ValueError(f"{len(layers)} layers for {values.shape[0]} units of values")
        check_layers(layers, n_layers)
        check_at_least_one("max_rows", max_rows)
        values = values.to(self.logits.device)
        out = self.logits.new_empty(len(layers), len(self.query_pos), self.logits.shape[-1])
        per = units_per_forward(len(self.query_pos), max_rows)
        with torch.no_grad():
            for g in self.groups:
                for s in range(0, len(layers), per):
                    sl = slice(s, s + per)
                    m = None if masks is None else masks[sl].to(values.device)
                    out[sl, g.rows] = self._run_group(g, layers[sl], kind, m, values[sl][:, g.rows])
        return out

    def _run_group(self, g: _Group, layers: list[int], kind: str, masks, values: Tensor) -> Tensor:
        model = self.model
        start = torch.tensor(layers, device=values.device)
        x = None  # state of the units already started, in unit order of `started`
        started = torch.zeros(0, dtype=torch.long, device=values.device)
        for m, block in enumerate(model.blocks):
            st = g.store[m]
            new = (start == m).nonzero()[:, 0]
            if kind == "resid_pre" and len(new):
                x = values[new] if x is None else torch.cat([x, values[new]])
                started = torch.cat([started, new])
            z = self._attention(g, m, x) if x is not None else None
            if kind == "z" and len(new):
                z_new = st["z"].expand(len(new), *st["z"].shape).clone()
                mk = masks[new][:, None, :, None]
                z_new = torch.where(mk, values[new], z_new)
                x_new = st["resid"].expand(len(new), *st["resid"].shape)
                x = x_new if x is None else torch.cat([x, x_new])
                z = z_new if z is None else torch.cat([z, z_new])
                started = torch.cat([started, new])
            if x is None:
                continue
            x = x + torch.einsum("ubhe,hed->ubd", z, block.attn.W_O)
            x = x + block.mlp(block.ln2(x))
        order = torch.argsort(started)
        return model.ln_final(x[order]) @ model.W_unembed

    def _attention(self, g: _Group, m: int, x: Tensor) -> Tensor:
        """Attention output z [U, b, H, d] at position t of layer m for residual inputs x [U, b, D]."""
        block = self.model.blocks[m]
        attn, cc, info, st = block.attn, block.attn.cc, g.layers[m], g.store[m]
        U, b, _ = x.shape
        H, K, d = attn.W_Q.shape[0], attn.W_K.shape[0], attn.W_Q.shape[-1]
        h = block.ln1(x)
        q = torch.einsum("ubd,hde->ubhe", h, attn.W_Q)
        k = torch.einsum("ubd,hde->ubhe", h, attn.W_K)
        v = torch.einsum("ubd,hde->ubhe", h, attn.W_V)
        if attn.q_norm is not None:
            q, k = attn.q_norm(q), attn.k_norm(k)
        pos = torch.tensor([g.t], device=x.device)
        q = attn.rotate(q.reshape(U * b, 1, H, d), pos).view(U, b, K, H // K, d)
        k = attn.rotate(k.reshape(U * b, 1, K, d), pos).view(U, b, K, d)
        shared_k, shared_v, own_k, own_v = [], [], [], []  # shared: [b, n, K, d]; own: [U, b, K, d]
        if cc is not None:
            shared_k.append(st["ek"])
            shared_v.append(st["ev"])
            if info["new"] is not None:
                win = torch.cat([st["win"].expand(U, *st["win"].shape), h[:, :, None]], dim=2)
                missing = cc.window - win.shape[2]  # slots before position 0
                win = F.pad(win.reshape(U * b, 1, win.shape[2], -1), (0, 0, missing, 0))
                before = (torch.arange(cc.window, device=x.device) < missing)[None]
                new = info["new"]
                if cc.kv == "tied":
                    ek = ev = attn.compress_kv.fold(win, before, new)[:, 0]
                else:
                    ek, ev = attn.compress_k.fold(win, before, new)[:, 0], attn.compress_v.fold(win, before, new)[:, 0]
                ek = attn.rotate(ek[:, None], torch.tensor([cc.rope_position(new)], device=x.device))[:, 0]
                own_k.append(ek.view(U, b, K, d))
                own_v.append(ev.view(U, b, K, d))
        shared_k.append(st["k"])
        shared_v.append(st["v"])
        if info["self"]:
            own_k.append(k)
            own_v.append(v)
        ks = torch.cat(shared_k, dim=1)
        vs = torch.cat(shared_v, dim=1)
        scores = [torch.einsum("ubkgd,bnkd->ubkgn", q, ks)]
        scores += [torch.einsum("ubkgd,ubkd->ubkg", q, ko)[..., None] for ko in own_k]
        s = torch.cat(scores, dim=-1) * attn.scale
        n_keys = s.shape[-1]
        p = joint.softmax_with_sink(s.reshape(U * b, H, 1, n_keys), attn.sink if cc is not None else None)
        p = p.view(U, b, K, H // K, n_keys)
        n = ks.shape[1]
        z = torch.einsum("ubkgn,bnkd->ubkgd", p[..., :n], vs)
        for i, vo in enumerate(own_v):
            z = z + p[..., n + i, None] * vo[:, :, :, None]
        return z.reshape(U, b, H, d)
