"""Final-position knockout and patching on HuggingFace decoders through the KV cache.

A knockout or patch at the final (query) position t of a row edits the head outputs z at t only,
so nothing at positions < t changes. One base forward with a KV cache keeps, per layer, the
rotated keys and values of every position and, at t, the residual stream entering the layer and
the head outputs. A unit edited at layer L then recomputes only position t, from layer L upward:
it enters layer L with the base residual stream at t, its attention reads the cached keys and
values of positions < t (repeated along the batch, one copy per unit: units never see each
other) plus its own key and value at t, and its head outputs at layer L are replaced before the
output projection. The layers below L are not rerun. All units of a chunk run as one batch of
one-position forwards through the model's own decoder layers, norm and unembedding, so the result
equals a full forward with the same edit (tested to 1e-4 on tiny random Llama and Qwen3). Rows with
equal tokens (one per answer token of a multi-token answer, `tasks.scoring.token_rows`) share one row of
the base forward and of its cache (`benchmarks/answer_rows.py`). Long prompts run through the base
forward in chunks of at most `prompts.FORWARD_TOKENS` tokens, which bounds its activations; the cache is gathered
across chunks (`benchmarks/base_chunks.py`).

Layers with training-free compression (`kv_compression.compress_attention`) take the same path: the
base run keeps, through their hook points, only what position t reads (entries that end before t,
the sink and local keys, the window that closes at t), and their one-position forward is
`compressed_final.final_position_attention` (called through the same decoder layers, with a
`CompressedPrefix` as `shared_prefix`).

`HFCausalLMBackend.final_position_run` returns a `KVCacheFinalRun` where `kv_cache_fallback` finds
nothing against it; otherwise knockout and patching maps fall back to one full forward per unit
(`method="hooks"`) and record why in the map's meta (`kv_cache_fallback`'s sentence).
"""

from __future__ import annotations

import inspect
from typing import Any, Sequence

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from phaseinterp.backends.compressed_final import CompressedPrefix
from phaseinterp.backends.incremental import final_run_inputs
from phaseinterp.backends.kv_compression import compressed_layers
from phaseinterp.backends.prompts import FORWARD_TOKENS, fill_rows, shared_forward_rows, units_per_forward
from phaseinterp.checks import check_at_least_one
from phaseinterp.units import check_layers

#: HF `model_type`s whose decoder layers are called here one position at a time: plain pre-norm
#: decoders (RoPE from `model.model.rotary_emb`, `model.model.norm`, `lm_head` without soft-capping);
#: others (Gemma's scaled embeddings and soft-capped logits, GPT-2's learned positions, ...) fall back.
KV_CACHE_FAMILIES = ("llama", "qwen2", "qwen3", "mistral", "gemma3_text")
#: of those, the ones whose sliding-window layers the path handles (RoPE per layer type, each
#: sliding layer's prefix cut to its window; compressed sliding layers keep theirs themselves)
SLIDING_OK = ("gemma3_text",)
#: DeepSeek Sparse Attention decoders: their final-position path is `DSABackend`'s (`families.dsa.final`)
DSA_TYPES = ("deepseek_v32", "glm_moe_dsa")


