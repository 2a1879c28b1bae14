"""Final-position knockout and patching on DeepSeek Sparse Attention (`DSABackend`: HF
`DeepseekV32ForCausalLM`, `GlmMoeDsaForCausalLM`).

An edit of the head outputs at the final (query) position t of a row changes nothing at positions < t,
but every layer above the edit selects t's keys anew: the lightning indexer scores t's query against
every visible key and t attends to its `index_topk` best. HF's cached decoding is not the full forward
here: its prefill ranks each prefix row among t keys instead of T, and the indexer's ReLU scores tie
exactly (often at 0) at the k-th place, where `torch.topk`'s choice among tied keys depends on the
row's length, so the prefix's later layers (and t's logits) differ. `DSAFinalRun` therefore runs one
full forward and keeps, per layer, what t reads of the prefix as that forward computes it (the MLA
keys and values of positions < t, from `kv_b_proj`'s output and the rotated shared key; the indexer's
rotated keys of positions < t), t's row of the causal mask, the indexer's base selection at t, and
the residual stream and head outputs at t. A unit edited at layer L recomputes only position t from
there up, all units of a chunk as one batch. Each layer's one-query indexer lays its scores out as
the full forward's row t (all T keys, future ones masked with the same mask), so `topk` compares
the same values and resolves ties as the full forward does; MLA then attends to the selected keys
(the cached prefix shared by every unit, never copied per unit, plus the unit's own key), and the
output projection and MLP (or MoE) follow. GLM-MoE-DSA's "shared" layers reuse the selection of the
full layer below them, recomputed or the base run's. Tests (`tests/test_dsa_final.py`): knockout and
patching equal to full forwards to 1e-4, prompts longer than `index_topk`.
"""

from __future__ import annotations

import sys
from typing import Any, Sequence

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from phaseinterp.backends.incremental import final_run_inputs
from phaseinterp.backends.prompts import shared_forward_rows, units_per_forward
from phaseinterp.checks import check_at_least_one
from phaseinterp.families.dsa.indexer import _rope, visible
from phaseinterp.units import check_layers


def dsa_final_fallback(backend: Any) -> str | None:
    """Why `DSAFinalRun` does not apply to `backend`'s model (a sentence), or None when it does."""
    model = backend.model
    inner = getattr(model, "model", None)
    if not all(hasattr(inner, a) for a in ("layers", "norm", "rotary_emb")) or not hasattr(model, "lm_head"):
        return "the model is not laid out as model.model.layers with model.model.norm and lm_head"
    # the path calls each layer's HF submodules itself: a TransformerLens bridge's components would not be them
    foreign = sorted({f"{type(m).__module__}.{type(m).__name__}" for layer in inner.layers
                      for m in (layer, layer.self_attn, getattr(layer.self_attn, "indexer", None)) if m is not None
                      and not type(m).__module__.startswith("transformers.")})
    if foreign:
        return (f"the decoder layers hold modules that are not transformers' own ({', '.join(foreign[:2])}; e.g. a "
                "TransformerLens bridge's components), which the final-position path cannot recompute")
    impl = model.config._attn_implementation
    if impl not in ("eager", "sdpa"):
        return (f"attention implementation {impl!r}: HF folds the indexer's selection into the mask only for 'eager' "
                "and 'sdpa', the implementations the final-position path reproduces")
    return None


