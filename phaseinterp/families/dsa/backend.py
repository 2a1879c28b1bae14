"""`DSABackend`: HF DeepSeek Sparse Attention models (`DeepseekV32ForCausalLM`, `GlmMoeDsaForCausalLM`)
behind the backend interface, with the lightning indexer's scores and selection as sites.

Heads and layers are those of any HF causal LM (`HFCausalLMBackend`: heads are the input of `o_proj`,
here [batch, pos, heads * v_head_dim]). The indexer adds two sites per layer with an indexer:

- scores [batch, query, key]: recomputed from the indexer's inputs by `dsa_indexer.indexer_scores`
  (HF returns only the indices; causally masked keys hold the mask value);
- selection [batch, query, key] (bool): the keys each query attends to, visible keys only.

Read them with `read_indexer(tokens)`; edit the selection inside `with backend.selecting({layer:
edit})`, where an edit maps (indices, scores, mask) to new indices; every call inside the block
(`backend(tokens)`, `final_logits`, `phase_sweep(backend, ...)`) runs with it. Edits:
`drop_keys` (remove keys from the selected sets: the query attends to the rest, or with
`replace=True` the next-ranked keys take their places, as if the indexer had not seen them),
`force_selection` (a given boolean selection) and `recent_keys` (the indexer knocked out: each query
keeps its `index_topk` most recent keys, a sliding window). The edits are PyTorch hooks on the
indexer modules (the indexer's output is integer indices, which nnsight's numeric edits do not fit);
they are removed on leaving the block.

Example:
    >>> from phaseinterp.families.dsa import tiny_dsa_spec
    >>> backend = DSABackend(tiny_dsa_spec().build(seed=0).hf)
    >>> tokens = torch.randint(1, 256, (2, 48), generator=torch.Generator().manual_seed(0))
    >>> read = backend.read_indexer(tokens)              # {layer: {"scores", "selected", "indices"}}
    >>> sorted(read), int(read[1]["selected"][0, -1].sum())   # the last query attends to index_topk keys
    ([0, 1], 16)
    >>> needle = torch.zeros(2, 48, dtype=torch.bool)
    >>> needle[:, 20] = True
    >>> with backend.selecting({1: drop_keys(needle)}):  # every call inside runs with the edit
    ...     bool(backend.read_indexer(tokens)[1]["selected"][:, :, 20].any())
    False
"""

from __future__ import annotations

import dataclasses
from contextlib import contextmanager
from typing import Iterator

import torch
from jaxtyping import Bool, Int
from torch import Tensor

from phaseinterp.families.dsa.indexer import (SelectionEdit, attention_modules, distill_indexer, indexer_hooks,
                                              indices_of, selection_mask, visible)
from phaseinterp.families.hf.backend import HFCausalLMBackend

MODEL_TYPES = ("deepseek_v32", "glm_moe_dsa")
#: the period the phase statistics of these models test by default: a common compressor stride (these models have no S of their own)
DEFAULT_STRIDE = 8


def _per_query(keys: Tensor, n_queries: int, query_pos: Tensor | None) -> Tensor:
    """[batch, key] keys -> [batch, query, key] pairs: at every query, or at each row's `query_pos`."""
    pairs = keys[:, None, :].expand(-1, n_queries, -1)
    if query_pos is None:
        return pairs
    at = torch.zeros(keys.shape[0], n_queries, 1, dtype=torch.bool, device=keys.device)
    at[torch.arange(len(keys), device=keys.device), query_pos.to(keys.device)] = True
    return pairs & at


def drop_keys(keys: Bool[Tensor, "batch key"], *, query_pos: Int[Tensor, " batch"] | None = None,
              replace: bool = False) -> SelectionEdit:
    """Remove `keys` from the selection of every query (or only of each row's `query_pos`).

    `replace=False`: the query attends to what is left of its selection; `replace=True`: the next-ranked
    visible keys fill the freed places (the indexer's top-k over the scores with `keys` masked out)."""

    def edit(indices: Tensor, scores: Tensor, mask: Tensor) -> Tensor:
        b, q, n = scores.shape
        if keys.shape != (b, n):
            raise ValueError(f"keys of shape {tuple(keys.shape)} is invalid: allowed [batch, key] = {(b, n)}")
        drop = _per_query(keys.to(scores.device), q, query_pos)
        if replace:
            k = indices.shape[-1]
            ranked = scores.masked_fill(drop, float("-inf")).topk(k, dim=-1).indices
            kept = selection_mask(ranked, n, mask) & ~drop
        else:
            kept = selection_mask(indices, n, mask) & ~drop
        return indices_of(kept, indices.shape[-1])

    return edit


def force_selection(selected: Bool[Tensor, "batch query key"]) -> SelectionEdit:
    """Every query attends to exactly the keys of `selected` (causally visible ones, at most index_topk)."""

    def edit(indices: Tensor, scores: Tensor, mask: Tensor) -> Tensor:
        if selected.shape != scores.shape:
            raise ValueError(f"selected of shape {tuple(selected.shape)} is invalid: allowed [batch, query, key] = "
                             f"{tuple(scores.shape)}")
        return indices_of(selected.to(scores.device) & visible(mask).expand_as(scores), indices.shape[-1])

    return edit