def kv_cache_fallback(backend: Any) -> str | None:
    """Why the KV-cache path does not apply to `backend`'s model (a sentence), or None when it does."""
    model = backend.model
    hf = getattr(model, "config", None)
    kind = getattr(hf, "model_type", None)
    if kind in DSA_TYPES:
        return (f"model_type {kind!r} (DeepSeek Sparse Attention): its lightning indexer picks each query's keys, "
                "which a plain KV-cache query does not redo; its final-position path is DSABackend's "
                "(families.dsa.final: wrap the model with backend_for)")
    if kind not in KV_CACHE_FAMILIES:
        return (f"model_type {kind!r} has no final-position KV-cache path: allowed {list(KV_CACHE_FAMILIES)} "
                "(plain pre-norm RoPE decoders)")
    inner = getattr(model, "model", None)
    if (getattr(backend, "layers_path", None) != "model.layers" or getattr(backend, "attn_name", None) != "self_attn"
            or getattr(backend, "out_name", None) != "o_proj"
            or not all(hasattr(inner, a) for a in ("rotary_emb", "norm")) or not hasattr(model, "lm_head")):
        return "the model is not laid out as model.model.layers[i].self_attn.o_proj with model.model.norm and lm_head"
    wrapped = compressed_layers(model)  # their one-position forward: `backends.compressed_final`
    # a TransformerLens bridge swaps HF's submodules for its components: the path calls HF's own layers
    foreign = sorted({f"{type(m).__module__}.{type(m).__name__}" for i, layer in enumerate(inner.layers)
                      for m in ((layer,) if i in wrapped else (layer, layer.self_attn))
                      if not type(m).__module__.startswith("transformers.")})
    if foreign:
        return (f"the decoder layers hold modules that are not transformers' own ({', '.join(foreign[:2])}; e.g. a "
                "TransformerLens bridge's components), which the path cannot call with a shared cache")
    types = getattr(hf, "layer_types", None) or []
    sliding = [i for i, t in enumerate(types) if t != "full_attention"]
    if kind not in SLIDING_OK and (sliding or (getattr(hf, "sliding_window", None) is not None and getattr(hf, "use_sliding_window", True)
                   and not types)):
        return (f"layers {sliding or 'all'} use sliding-window attention: one query over the cached prefix would "
                "see keys the window hides")
    return None


ATTENTION = "phaseinterp_shared_prefix"


def _position_embeddings(inner: Any, x: Tensor, pos_ids: Tensor) -> Any:
    """cos/sin at `pos_ids`: one pair, or {layer type: pair} for a rotary embedding per layer type
    (Gemma 3: local and global bases)."""
    types = getattr(inner.config, "layer_types", None)
    if types and "layer_type" in inspect.signature(inner.rotary_emb.forward).parameters:
        return {t: inner.rotary_emb(x, pos_ids, t) for t in set(types)}
    return inner.rotary_emb(x, pos_ids)


