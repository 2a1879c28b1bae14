"""Final-position knockout and patching on NSA (`NSATransformer`, `NSABackend`).

An edit of the head outputs at the final (query) position t of a row changes nothing at positions
< t. NSA's three branches at t read only the prefix plus t itself: compressed entries are visible
to t only once their window ends before t (so every entry t sees is the base run's), the selection
branch picks blocks from t's own scores against those entries (visible blocks only) plus t's own
block up to t, and the sliding branch reads keys t - w .. t. `NSAFinalRun` keeps, per layer, the
base run's rotated keys and values of positions < t, the visible entries, and at t the residual
stream and head outputs; a unit edited at layer L recomputes only position t from there up, all
units of a chunk as one batch, each branch one softmax over the shared prefix and the unit's own
key, as `NSAAttention.forward` computes it (tests: equal to full forwards to 1e-4).
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from phaseinterp.backends.incremental import checked_query_pos
from phaseinterp.backends.prompts import units_per_forward
from phaseinterp.backends.tl_hooks import has_hooks, model_device
from phaseinterp.checks import check_at_least_one
from phaseinterp.units import check_layers


class NSAFinalRun:
    """The base run of an `NSATransformer`, kept so that each row's query position can be
    recomputed after edits of the head outputs there (`logits`, `base_z`, `run_z`).

    Example:
        >>> from phaseinterp.families.nsa.backend import NSABackend
        >>> from phaseinterp.model.nsa import NSAConfig, NSATransformer
        >>> nsa = NSATransformer(NSAConfig(vocab_size=512, num_selected=1), seed=0)
        >>> run = NSABackend(nsa).final_position_run(batch.tokens, batch.query_pos)
        >>> run.run_z([1], torch.ones(1, nsa.cfg.n_heads, dtype=torch.bool),
        ...           torch.zeros(1, len(batch), nsa.cfg.n_heads, nsa.cfg.d_head)).shape
        torch.Size([1, 8, 512])
    """

    def __init__(self, model: Any, tokens: Int[Tensor, "batch pos"], query_pos: Int[Tensor, " batch"]) -> None:
        if has_hooks(model):
            raise ValueError("the final-position path needs a model without hooks attached (their effect would be "
                             "ignored when position t is recomputed); remove them or use method='hooks'")
        self.model, c = model, model.cfg
        dev = model_device(model)
        self.tokens = tokens.to(dev)
        self.query_pos = checked_query_pos(query_pos, self.tokens)
        self.n_heads, self.d_head = c.n_heads, c.d_head
        self.groups = [(int(t), (self.query_pos == t).nonzero()[:, 0]) for t in torch.unique(self.query_pos).tolist()]
        self.store: list[list[dict[str, Tensor]]] = [[{} for _ in model.blocks] for _ in self.groups]
        with torch.no_grad(), model.hooks(fwd_hooks=self._hooks()):
            self.logits = model(self.tokens)[torch.arange(len(self.query_pos), device=dev), self.query_pos]

    def _hooks(self) -> list:
        S = self.model.cfg.compress_stride

        def keep(layer: int, key: str, how: str):
            def hook(x: Tensor, hook) -> None:
                for i, (t, rows) in enumerate(self.groups):
                    xs = x[rows.to(x.device)]
                    n_vis = sum(1 for j in range(x.shape[1]) if (j + 1) * S - 1 < t) if how == "entries" else 0
                    self.store[i][layer][key] = (xs[:, t] if how == "at_t" else xs[:, :t] if how == "prefix"
                                                 else xs[:, :n_vis]).detach()
            return hook

        hooks = []
        for m in range(len(self.model.blocks)):
            pre = f"blocks.{m}"
            hooks += [(f"{pre}.hook_resid_pre", keep(m, "resid", "at_t")), (f"{pre}.attn.hook_z", keep(m, "z", "at_t")),
                      (f"{pre}.attn.hook_rot_k", keep(m, "k", "prefix")), (f"{pre}.attn.hook_v", keep(m, "v", "prefix")),
                      (f"{pre}.attn.compress_k.hook_out", keep(m, "ck", "entries")),
                      (f"{pre}.attn.compress_v.hook_out", keep(m, "cv", "entries"))]
        return hooks

    def base_z(self, layer: int) -> Float[Tensor, "batch head d_head"]:
        """Base head outputs of `layer` at each row's query position."""
        return self._gather(layer, "z")

    def base_resid(self, layer: int) -> Float[Tensor, "batch d_model"]:
        """Base residual stream entering `layer` at each row's query position."""
        return self._gather(layer, "resid")

    def _gather(self, layer: int, key: str) -> Tensor:
        first = self.store[0][layer][key]
        out = first.new_empty(len(self.query_pos), *first.shape[1:])
        for (_, rows), st in zip(self.groups, self.store):
            out[rows] = st[layer][key]
        return out

    def run_resid(self, layers: Sequence[int], values: Tensor, *, max_rows: int = 8192) -> Tensor:
        raise ValueError("residual-stream patching is not available on the NSA final-position path: allowed unit='z' "
                         "(or method='hooks')")

    def run_z(self, layers: Sequence[int], masks: Bool[Tensor, "unit head"],
              values: Float[Tensor, "unit batch head d_head"], *, max_rows: int = 8192
              ) -> Float[Tensor, "unit batch vocab"]:
        """Logits at the query positions when unit u sets the heads `masks[u]` of layer `layers[u]`
        at t to `values[u]` (the other heads keep their base output)."""
        layers = list(layers)
        if len(layers) != values.shape[0] or masks.shape != (len(layers), self.n_heads):
            raise ValueError(f"{len(layers)} layers for {values.shape[0]} units of values and masks of shape "
                             f"{tuple(masks.shape)} (allowed: one layer, one [{self.n_heads}] head mask per unit)")
        check_layers(layers, len(self.model.blocks))
        check_at_least_one("max_rows", max_rows)
        values, masks = values.to(self.logits.device, self.logits.dtype), masks.to(self.logits.device)
        out = self.logits.new_empty(len(layers), len(self.query_pos), self.logits.shape[-1])
        with torch.no_grad():
            for (t, rows), st in zip(self.groups, self.store):
                per = units_per_forward(len(rows), max_rows)
                for s in range(0, len(layers), per):
                    sl = slice(s, s + per)
                    out[sl, rows] = self._run_group(t, st, layers[sl], masks[sl], values[sl][:, rows])
        return out

    def _run_group(self, t: int, st: list[dict[str, Tensor]], layers: list[int], masks: Tensor, values: Tensor) -> Tensor:
        model = self.model
        start = torch.tensor(layers)
        x, z_start, started = None, None, []
        for m, block in enumerate(model.blocks):
            new = (start == m).nonzero()[:, 0].tolist()
            z = self._attention(t, st[m], block, x) if x is not None else None
            if new:
                base_z = st[m]["z"].expand(len(new), *st[m]["z"].shape)
                z_start = torch.where(masks[new][:, None, :, None], values[new], base_z)
                x_new = st[m]["resid"].expand(len(new), *st[m]["resid"].shape)
                x = x_new if x is None else torch.cat([x, x_new])
                z = z_start if z is None else torch.cat([z, z_start])
                started += new
            if x is None:
                continue
            U, b = x.shape[:2]
            x = x + block.attn.nsa.combine_heads(z.reshape(U, b, -1))
            x = x + block.mlp(block.ln2(x))
        order = torch.argsort(torch.tensor(started))
        return model.ln_final(x[order]) @ model.W_U

    def _attention(self, t: int, st: dict[str, Tensor], block: Any, x: Float[Tensor, "unit row d_model"]
                   ) -> Float[Tensor, "unit row head d_head"]:
        """`NSAAttention.forward` at position t only, for residual inputs x."""
        attn = block.attn
        c, nsa = attn.cfg, attn.nsa
        U, b, _ = x.shape
        n = U * b
        H, K, d, G = c.n_heads, c.n_kv_heads, c.d_head, c.n_heads // c.n_kv_heads
        h = block.ln1(x)
        q, k, v = nsa.to_qkv(h).split(nsa.qkv_split, dim=-1)
        q = q.reshape(n, H, 1, d)
        k, v = k.reshape(n, K, 1, d), v.reshape(n, K, 1, d)
        scale = d ** -0.5
        # 1. compressed branch: unrotated q against the memory entry and the visible (prefix) entries
        ck = torch.cat([nsa.compress_mem_kv[0][None].expand(b, -1, -1, -1), st["ck"].transpose(1, 2)], 2)
        cv = torch.cat([nsa.compress_mem_kv[1][None].expand(b, -1, -1, -1), st["cv"].transpose(1, 2)], 2)
        qg = q.view(U, b, K, G, d)
        csim = torch.einsum("ubkgd,bkmd->ubkgm", qg, ck) * scale
        z_compress = torch.einsum("ubkgm,bkmd->ubkgd", csim.softmax(-1), cv)
        # 2. selection: t's importance of the visible entries, top-k blocks, plus t's own block
        probs = torch.nn.functional.pad(csim[..., 1:].mean(3), (1, 0), value=-1e3).softmax(-1)[..., 1:]
        keep_k = min(c.num_selected, probs.shape[-1])
        B = c.selection_block
        pos = torch.arange(t, device=x.device)
        chosen = torch.zeros(U, b, K, t, dtype=torch.bool, device=x.device)
        if keep_k:
            vals, idx = probs.topk(keep_k, dim=-1)
            idx = torch.where(vals > 1e-10, idx, torch.full_like(idx, -1))
            block_of = pos // B
            for j in range(keep_k):  # k picks (a handful), each a whole visible block
                pick = idx[..., j:j + 1]
                visible = (pick + 1) * B - 1 < t
                chosen |= (block_of == pick) & visible & (pick >= 0)
        chosen |= pos // B == t // B  # own block, causally (positions < t; t itself is the own key)
        rot = lambda y: nsa.rotary_emb.rotate_queries_or_keys(y, offset=t)  # noqa: E731
        q_rot = rot(q).view(U, b, K, G, d)
        k_rot = rot(k).view(U, b, K, 1, d)
        v_own = v.view(U, b, K, 1, d)
        keys, vals_ = st["k"].transpose(1, 2), st["v"].transpose(1, 2)  # [b, K, t, d]

        def attend(mask: Tensor) -> Tensor:
            s = torch.einsum("ubkgd,bktd->ubkgt", q_rot, keys) * scale
            s = s.masked_fill(~mask[:, :, :, None], float("-inf"))
            s = torch.cat([s, (q_rot * k_rot).sum(-1, keepdim=True) * scale], -1)
            p = s.softmax(-1)
            return torch.einsum("ubkgt,bktd->ubkgd", p[..., :t], vals_) + p[..., t:] * v_own

        z_select = attend(chosen)
        # 3. sliding branch: keys t - w .. t
        z_sliding = attend((t - pos <= c.sliding_window).expand(U, b, K, t))
        gates = nsa.to_strategy_combine(h.reshape(n, 1, -1)).reshape(U, b, H, 3)[..., None]
        z = (gates[..., 0, :] * z_compress.reshape(U, b, H, d) + gates[..., 1, :] * z_select.reshape(U, b, H, d)
             + gates[..., 2, :] * z_sliding.reshape(U, b, H, d))
        return z
