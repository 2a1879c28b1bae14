"""The lightning indexer of DeepSeek Sparse Attention (HF `deepseek_v32` and `glm_moe_dsa`), opened up:
its scores recomputed from its inputs, its top-k selection read and edited, and its training by
distillation from the main attention.

HF's `DeepseekV32Indexer.forward` returns only the top-k token indices [batch, query, k] (int32) and runs
under `torch.no_grad`: the scores exist only inside it, and the indexer gets no gradient from the
language-model loss (top-k is discrete). Here:

- `indexer_scores(indexer, *inputs)`: the scores [batch, query, key] as HF computes them (same ops, same
  order; the RoPE variant of the indexer's class: half-split in DeepSeek-V3.2, interleaved in GLM-MoE-DSA),
  with the causal mask applied (masked keys hold the mask's value, -inf or `finfo.min`). HF's top-k of
  them is the selection (tested).
- `selection_mask(indices, n_keys, mask)`: the selected set as a boolean [batch, query, key], causally
  visible keys only (HF's top-k also returns masked future keys while fewer than k keys are visible).
- `indices_of(mask, k)`: a boolean selection back to HF's [batch, query, k] indices, padded with a
  repeat of a selected index (HF scatters the indices into a mask: a repeat selects nothing new).
- `distill_indexer(hf_model)`: forward hooks that, in training mode with gradients on, add DeepSeek-V3.2's
  indexer loss KL(p || softmax(I)) (p: the main attention's probabilities over keys, averaged over heads,
  computed densely, i.e. with every visible key selected; I: the indexer scores), with the indexer's
  inputs detached, so the loss trains the indexer only and the language-model loss the rest. This is the
  paper's dense warm-up objective, kept on through training (the paper's second stage restricts it to the
  selected keys); without it the HF indexer would keep its random init.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float, Int
from torch import Tensor

#: weight of the indexer loss (nats per query, summed over layers) added to the trainer's loss; its
#: gradient reaches the indexer's parameters only. Small because the trainer clips the global gradient
#: norm: at weight 1 the indexer's gradient reached norms of 100-300 by step 175 and the clip shrank every
#: other parameter's step with it; Adam's step does not depend on the gradient's scale, so a small weight
#: trains the indexer at the same rate while leaving the clip to the language-model loss.
DISTILL_WEIGHT = 1e-3


def _rope(indexer: torch.nn.Module) -> Callable:
    module = sys.modules[type(indexer).__module__]
    if type(indexer).__name__.startswith("GlmMoeDsa"):
        return module.apply_rotary_pos_emb_interleave
    return module.apply_rotary_pos_emb


def indexer_scores(indexer: torch.nn.Module, hidden_states: Tensor, q_resid: Tensor,
                   position_embeddings: tuple[Tensor, Tensor], attention_mask: Tensor) -> Float[Tensor, "batch query key"]:
    """The indexer's scores, as its HF forward computes them before the top-k (no KV cache)."""
    b, s, _ = hidden_states.shape
    cos, sin = position_embeddings
    q = indexer.wq_b(q_resid).view(b, s, indexer.n_heads, indexer.head_dim)
    rope = indexer.qk_rope_head_dim
    q_rot, q_pass = torch.split(q, [rope, indexer.head_dim - rope], dim=-1)
    k = indexer.k_norm(indexer.wk(hidden_states)).unsqueeze(2)
    k_rot, k_pass = torch.split(k, [rope, indexer.head_dim - rope], dim=-1)
    q_rot, k_rot = _rope(indexer)(q_rot, k_rot, cos, sin, unsqueeze_dim=2)
    q = torch.cat([q_rot, q_pass], dim=-1)
    k = torch.cat([k_rot, k_pass], dim=-1).squeeze(2)
    scores = F.relu(torch.matmul(q.float(), k.transpose(-1, -2).float().unsqueeze(1)) * indexer.softmax_scale)
    weights = indexer.weights_proj(hidden_states.to(indexer.weights_proj.weight.dtype)).float() * indexer.n_heads**-0.5
    out = torch.matmul(weights.unsqueeze(-2), scores).squeeze(-2)
    if attention_mask.dtype == torch.bool:
        return out.masked_fill(~attention_mask, float("-inf"))
    return out + attention_mask