def shared_prefix_attention(module: Any, query: Tensor, key: Tensor, value: Tensor, attention_mask: Any,
                            scaling: float, dropout: float = 0.0, *, shared_prefix: tuple[Tensor, Tensor],
                            **kwargs: Any) -> tuple[Tensor, None]:
    """HF attention function (`AttentionInterface`) for one query position per row whose keys are a
    prefix shared by every unit plus the row's own key: `query` [unit * b, H, 1, d], `key`, `value`
    [unit * b, K, 1, d] (the new position only), `shared_prefix` the cached keys and values of
    positions < t, [b, K, t, d] each. One softmax over prefix and own key, as the model's own
    attention computes it; the prefix is read once for all units, never copied per unit."""
    keys, values = shared_prefix
    b, K, t, d = keys.shape
    n, H = query.shape[:2]
    q = query.view(n // b, b, K, H // K, d)
    own_k, own_v = key.view(n // b, b, K, 1, d), value.view(n // b, b, K, 1, d)
    scores = torch.cat([torch.einsum("ubkgd,bktd->ubkgt", q, keys), (q * own_k).sum(-1, keepdim=True)], -1)
    p = (scores * scaling).softmax(-1, dtype=torch.float32).to(q.dtype)
    out = torch.einsum("ubkgt,bktd->ubkgd", p[..., :t], values) + p[..., t:] * own_v
    return out.reshape(n, 1, H, d), None


class KVCacheFinalRun:
    """The base run of a HF decoder, kept so that each row's query position can be recomputed after
    edits of the head outputs there, for many units at once (the interface of
    `backends.incremental.FinalPositionRun`: `logits`, `base_z`, `run_z`).

    Args:
        backend: an `HFCausalLMBackend` whose model passes `kv_cache_fallback`, without active edits.
        tokens: [batch, pos] token ids. query_pos: [batch] the scored position of each row.
        base_tokens: the base run forwards its prompts in chunks of at most this many tokens (prompts x
            length; at least one prompt), which bounds its activations on long prompts; the cache it
            keeps and every result are the same for any value.

    Attributes:
        logits: base next-token logits at `query_pos`, [batch, vocab].
        n_forward_rows: rows of the base run: one per distinct token row of `tokens`.
        n_base_forwards: the forwards those rows took (chunks of `base_tokens`).

    Example:
        >>> from phaseinterp.backends import HFCausalLMBackend
        >>> from phaseinterp.backends.tiny import tiny_qwen3
        >>> qwen = HFCausalLMBackend(tiny_qwen3(seed=0))  # 4 query heads over 2 KV heads, d_head 16
        >>> run = qwen.final_position_run(batch.tokens, batch.query_pos)  # one cached forward
        >>> masks = torch.tensor([[True, True, False, False]])  # L1.KV0: heads 0, 1
        >>> run.run_z([1], masks, torch.zeros(1, len(batch), 4, 16)).shape  # [unit, batch, vocab]
        torch.Size([1, 8, 512])
    """

    def __init__(self, backend: Any, tokens: Int[Tensor, "batch pos"], query_pos: Int[Tensor, " batch"], *,
                 base_tokens: int = FORWARD_TOKENS) -> None:
        check_at_least_one("base_tokens", base_tokens)
        self.base_tokens = base_tokens
        why = kv_cache_fallback(backend)
        if why is not None:
            raise ValueError(f"the final-position KV-cache path is not available on {backend.describe()}: {why} "
                             "(allowed: method='hooks')")
        self.model, cfg = backend.model, backend.cfg
        self.n_heads, self.d_head = cfg.n_heads, cfg.d_head
        self.layers = self.model.model.layers
        tokens, query_pos = final_run_inputs(backend, tokens, query_pos)
        self.tokens, self.query_pos = tokens, query_pos
        self._base_run()

    # ---- the base run ---------------------------------------------------------------------------
    def _base_run(self) -> None:
        qpos = self.query_pos
        n = len(self.layers)
        # rows with equal tokens (the answer tokens of one prompt, `tasks.scoring.token_rows`) share one
        # forward and one cache row; `src[i]` is row i's row of that forward
        prompts, src, keep, slot = shared_forward_rows(self.tokens, qpos)
        P, T = prompts.shape
        per = max(1, self.base_tokens // T)  # prompts per forward: bounds the activations of long prompts
        offset = [0]  # the current chunk's first prompt
        store: dict[Any, Tensor] = {}  # ("resid" | "z" | "k" | "v" | "logits", layer): filled chunk by chunk
        # rows sharing a query position t share one prefix (positions < t) per layer
        groups = [(int(t), (qpos == t).nonzero()[:, 0]) for t in torch.unique(qpos).tolist()]
        wrapped = compressed_layers(self.model)  # compressed layers keep their prefix through hooks
        kept: dict[int, dict[int, dict[str, Tensor]]] = {m: {} for m in wrapped}

        def rows_here(n_chunk: int) -> tuple[Tensor, Tensor]:
            here = (src >= offset[0]) & (src < offset[0] + n_chunk)
            return here, src[here] - offset[0]

        def keep_resid(m: int):
            def hook(module, args, kwargs):
                x = args[0] if args else kwargs["hidden_states"]
                here, local = rows_here(len(x))
                fill_rows(store, ("resid", m), len(src), here, x[local, qpos[here]].detach())
            return hook

        def keep_z(m: int):
            def hook(module, args):
                here, local = rows_here(len(args[0]))
                z = args[0][local, qpos[here]].detach().view(len(local), self.n_heads, self.d_head)
                fill_rows(store, ("z", m), len(src), here, z)
            return hook

        handles = []
        try:
            for m, layer in enumerate(self.layers):
                handles.append(layer.register_forward_pre_hook(keep_resid(m), with_kwargs=True))
                handles.append(layer.self_attn.o_proj.register_forward_pre_hook(keep_z(m)))
                if m in wrapped:
                    handles += CompressedPrefix.capture(wrapped[m], [(t, src[g]) for t, g in groups], kept[m], offset)
            for first in range(0, P, per):
                offset[0] = first
                self._base_chunk(prompts[first: first + per], keep[first: first + per], first, P, rows_here, slot,
                                 wrapped, store)
        finally:
            for h in handles:
                h.remove()
        self.logits = store["logits"]
        self.n_forward_rows = P
        self.n_base_forwards = -(-P // per)
        kv = [(store[("k", m)], store[("v", m)]) if ("k", m) in store else None for m in range(n)]
        self._resid, self._z = [store[("resid", m)] for m in range(n)], [store[("z", m)] for m in range(n)]
        self.groups = []
        for i, (t, g_rows) in enumerate(groups):
            # a group holding every prompt once, in order (each answer token of a prose batch), reads a
            # view of the cache: no copy of the prefix per group
            own = src[g_rows]
            every = len(own) == P and bool((own == torch.arange(P, device=own.device)).all())
            prefix = [CompressedPrefix.build(wrapped[m], t, kept[m][i]) if m in wrapped else
                      tuple(c[:, :, lo:t] if every else c[own, :, lo:t] for c in kv[m])
                      for m, lo in ((m, self._first_visible(m, t)) for m in range(n))]
            self.groups.append((t, g_rows, prefix))

    def _base_chunk(self, prompts: Tensor, keep: Tensor, first: int, n_prompts: int, rows_here: Any, slot: Tensor,
                    wrapped: dict, store: dict) -> None:
        """One forward of the prompts `first` .. `first + len(prompts) - 1` of `n_prompts`: its rows'
        logits and the plain layers' cache into `store` (the hooks keep the rest)."""
        from transformers import DynamicCache

        n = len(self.layers)
        # a DynamicCache without the config keeps every position of every layer (one built from
        # a config with sliding layers keeps only their last window); cut to the window later
        name = "cache" if "cache" in inspect.signature(self.model.forward).parameters else "past_key_values"
        cache_kw = {name: DynamicCache()} if len(wrapped) < n else {}
        with torch.no_grad():
            out = self.model(input_ids=prompts, use_cache=len(wrapped) < n, logits_to_keep=keep, **cache_kw)
        here, local = rows_here(len(prompts))
        fill_rows(store, "logits", len(here), here, out.logits[local, slot[here]])
        if len(wrapped) == n:
            return
        cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
        kv = [(layer.keys, layer.values) for layer in cache.layers] if hasattr(cache, "layers") else list(cache)
        mine = torch.zeros(n_prompts, dtype=torch.bool, device=prompts.device)  # this chunk's prompts
        mine[first: first + len(prompts)] = True
        for m, (k, v) in enumerate(kv):
            if m not in wrapped:
                fill_rows(store, ("k", m), n_prompts, mine, k)
                fill_rows(store, ("v", m), n_prompts, mine, v)

    def _first_visible(self, layer: int, t: int) -> int:
        """The first position query t reads at a plain `layer`: 0, or t - window + 1 on a sliding one."""
        window = getattr(self.layers[layer].self_attn, "sliding_window", None)
        return 0 if window is None else max(0, t - window + 1)

    def base_z(self, layer: int) -> Float[Tensor, "batch head d_head"]:
        """Base head outputs of `layer` at each row's query position."""
        return self._z[layer]

    def base_resid(self, layer: int) -> Float[Tensor, "batch d_model"]:
        """Base residual stream entering `layer` at each row's query position."""
        return self._resid[layer]

    # ---- recomputation --------------------------------------------------------------------------
    def run_z(self, layers: Sequence[int], masks: Bool[Tensor, "unit head"],
              values: Float[Tensor, "unit batch head d_head"], *, max_rows: int = 8192
              ) -> Float[Tensor, "unit batch vocab"]:
        """Logits at the query positions when unit u sets `z[:, t, masks[u]]` of layer `layers[u]`
        to `values[u][:, masks[u]]` (the other heads keep their base output); at most `max_rows`
        one-position rows per layer call."""
        layers = list(layers)
        if len(layers) != values.shape[0] or masks.shape != (len(layers), self.n_heads):
            raise ValueError(f"{len(layers)} layers for {values.shape[0]} units of values and masks of shape "
                             f"{tuple(masks.shape)} (allowed: one layer, one [{self.n_heads}] head mask per unit)")
        check_layers(layers, len(self.layers))
        check_at_least_one("max_rows", max_rows)
        values = values.to(self.logits.device, self.logits.dtype)
        masks = masks.to(self.logits.device)
        out = self.logits.new_empty(len(layers), len(self.query_pos), self.logits.shape[-1])
        from transformers import AttentionInterface

        config, attention = self.model.config, self.model.config._attn_implementation
        AttentionInterface.register(ATTENTION, shared_prefix_attention)
        config._attn_implementation = ATTENTION  # for this call only: every layer reads the config per forward
        try:
            self._run_groups(layers, masks, values, max_rows, out)
        finally:
            config._attn_implementation = attention
        return out

    def _run_groups(self, layers: list[int], masks: Tensor, values: Tensor, max_rows: int, out: Tensor) -> None:
        with torch.no_grad():
            for t, rows, prefix in self.groups:
                per = units_per_forward(len(rows), max_rows)
                for s in range(0, len(layers), per):
                    sl = slice(s, s + per)
                    out[sl, rows.to(out.device)] = self._run_group(t, rows, prefix, layers[sl], masks[sl],
                                                                  values[sl][:, rows])

    def run_resid(self, layers: Sequence[int], values: Tensor, *, max_rows: int = 8192) -> Tensor:
        raise ValueError("residual-stream patching is not available on HF backends (no hook_resid_pre site): "
                         "allowed unit='z'")

    def _run_group(self, t: int, rows: Tensor, prefix: list[tuple[Tensor, Tensor]], layers: list[int],
                   masks: Tensor, values: Float[Tensor, "unit row head d_head"]) -> Tensor:
        inner = self.model.model
        types = getattr(self.model.config, "layer_types", None)
        b = len(rows)
        start = torch.tensor(layers)
        x = None  # [started units * b, 1, d_model], unit-major
        started: list[int] = []
        pos_ids = torch.full((1, 1), t, device=values.device)
        pe = None
        for m in range(min(layers), len(self.layers)):
            new = (start == m).nonzero()[:, 0].tolist()
            if new:
                x_new = self._resid[m][rows.to(values.device)].expand(len(new), -1, -1).reshape(len(new) * b, 1, -1)
                x = x_new if x is None else torch.cat([x, x_new.to(x.device)])
                started += new
            if pe is None:
                pe = _position_embeddings(inner, x, pos_ids)
            handle = None
            if new:  # the new units' rows are the last len(new) * b: their heads get the values
                keep = masks[new][:, None, :, None]
                repl = values[new]
                n_new = len(new)

                def edit(module, args, keep=keep, repl=repl, n_new=n_new):
                    z = args[0]
                    tail = z[-n_new * b:].view(n_new, b, self.n_heads, self.d_head)
                    tail = torch.where(keep, repl, tail).view(n_new * b, *z.shape[1:])
                    return (torch.cat([z[: -n_new * b], tail]), *args[1:])

                handle = self.layers[m].self_attn.o_proj.register_forward_pre_hook(edit)
            try:
                x = self.layers[m](x, attention_mask=None, position_ids=pos_ids,
                                   position_embeddings=pe[types[m]] if isinstance(pe, dict) else pe,
                                   use_cache=False, shared_prefix=prefix[m])
                x = x[0] if isinstance(x, tuple) else x
            finally:
                if handle is not None:
                    handle.remove()
        logits = self.model.lm_head(inner.norm(x))[:, 0].view(len(started), b, -1)
        cap = getattr(self.model.config, "final_logit_softcapping", None)  # Gemma's tanh cap (None in Gemma 3)
        if cap is not None:
            logits = torch.tanh(logits / cap) * cap
        return logits[torch.argsort(torch.tensor(started))]