class DSAFinalRun:
    """The base run of a DSA model, kept so that each row's query position can be recomputed after
    edits of the head outputs there, for many units at once (the interface of
    `backends.incremental.FinalPositionRun`: `logits`, `base_z`, `run_z`).

    Args:
        backend: a `DSABackend` without active edits or selection edits.
        tokens: [batch, pos] token ids. query_pos: [batch] the scored position of each row.

    Example:
        >>> from phaseinterp.families.dsa import tiny_dsa_spec
        >>> from phaseinterp.families.dsa.backend import DSABackend
        >>> dsa = DSABackend(tiny_dsa_spec().build(seed=0).hf)  # 4 heads, v_head_dim 16
        >>> tokens = torch.randint(1, 256, (2, 48))
        >>> run = dsa.final_position_run(tokens, torch.full((2,), 47))
        >>> run.run_z([1], torch.ones(1, 4, dtype=torch.bool), torch.zeros(1, 2, 4, 16)).shape
        torch.Size([1, 2, 256])
    """

    def __init__(self, backend: Any, tokens: Int[Tensor, "batch pos"], query_pos: Int[Tensor, " batch"]) -> None:
        why = dsa_final_fallback(backend)
        if why is not None:
            raise ValueError(f"the DSA final-position path is not available on {backend.describe()}: {why} "
                             "(allowed: method='hooks')")
        self.model, cfg = backend.model, backend.cfg
        self.n_heads, self.d_head = cfg.n_heads, cfg.d_head
        self.layers = list(self.model.model.layers)
        tokens, query_pos = final_run_inputs(backend, tokens, query_pos)
        T = tokens.shape[1]
        self.tokens, self.query_pos, self.T = tokens, query_pos, T
        #: the full layer whose selection each layer uses (itself, or the full layer below a shared one)
        self.selector = []
        for m, layer in enumerate(self.layers):
            self.selector.append(m if layer.self_attn.indexer is not None else self.selector[-1])
        self._base_run()

    # ---- the base run ---------------------------------------------------------------------------
    def _base_run(self) -> None:
        qpos = self.query_pos
        # rows with equal tokens (a multi-token answer's) share one row of the forward: row i's is src[i]
        prompts, src, keep, slot = shared_forward_rows(self.tokens, qpos)
        n = len(self.layers)
        self.groups = [(int(t), (qpos == t).nonzero()[:, 0]) for t in torch.unique(qpos).tolist()]
        self._resid: list[Tensor | None] = [None] * n
        self._z: list[Tensor | None] = [None] * n
        raw: list[list[dict[str, Any]]] = [[{} for _ in range(n)] for _ in self.groups]

        def per_group(key: str, m: int, x: Tensor, cut) -> None:
            for i, (t, g) in enumerate(self.groups):
                raw[i][m][key] = cut(x[src[g].to(x.device)] if x.shape[0] == len(prompts) else x, t).detach()

        def keep_resid(m: int):
            def hook(module, args, kwargs):
                x = args[0] if args else kwargs["hidden_states"]
                self._resid[m] = x[src, qpos].detach()
            return hook

        def keep_z(m: int):
            def hook(module, args):
                self._z[m] = args[0][src, qpos].detach().view(len(src), self.n_heads, self.d_head)
            return hook

        def keep_angles(m: int):
            def hook(module, args, kwargs):
                for key, x in zip(("cos", "sin"), kwargs["position_embeddings"]):
                    per_group(key, m, x, lambda y, t: y[:, : t + 1])
            return hook

        def keep_prefix(m: int, key: str, how):
            def hook(module, args, output):
                per_group(key, m, output, how)
            return hook

        def keep_selection(m: int):
            def hook(module, args, kwargs, output):
                per_group("mask", m, args[3], lambda y, t: y[:, t])
                per_group("indices", m, output, lambda y, t: y[:, t])
            return hook

        handles = []
        try:
            for m, layer in enumerate(self.layers):
                attn = layer.self_attn
                handles += [layer.register_forward_pre_hook(keep_resid(m), with_kwargs=True),
                            attn.o_proj.register_forward_pre_hook(keep_z(m)),
                            attn.register_forward_pre_hook(keep_angles(m), with_kwargs=True),
                            attn.kv_b_proj.register_forward_hook(keep_prefix(m, "kv", lambda y, t: y[:, :, :t])),
                            attn.kv_a_proj_with_mqa.register_forward_hook(
                                keep_prefix(m, "k_rot", lambda y, t, r=attn.kv_lora_rank: y[:, :t, r:]))]
                if attn.indexer is not None:
                    handles += [attn.indexer.k_norm.register_forward_hook(keep_prefix(m, "index_k", lambda y, t: y[:, :t])),
                                attn.indexer.register_forward_hook(keep_selection(m), with_kwargs=True)]
            with torch.no_grad():
                out = self.model(input_ids=prompts, use_cache=False, logits_to_keep=keep)
        finally:
            for h in handles:
                h.remove()
        self.logits = out.logits[src, slot]
        self._prefix = [[self._prefix_of(t, m, raw[i][m], raw[i][self.selector[m]]) for m in range(n)]
                        for i, (t, _) in enumerate(self.groups)]

    def _prefix_of(self, t: int, m: int, raw: dict[str, Any], sel: dict[str, Any]) -> dict[str, Any]:
        """What position t reads at layer m, from the base run's captures (prefix keys as the full forward
        rotates them: rotation is elementwise, so the prefix's slice rotates bit for bit the same)."""
        attn = self.layers[m].self_attn
        cos, sin = raw["cos"], raw["sin"]
        b = raw["kv"].shape[0]
        kv = raw["kv"].reshape(b, t, self.n_heads, attn.qk_nope_head_dim + attn.v_head_dim).transpose(1, 2)
        k_nope, values = torch.split(kv, [attn.qk_nope_head_dim, attn.v_head_dim], dim=-1)
        k_rot = raw["k_rot"].reshape(b, 1, t, attn.qk_rope_head_dim)
        k_rot = _mla_rope(attn)(k_rot, k_rot, cos[:, :t], sin[:, :t])[1]
        keys = torch.cat([k_nope, k_rot.expand(-1, self.n_heads, -1, -1)], dim=-1)
        mask = sel["mask"].expand(b, -1)
        out = {"keys": keys, "values": values, "cos": cos[:, t:], "sin": sin[:, t:], "mask": mask,
               "selected": _selected(sel["indices"].long(), mask, t)}
        if attn.indexer is not None:
            idx = attn.indexer
            k = raw["index_k"].unsqueeze(2)
            k_rot, k_pass = torch.split(k, [idx.qk_rope_head_dim, idx.head_dim - idx.qk_rope_head_dim], dim=-1)
            k_rot = _rope(idx)(k_rot, k_rot, cos[:, :t], sin[:, :t], unsqueeze_dim=2)[1]
            out["index_keys"] = torch.cat([k_rot, k_pass], dim=-1).squeeze(2)
        return out

    def base_z(self, layer: int) -> Float[Tensor, "batch head d_head"]:
        """Base head outputs of `layer` at each row's query position."""
        return self._z[layer]

    def base_resid(self, layer: int) -> Float[Tensor, "batch d_model"]:
        """Base residual stream entering `layer` at each row's query position."""
        return self._resid[layer]

    def run_resid(self, layers: Sequence[int], values: Tensor, *, max_rows: int = 8192) -> Tensor:
        raise ValueError("residual-stream patching is not available on HF backends (no hook_resid_pre site): "
                         "allowed unit='z'")

    # ---- recomputation --------------------------------------------------------------------------
    def run_z(self, layers: Sequence[int], masks: Bool[Tensor, "unit head"],
              values: Float[Tensor, "unit batch head d_head"], *, max_rows: int = 8192
              ) -> Float[Tensor, "unit batch vocab"]:
        """Logits at the query positions when unit u sets the heads `masks[u]` of layer `layers[u]`
        at t to `values[u]` (the other heads keep their base output); at most `max_rows`
        one-position rows per layer call."""
        layers = list(layers)
        if len(layers) != values.shape[0] or masks.shape != (len(layers), self.n_heads):
            raise ValueError(f"{len(layers)} layers for {values.shape[0]} units of values and masks of shape "
                             f"{tuple(masks.shape)} (allowed: one layer, one [{self.n_heads}] head mask per unit)")
        check_layers(layers, len(self.layers))
        check_at_least_one("max_rows", max_rows)
        values, masks = values.to(self.logits.device, self.logits.dtype), masks.to(self.logits.device)
        out = self.logits.new_empty(len(layers), len(self.query_pos), self.logits.shape[-1])
        with torch.no_grad():
            for (t, rows), prefix in zip(self.groups, self._prefix):
                per = units_per_forward(len(rows), max_rows)
                for s in range(0, len(layers), per):
                    sl = slice(s, s + per)
                    out[sl, rows] = self._run_group(t, rows, prefix, layers[sl], masks[sl], values[sl][:, rows])
        return out

    def _run_group(self, t: int, rows: Tensor, prefix: list[dict[str, Any]], layers: list[int], masks: Tensor,
                   values: Float[Tensor, "unit row head d_head"]) -> Tensor:
        b = len(rows)
        start = torch.tensor(layers)
        x = sel = None  # [started units * b, 1, d_model] unit-major, and their selections [.., t + 1]
        started: list[int] = []
        for m in range(min(layers), len(self.layers)):
            layer, st = self.layers[m], prefix[m]
            new = (start == m).nonzero()[:, 0].tolist()
            z = None
            if x is not None:
                h = layer.input_layernorm(x)
                q_resid = layer.self_attn.q_a_layernorm(layer.self_attn.q_a_proj(h))
                if layer.self_attn.indexer is not None:
                    sel = self._select(m, t, st, h, q_resid)
                z = self._attention(m, t, st, h, q_resid, sel)
            if new:
                # the edit replaces heads at m; the rest, and the selection, are the base run's at m
                z_new = torch.where(masks[new][:, None, :, None], values[new], self._z[m][rows])
                z_new = z_new.reshape(len(new) * b, self.n_heads, -1)
                x_new = self._resid[m][rows].expand(len(new), -1, -1).reshape(len(new) * b, 1, -1)
                sel_new = st["selected"].repeat(len(new), 1)
                x = x_new if x is None else torch.cat([x, x_new])
                sel = sel_new if sel is None else torch.cat([sel, sel_new])
                z = z_new if z is None else torch.cat([z, z_new])
                started += new
            x = x + layer.self_attn.o_proj(z.reshape(x.shape[0], 1, -1))
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        logits = self.model.lm_head(self.model.model.norm(x))[:, 0].view(len(started), b, -1)
        return logits[torch.argsort(torch.tensor(started))]

    def _select(self, m: int, t: int, st: dict[str, Any], h: Float[Tensor, "row 1 d_model"], q_resid: Tensor
                ) -> Bool[Tensor, "row key"]:
        """The indexer's top-k at t for each row of `h` ([unit * b] rows), as its HF forward picks row t of a
        full forward: the scores of keys 0..t (the cached prefix keys and the row's own), laid out over
        all T keys with the full forward's mask row, then the same `topk`."""
        attn = self.layers[m].self_attn
        idx = attn.indexer
        n, b = h.shape[0], st["mask"].shape[0]
        q = idx.wq_b(q_resid).view(n, 1, idx.n_heads, idx.head_dim)
        rope = idx.qk_rope_head_dim
        q_rot, q_pass = torch.split(q, [rope, idx.head_dim - rope], dim=-1)
        k = idx.k_norm(idx.wk(h)).unsqueeze(2)
        k_rot, k_pass = torch.split(k, [rope, idx.head_dim - rope], dim=-1)
        q_rot, k_rot = _rope(idx)(q_rot, k_rot, st["cos"], st["sin"], unsqueeze_dim=2)
        q = torch.cat([q_rot, q_pass], dim=-1)[:, 0].float()  # [n, heads, d]
        own = torch.cat([k_rot, k_pass], dim=-1)[:, 0, 0].float()  # [n, d]
        prefix = torch.einsum("ubhd,btd->ubht", q.view(n // b, b, *q.shape[1:]), st["index_keys"].float())
        scores = torch.cat([prefix.reshape(n, idx.n_heads, t), (q * own[:, None]).sum(-1, keepdim=True)], -1)
        scores = torch.relu(scores * idx.softmax_scale)
        weights = idx.weights_proj(h.to(idx.weights_proj.weight.dtype)).float() * idx.n_heads**-0.5
        row = torch.matmul(weights, scores)[:, 0]  # [n, t + 1]
        row = torch.cat([row, row.new_zeros(n, self.T - t - 1)], -1)
        mask = st["mask"].repeat(n // b, 1)
        row = row.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else row + mask
        return _selected(row.topk(min(idx.index_topk, self.T), dim=-1).indices, mask, t)

    def _attention(self, m: int, t: int, st: dict[str, Any], h: Float[Tensor, "row 1 d_model"], q_resid: Tensor,
                   selected: Bool[Tensor, "row key"]) -> Float[Tensor, "row head d_head"]:
        """`DeepseekV32Attention.forward` (MLA) at position t only, over the keys `selected` among 0..t."""
        attn = self.layers[m].self_attn
        n, H = h.shape[0], self.n_heads
        b = st["keys"].shape[0]
        q = attn.q_b_proj(q_resid).view(n, 1, H, attn.qk_head_dim).transpose(1, 2)
        q_pass, q_rot = torch.split(q, [attn.qk_nope_head_dim, attn.qk_rope_head_dim], dim=-1)
        kv_pass, k_rot = torch.split(attn.kv_a_proj_with_mqa(h), [attn.kv_lora_rank, attn.qk_rope_head_dim], dim=-1)
        k_pass = attn.kv_a_layernorm(kv_pass).view(n, 1, 1, attn.kv_lora_rank)
        q_rot, k_rot = _mla_rope(attn)(q_rot, k_rot.view(n, 1, 1, -1), st["cos"], st["sin"])
        query = torch.cat([q_pass, q_rot], dim=-1).view(n // b, b, H, -1)
        kv = attn.kv_b_proj(k_pass).view(n, 1, H, -1).transpose(1, 2)
        k_nope, v_own = torch.split(kv, [attn.qk_nope_head_dim, attn.v_head_dim], dim=-1)
        k_own = torch.cat([k_nope, k_rot.expand(-1, H, -1, -1)], dim=-1).view(n // b, b, H, -1)
        scores = torch.cat([torch.einsum("ubhd,bhtd->ubht", query, st["keys"]),
                            (query * k_own).sum(-1, keepdim=True)], -1) * attn.scaling
        scores = scores.masked_fill(~selected.view(n // b, b, 1, t + 1), float("-inf"))
        p = scores.softmax(-1, dtype=torch.float32).to(query.dtype)
        z = torch.einsum("ubht,bhtd->ubhd", p[..., :t], st["values"]) + p[..., t:] * v_own.view(n // b, b, H, -1)
        return z.reshape(n, H, -1)


def _mla_rope(attn: torch.nn.Module):
    """The main attention's RoPE (interleaved pairs in both model types), from its own modeling module."""
    return sys.modules[type(attn).__module__].apply_rotary_pos_emb_interleave


def _selected(indices: Tensor, mask: Tensor, t: int) -> Bool[Tensor, "row key"]:
    """HF's top-k indices [row, k] of row t as a boolean over keys 0..t (visible keys only)."""
    chosen = torch.zeros(*indices.shape[:-1], mask.shape[-1], dtype=torch.bool, device=indices.device)
    chosen.scatter_(-1, indices, True)
    return (chosen & visible(mask))[..., : t + 1]


__all__ = ["DSAFinalRun", "dsa_final_fallback"]