def visible(attention_mask: Tensor) -> Bool[Tensor, "batch query key"]:
    """Which keys the (boolean or additive) causal mask lets each query see."""
    if attention_mask.dtype == torch.bool:
        return attention_mask
    return attention_mask > torch.finfo(attention_mask.dtype).min / 2


def selection_mask(indices: Int[Tensor, "batch query k"], n_keys: int, attention_mask: Tensor
                   ) -> Bool[Tensor, "batch query key"]:
    """The selected set of each query as a boolean over keys, visible keys only."""
    chosen = torch.zeros(*indices.shape[:2], n_keys, dtype=torch.bool, device=indices.device)
    chosen.scatter_(-1, indices.long(), True)
    return chosen & visible(attention_mask).expand_as(chosen)


def indices_of(mask: Bool[Tensor, "batch query key"], k: int) -> Int[Tensor, "batch query k"]:
    """HF's index form of a boolean selection with at most `k` keys per query (the first selected key
    repeats into the unused slots); every query must keep at least one key."""
    counts = mask.sum(-1)
    if (counts == 0).any():
        b, q = (counts == 0).nonzero()[0].tolist()
        raise ValueError(f"selection of row {b}, query {q} is empty: allowed at least 1 selected key per query "
                         "(an empty row would attend to every key, future ones included)")
    if (counts > k).any():
        raise ValueError(f"selection holds up to {int(counts.max())} keys per query: allowed at most index_topk={k}")
    n = mask.shape[-1]
    keys = torch.arange(n, device=mask.device).expand_as(mask)
    order = torch.where(mask, keys, keys + n).argsort(dim=-1)[..., :k]  # selected keys first, in key order
    first = order[..., :1]
    slot = torch.arange(k, device=mask.device)
    return torch.where(slot < counts.unsqueeze(-1), order, first).to(torch.int32)


# ---- reading and editing inside any forward --------------------------------------------------------

def attention_modules(hf_model: torch.nn.Module) -> list[torch.nn.Module]:
    return [layer.self_attn for layer in hf_model.model.layers]


#: an edit of one layer's selection: (indices [b, q, k], scores [b, q, key], attention mask) -> new indices
SelectionEdit = Callable[[Tensor, Tensor, Tensor], Tensor]


@contextmanager
def indexer_hooks(hf_model: torch.nn.Module, *, read: dict | None = None,
                  edits: dict[int, SelectionEdit] | None = None) -> Iterator[None]:
    """Inside the block, every forward of `hf_model` stores each full indexer's scores, selection mask and
    indices in `read[layer]` (when `read` is given) and replaces the indices of the layers in `edits`.
    Layers that share another layer's selection (GLM-MoE-DSA) are read and edited at that full layer."""
    handles = []
    edits = edits or {}

    def make(layer: int):
        def hook(module, args, kwargs, output):
            hs, q_resid, pe, mask = args[:4]
            if mask.shape[-1] != hs.shape[1]:
                raise ValueError(f"the indexer of layer {layer} reads {mask.shape[-1]} keys for {hs.shape[1]} queries "
                                 "(a KV cache): allowed reads and edits of full forwards without a cache")
            scores = indexer_scores(module, hs, q_resid, pe, mask)
            new = edits[layer](output, scores, mask) if layer in edits else output
            if read is not None:
                read[layer] = {"scores": scores, "indices": new,
                               "selected": selection_mask(new, scores.shape[-1], mask)}
            return new if layer in edits else None

        return hook

    try:
        for layer, attn in enumerate(attention_modules(hf_model)):
            if getattr(attn, "indexer", None) is not None:
                handles.append(attn.indexer.register_forward_hook(make(layer), with_kwargs=True))
            elif layer in edits:
                raise ValueError(f"layer {layer} reuses an earlier layer's selection (GLM-MoE-DSA 'shared'): "
                                 "allowed edits at the full indexer layers "
                                 f"{[i for i, a in enumerate(attention_modules(hf_model)) if a.indexer is not None]}")
        yield
    finally:
        for h in handles:
            h.remove()