def recent_keys() -> SelectionEdit:
    """The indexer knocked out: each query keeps its index_topk most recent visible keys."""

    def edit(indices: Tensor, scores: Tensor, mask: Tensor) -> Tensor:
        k, (q, n) = indices.shape[-1], scores.shape[1:]
        qi = torch.arange(q, device=scores.device)[:, None] + (n - q)  # key index of each query (no cache: n = q)
        ki = torch.arange(n, device=scores.device)[None, :]
        window = (ki <= qi) & (ki > qi - k)
        return indices_of(window.expand_as(scores) & visible(mask).expand_as(scores), k)

    return edit


class DSABackend(HFCausalLMBackend):
    """Backend for HF DeepSeek Sparse Attention models (any weights).

    Args:
        model: a `DeepseekV32ForCausalLM` or `GlmMoeDsaForCausalLM`.
        stride: the period S the phase statistics test (the model has no compressor; default 8, a common
            compressor stride).
    """

    @classmethod
    def wrap(cls, model, stride: int | None = None) -> "DSABackend":
        return cls(model, stride=DEFAULT_STRIDE if stride is None else stride)

    @classmethod
    def hf_model_types(cls) -> tuple[str, ...]:
        return MODEL_TYPES

    @classmethod
    def hf_layer_strides(cls, hf_config) -> tuple[None, ...]:
        """No compressor: tokens are selected one by one, so no layer has a stride."""
        n = hf_config["num_hidden_layers"] if isinstance(hf_config, dict) else hf_config.num_hidden_layers
        return (None,) * int(n)

    @classmethod
    def describe_hf(cls, hf_config: dict) -> str:
        """E.g. "DSA top-16 of 64 positions, 2 layers"."""
        return (f"DSA top-{hf_config['index_topk']} of {hf_config['max_position_embeddings']} positions, "
                f"{hf_config['num_hidden_layers']} layers")

    @classmethod
    def describe_hf_layers(cls, hf_config: dict) -> str:
        return f"DeepSeek Sparse Attention, top-{hf_config['index_topk']} tokens per query"

    @classmethod
    def prepare_hf_training(cls, hf_model) -> None:
        """The trainer distills the indexer from the main attention (`dsa_indexer.distill_indexer`)."""
        distill_indexer(hf_model)

    def __init__(self, model: torch.nn.Module, stride: int | None = 8, *, prefill_chunk: int | None = None) -> None:
        model_type = getattr(getattr(model, "config", None), "model_type", None)
        if model_type not in MODEL_TYPES or not hasattr(model, "model"):
            raise ValueError(f"model of type {type(model).__name__} (model_type {model_type!r}) is invalid: allowed "
                             "DeepseekV32ForCausalLM or GlmMoeDsaForCausalLM")
        super().__init__(model, stride=stride, prefill_chunk=prefill_chunk)
        self.cfg = dataclasses.replace(self.cfg, kind="dsa", d_head=model.config.v_head_dim)
        self.index_topk = int(model.config.index_topk)
        #: the layers with their own indexer (GLM-MoE-DSA's "shared" layers reuse the previous one's)
        self.indexer_layers = [i for i, a in enumerate(attention_modules(model)) if getattr(a, "indexer", None)
                               is not None]

    def _check_layers(self, layers) -> list[int]:
        layers = list(self.indexer_layers if layers is None else layers)
        bad = [x for x in layers if x not in self.indexer_layers]
        if bad:
            raise ValueError(f"layers {bad} are invalid: allowed layers with an indexer {self.indexer_layers}")
        return layers

    @torch.no_grad()
    def read_indexer(self, tokens: Int[Tensor, "batch pos"], layers: list[int] | None = None) -> dict[int, dict]:
        """{layer: {"scores" [batch, query, key] float32, "selected" [batch, query, key] bool, "indices"
        [batch, query, k] int32}} of one forward (with the active `selecting` edits applied)."""
        layers = self._check_layers(layers)
        tokens = self._check_tokens(tokens)
        read: dict[int, dict] = {}
        with indexer_hooks(self.model, read=read):  # after the hooks of an enclosing `selecting`: reads its edit
            self._forward(tokens)
        return {layer: {k: v.cpu() for k, v in read[layer].items()} for layer in layers}

    _selection_edits: dict[int, SelectionEdit] = {}

    @contextmanager
    def selecting(self, edits: dict[int, SelectionEdit]) -> Iterator[None]:
        """Every call inside the block runs with the selections of the given layers edited."""
        self._check_layers(edits)
        outer = self._selection_edits
        self._selection_edits = {**outer, **edits}
        try:
            with indexer_hooks(self.model, edits=edits):
                yield
        finally:
            self._selection_edits = outer

    def has_hooks(self) -> bool:
        return bool(self._selection_edits) or super().has_hooks()

    #: knockout and patching at the final position recompute only it, indexer included (`families.dsa.final`)
    incremental_path = "final_position"

    def incremental_fallback(self) -> str | None:
        """Why the final-position path (`families.dsa.final`) does not apply to this model, or None."""
        from phaseinterp.families.dsa.final import dsa_final_fallback

        return dsa_final_fallback(self)

    def final_position_run(self, tokens: Tensor, query_pos: Tensor):
        from phaseinterp.families.dsa.final import DSAFinalRun

        return DSAFinalRun(self, tokens, query_pos)


__all__ = ["DSABackend", "drop_keys", "force_selection", "recent_keys"]