# ---- training: distillation of the indexer ---------------------------------------------------------

def additive(mask: Tensor) -> Tensor:
    """An additive float mask of a boolean one (eager attention adds a boolean mask as 0 / 1)."""
    if mask.dtype != torch.bool:
        return mask
    return torch.zeros(mask.shape, dtype=torch.float32, device=mask.device).masked_fill(~mask, torch.finfo(torch.float32).min)


class _AddGrad(torch.autograd.Function):
    """Returns `x` unchanged; the backward also hands `aux` a gradient of 1 (adds `aux` to the loss)."""

    @staticmethod
    def forward(ctx, x: Tensor, aux: Tensor) -> Tensor:
        ctx.aux_shape = aux.shape
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: Tensor):
        return grad, grad.new_ones(ctx.aux_shape)


def indexer_kl(probs: Tensor, scores: Tensor) -> Tensor:
    """Mean over queries of KL(p || softmax(scores)); `probs` [batch, head, query, key] of the dense
    main attention (masked keys at 0)."""
    p = probs.float().mean(1).detach()
    p = p / p.sum(-1, keepdim=True).clamp_min(1e-12)
    logq = torch.log_softmax(scores.masked_fill(p == 0, float("-inf")), dim=-1)
    return (torch.xlogy(p, p) - torch.where(p > 0, p * logq, torch.zeros_like(p))).sum(-1).mean()


def distill_indexer(hf_model: torch.nn.Module, weight: float = DISTILL_WEIGHT) -> None:
    """Install the indexer loss on a DSA HF model (idempotent; see the module docstring)."""
    if getattr(hf_model, "_phaseinterp_distill", False):
        return
    state: dict[str, Any] = {"losses": [], "dense": False, "inputs": {}}

    def capture(layer: int):
        def hook(module, args, kwargs):
            if not state["dense"]:
                state["inputs"][layer] = args[:4]

        return hook

    def dense_indices(module, args, kwargs, output):
        if state["dense"]:
            b, s = output.shape[:2]
            n = args[3].shape[-1]
            return torch.arange(n, device=output.device, dtype=output.dtype).expand(b, s, n)
        return None

    def distill(layer: int):
        def hook(module, args, kwargs, output):
            if not (module.training and torch.is_grad_enabled()) or state["dense"]:
                return None
            config, impl = module.config, module.config._attn_implementation
            state["dense"] = True
            try:
                config._attn_implementation = "eager"  # the only implementation that returns the probabilities
                with torch.no_grad():
                    probs = module(*args, **{**kwargs, "attention_mask": additive(kwargs["attention_mask"])})[1]
            finally:
                config._attn_implementation, state["dense"] = impl, False
            hs, q_resid, (cos, sin), mask = state["inputs"].pop(layer)
            scores = indexer_scores(module.indexer, hs.detach(), q_resid.detach(), (cos.detach(), sin.detach()), mask)
            state["losses"].append(indexer_kl(probs, scores))
            return None

        return hook

    def add_loss(module, args, kwargs, output):
        if state["losses"]:
            aux = torch.stack(state["losses"]).sum() * weight
            state["losses"].clear()
            output.logits = _AddGrad.apply(output.logits, aux)
        return output

    for layer, attn in enumerate(attention_modules(hf_model)):
        if getattr(attn, "indexer", None) is None:
            continue
        attn.indexer.register_forward_pre_hook(capture(layer), with_kwargs=True)
        attn.indexer.register_forward_hook(dense_indices, with_kwargs=True)
        attn.register_forward_hook(distill(layer), with_kwargs=True)
    hf_model.register_forward_hook(add_loss, with_kwargs=True)
    hf_model._phaseinterp_distill = True


__all__ = ["DISTILL_WEIGHT", "SelectionEdit", "additive", "attention_modules", "distill_indexer", "indexer_hooks", "indexer_kl",
           "indexer_scores", "indices_of", "selection_mask", "visible"]
