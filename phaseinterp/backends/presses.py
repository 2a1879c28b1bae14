"""Training-free selection presses (ChunkKV-like chunk selection, SnapKV-like token selection) for a
pretrained Llama-family model (SmolLM2, Llama, Qwen2/3) or Gemma 3, beside the pooling compression of
`kv_compression`.

`press_attention(model, SelectionPress(...))` replaces the attention of chosen layers by
`PressedLlamaAttention`, which reuses the layer's own projections (and QK-norm where the layer has
one). For each query position t and each KV head g, with G the query heads reading g:

- scores: s_t(i) = (1/G) sum_{h in G} softmax_i(<RoPE(q_h, t), RoPE(k_i, i)> / sqrt(d)) over the
  causal keys i <= t (the full attention the query would give);
- candidates: the keys older than the exact local window, i < t - local + 1, and not sink tokens
  (i >= sink: those are kept anyway, so their attention is not counted);
- `kind="chunk"`: keys form S-token chunks on a fixed grid from position 0 (chunk j = positions
  jS .. jS+S-1). A chunk is a candidate iff it is complete and wholly older than the local window
  (jS + S - 1 < t - local + 1); its score is the sum of s_t over its candidate tokens. The `budget`
  best chunks are kept whole (fewer when fewer are candidates);
- `kind="token"`: the `budget * S` best single candidate tokens (fewer when fewer exist);
- kept set: selected ∪ sink (positions 0..sink-1, i <= t) ∪ local window (t-local+1 .. t). The query
  attends, in one softmax per query head, over its KV head's kept set only.
- sliding-window layers (Gemma 3's local layers, window w): query t sees keys t-w+1 .. t only, so
  scores, candidates (chunks wholly inside), sink and local window are all cut to that range; with
  everything visible kept, the layer is the original sliding layer.

Two timings. By default (`prefill=None`) every query selects from its own past by its own attention
(dynamic selection, as Quest-like sparse attention does). A press as kvpress applies it (`prefill=P`,
static selection, SnapKV / ChunkKV): the prompt is positions 0..P-1 and is prefilled with the original
attention; at the end of prefill the cache is compressed once, by the attention of the last `observe`
prompt queries (the question), averaged over them: the kept set is what the rule above keeps for a
query at P-1 with those scores (selected ∪ sink ∪ local window P-local .. P-1). Every query t >= P
(a decoded token, teacher-forced) reads that kept set plus the decoded tokens P .. t, exactly.

Ties are broken by `torch.topk`. Each query selects from its own past, so one full-sequence forward
equals decoding with such a cache (causal, tested). With every candidate kept (budget large enough,
or local >= T) the layer equals the original attention (tested to 1e-5). A query that keeps nothing
(local=0 and sink=0 with no candidate yet) gets a zero attention output.

Hook points (TransformerLens `HookPoint`s, under `blocks.{l}.attn.` like the compressed layers):
`hook_k`, `hook_v` [batch, pos, kv_head, d_head] (keys before RoPE, values), `hook_keep` [batch,
kv_head, pos, key] (bool: what query pos keeps; editable, the attention reads the edited set),
`hook_pattern` [batch, head, pos, key] (key axis: positions 0..T-1, zero where not kept), `hook_z`
[batch, pos, head, d_head]. Dynamic selection scores every query over every key (dense T x T: prompts
of a few thousand tokens on CPU). A static press whose `hook_keep` and `hook_pattern` nothing reads (no
TransformerLens hook, no nnsight trace) does not build them: the prompt runs fused attention and only the
question's and the decoded queries are scored (`PressedLlamaAttention.materializes`; same output).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn as nn
from jaxtyping import Bool, Float
from torch import Tensor
from transformer_lens.hook_points import HookPoint

from phaseinterp.backends.kv_compression import _layers, _rope_heads, restore_attention
from phaseinterp.model.attention import nnsight_may_read

KINDS = ("chunk", "token")


@dataclass(frozen=True)
class SelectionPress:
    """What a selection press keeps (module docstring).

    Args:
        kind: "chunk" (keep the `budget` best S-token grid chunks whole) or "token" (keep the
            `budget * chunk` best single tokens: the control at equal budget).
        chunk: S, tokens per chunk (>= 1). budget: chunks kept (>= 1; tokens: budget * S).
        local: exact local window (>= 0, current token included). sink: first tokens always kept (>= 0).
        layers: layers to press (None: all).
        prefill: None (dynamic: every query selects) or P >= 1, the prompt length of a static press
            (module docstring: the cache of positions 0..P-1 is compressed once, queries >= P read it).
        observe: static press: the last `observe` prompt queries whose attention scores the keys (>= 1).

    Example:
        >>> SelectionPress("chunk", 8, 4, local=64, sink=4).name, SelectionPress("token", 8, 4).n_tokens
        ('chunk S8 k4 L64 sink4', 32)
        >>> SelectionPress("chunk", 8, 1, prefill=1020, observe=16).name
        'chunk S8 k1 L16 static P1020 obs16'
    """

    kind: str
    chunk: int
    budget: int
    local: int = 16
    sink: int = 0
    layers: tuple[int, ...] | None = None
    prefill: int | None = None
    observe: int = 1

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind={self.kind!r} is invalid: allowed {list(KINDS)}")
        lows = (("chunk", 1), ("budget", 1), ("local", 0), ("sink", 0), ("observe", 1))
        for name, low in lows + ((("prefill", 1),) if self.prefill is not None else ()):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise ValueError(f"{name}={v!r} is invalid: allowed an integer >= {low}"
                                 + (" (or None: dynamic selection)" if name == "prefill" else ""))
        if self.layers is not None:
            object.__setattr__(self, "layers", tuple(self.layers))

    @property
    def n_tokens(self) -> int:
        """Selected tokens per query and KV head at most (budget * S), both kinds."""
        return self.budget * self.chunk

    @property
    def name(self) -> str:
        sink = f" sink{self.sink}" if self.sink else ""
        static = "" if self.prefill is None else f" static P{self.prefill} obs{self.observe}"
        return f"{self.kind} S{self.chunk} k{self.budget} L{self.local}{sink}{static}"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "layers": None if self.layers is None else list(self.layers)}


def kept_keys(press: SelectionPress, scores: Float[Tensor, "batch kv_head pos key"],
              window: int | None = None) -> Bool[Tensor, "batch kv_head pos key"]:
    """The kept set of each query (module docstring) from the group-averaged attention `scores`
    (zero on future keys and, with a sliding `window`, on keys before t - window + 1)."""
    T = scores.shape[-1]
    dev = scores.device
    P = press.prefill
    if P is None:
        return _selected(press, scores, torch.arange(T, device=dev), window)
    keep = _seen(torch.arange(T, device=dev), T, window).expand(*scores.shape).clone()  # prefilled: the original attention
    if P < T:
        keep[:, :, P:] = _kept_after_prefill(press, scores[:, :, max(0, P - press.observe): P].mean(2, keepdim=True),
                                             window)
    return keep


def _seen(t: Tensor, T: int, window: int | None) -> Bool[Tensor, "query key"]:
    """The keys 0..T-1 queries at positions `t` see (causal; with a sliding `window`, the last `window`)."""
    t, i = t[:, None], torch.arange(T, device=t.device)[None]
    return (i <= t) & (i >= (t - window + 1 if window is not None else 0))


def _kept_after_prefill(press: SelectionPress, question: Float[Tensor, "batch kv_head 1 key"], window: int | None
                        ) -> Bool[Tensor, "batch kv_head query key"]:
    """What the queries after a static press's prompt (positions P..T-1) keep: the selection at the end of
    prefill by the question's averaged attention `question` (zero on keys >= P), then the decoded tokens."""
    P, T = press.prefill, question.shape[-1]
    dev = question.device
    at_end = _selected(press, question, torch.tensor([P - 1], device=dev), window)  # [b, K, 1, key]
    return (at_end | (torch.arange(T, device=dev) >= P)) & _seen(torch.arange(P, T, device=dev), T, window)


def _selected(press: SelectionPress, scores: Float[Tensor, "batch kv_head query key"], t: Tensor,
              window: int | None) -> Bool[Tensor, "batch kv_head query key"]:
    """What queries at positions `t` keep by dynamic selection, from their `scores` over all keys."""
    T = scores.shape[-1]
    dev = scores.device
    t, i = t[:, None], torch.arange(T, device=dev)[None]
    first = t - window + 1 if window is not None else torch.zeros_like(t)  # the oldest key query t sees
    recent = i > t - press.local  # inside the local window (or future, masked below)
    candidate = ~recent & (i >= press.sink) & (i >= first)
    s = scores.masked_fill(~candidate, 0.0)
    S = press.chunk
    if press.kind == "token":
        valid = candidate
        k = min(press.n_tokens, T)
        ranked = s.masked_fill(~candidate, float("-inf"))
    else:
        n = T // S  # complete chunks only
        starts = torch.arange(n, device=dev) * S
        # [pos, chunk]: wholly older than the local window, wholly inside the sliding one
        valid = (starts[None] + S - 1 < t - press.local + 1) & (starts[None] >= first)
        k = min(press.budget, n)
        ranked = s[..., : n * S].unflatten(-1, (n, S)).sum(-1).masked_fill(~valid, float("-inf"))
    chosen = torch.zeros_like(ranked, dtype=torch.bool)
    if k:
        chosen.scatter_(-1, ranked.topk(k, dim=-1).indices, True)
    chosen &= valid  # fewer candidates than k: the -inf ones picked to fill are dropped
    if press.kind == "chunk":
        chosen = torch.nn.functional.pad(chosen.repeat_interleave(S, dim=-1), (0, T - chosen.shape[-1] * S))
    seen = (i <= t) & (i >= first)
    return chosen | (seen & ((i < press.sink) | recent))


class PressedLlamaAttention(nn.Module):
    """Drop-in replacement of a Llama-family or Gemma 3 attention module that keeps, per query and
    KV head, the set a `SelectionPress` selects (module docstring). Shares `q_proj`, `k_proj`,
    `v_proj`, `o_proj` (and `q_norm`, `k_norm`, `scaling`, the sliding window) with the module it
    replaces; keeps the original for `restore_presses`. Full-sequence forwards only: decoding from
    a KV cache raises."""

    def __init__(self, original: nn.Module, press: SelectionPress) -> None:
        super().__init__()
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (original.q_proj, original.k_proj,
                                                              original.v_proj, original.o_proj)
        self.press = press
        self.head_dim = original.head_dim
        self.group = original.num_key_value_groups
        self.scaling = original.scaling
        self.layer_idx = getattr(original, "layer_idx", None)
        #: None on a full-attention layer; else query t sees keys t - sliding_window + 1 .. t
        self.sliding_window = getattr(original, "sliding_window", None)
        self.q_norm, self.k_norm = getattr(original, "q_norm", None), getattr(original, "k_norm", None)
        object.__setattr__(self, "original", original)  # not a submodule: parameters appear once
        self.hook_k, self.hook_v, self.hook_keep = HookPoint(), HookPoint(), HookPoint()
        self.hook_pattern, self.hook_z = HookPoint(), HookPoint()

    def heads(self, which: str, x: Float[Tensor, "batch pos d_model"]) -> Float[Tensor, "batch pos heads d_head"]:
        """The layer's queries ("q") or keys ("k") of x before RoPE, per head (QK-norm applied)."""
        proj, norm = (self.q_proj, self.q_norm) if which == "q" else (self.k_proj, self.k_norm)
        h = proj(x).view(*x.shape[:-1], -1, self.head_dim)
        return h if norm is None else norm(h)

    def forward(self, hidden_states: Tensor, position_embeddings: tuple[Tensor, Tensor] | None = None,
                attention_mask: Tensor | None = None, **kwargs: Any) -> tuple[Tensor, Tensor | None]:
        pos_ids = kwargs.get("position_ids")
        if pos_ids is not None and int(pos_ids.reshape(-1)[0]) != 0:
            raise ValueError("a pressed layer runs full sequences only: call the model with use_cache=False")
        b, T, _ = hidden_states.shape
        d, G = self.head_dim, self.group
        cos, sin = position_embeddings
        q_rot = _rope_heads(self.heads("q", hidden_states), cos, sin)  # [b, H, T, d]
        k = self.hook_k(self.heads("k", hidden_states))
        v = self.hook_v(self.v_proj(hidden_states).view(b, T, -1, d))
        k_rot = _rope_heads(k, cos, sin)  # [b, K, T, d]
        K = k_rot.shape[1]
        if not self.materializes():
            z = self.hook_z(self._static(q_rot, k_rot, v.transpose(1, 2)).transpose(1, 2))
            return self.o_proj(z.reshape(b, T, -1)), None
        logits = (q_rot.view(b, K, G, T, d) @ k_rot[:, :, None].transpose(-1, -2)) * self.scaling
        hidden = ~_seen(torch.arange(T, device=logits.device), T, self.sliding_window)
        with torch.no_grad():  # the selection is discrete: no gradient flows through it
            scores = logits.masked_fill(hidden, float("-inf")).softmax(-1).mean(2)
            keep = kept_keys(self.press, scores, self.sliding_window)
        keep = self.hook_keep(keep)
        masked = logits.masked_fill(~(keep[:, :, None] & ~hidden), float("-inf"))
        # a query that keeps nothing attends to nothing (zero output), not to NaN
        p = masked.softmax(-1).nan_to_num(0.0)
        p = self.hook_pattern(p.view(b, K * G, T, T))
        z = self.hook_z((p @ v.transpose(1, 2).repeat_interleave(G, dim=1)).transpose(1, 2))  # [b, T, H, d]
        return self.o_proj(z.reshape(b, T, -1)), None

    def materializes(self) -> bool:
        """Build every query's kept set and pattern over all T keys (`hook_keep`, `hook_pattern`): for
        dynamic selection, when a hook reads either (TransformerLens or torch), or inside an nnsight trace (which
        may; nnsight sets no hooks) other than the backends' own (`engine_trace`: they never read either).
        Otherwise a static press runs `_static`: same output, no per-head T x T tensors."""
        if self.press.prefill is None:
            return True
        points = (self.hook_keep, self.hook_pattern)
        return any(h._forward_hooks or h._forward_pre_hooks or nnsight_may_read(h) for h in points)

    def _static(self, q_rot: Float[Tensor, "batch head pos d_head"], k_rot: Float[Tensor, "batch kv_head pos d_head"],
                v: Float[Tensor, "batch kv_head pos d_head"]) -> Float[Tensor, "batch head pos d_head"]:
        """A static press without per-head T x T tensors: the prompt's queries (0..P-1) attend as the original layer
        does (fused attention); only the question's queries score keys, and only the decoded queries
        (P..T-1) read the kept set."""
        b, H, T, d = q_rot.shape
        K, G = k_rot.shape[1], self.group
        P = min(self.press.prefill, T)  # type: ignore[type-var]  # materializes() is False: prefill is set
        sees = _seen(torch.arange(T, device=q_rot.device), T, self.sliding_window)
        z = torch.nn.functional.scaled_dot_product_attention(
            q_rot[:, :, :P], k_rot[:, :, :P].repeat_interleave(G, dim=1), v[:, :, :P].repeat_interleave(G, dim=1),
            attn_mask=sees[:P, :P], scale=self.scaling)
        if P == T:
            return z
        lo = max(0, P - self.press.observe)
        logits = (q_rot[:, :, lo:P].view(b, K, G, P - lo, d) @ k_rot[:, :, None, :P].transpose(-1, -2)) * self.scaling
        question = logits.masked_fill(~sees[lo:P, :P], float("-inf")).softmax(-1).mean(2).mean(2, keepdim=True)
        keep = _kept_after_prefill(self.press, torch.nn.functional.pad(question, (0, T - P)), self.sliding_window)
        logits = (q_rot[:, :, P:].view(b, K, G, T - P, d) @ k_rot[:, :, None].transpose(-1, -2)) * self.scaling
        p = logits.masked_fill(~keep[:, :, None], float("-inf")).softmax(-1).nan_to_num(0.0)
        return torch.cat([z, (p @ v[:, :, None]).view(b, H, T - P, d)], 2)


def pressed_layers(model: nn.Module) -> dict[int, PressedLlamaAttention]:
    """{layer: wrapper} of the layers `press_attention` replaced."""
    return {i: blk.self_attn for i, blk in enumerate(_layers(model)) if isinstance(blk.self_attn, PressedLlamaAttention)}


def restore_presses(model: nn.Module) -> nn.Module:
    """Put the original attention modules back (undoes `press_attention`)."""
    for i, attn in pressed_layers(model).items():
        _layers(model)[i].self_attn = attn.original
    return model


def press_attention(model: nn.Module, press: SelectionPress) -> nn.Module:
    """Replace the attention of `press.layers` (default all) by `PressedLlamaAttention`, in place
    (earlier presses and `compress_attention` compression are undone first). Returns the model.

    Example:
        >>> from phaseinterp.backends.tiny import tiny_qwen3
        >>> model = press_attention(tiny_qwen3(seed=0), SelectionPress("chunk", 4, 2, local=8, layers=(1,)))
        >>> sorted(pressed_layers(model)), sorted(pressed_layers(restore_presses(model)))
        ([1], [])

    Raises:
        ValueError: a layer index outside 0..n_layers-1, or a model that is neither Llama-family
            nor Gemma 3.
    """
    layers = _layers(model)
    restore_presses(model)
    restore_attention(model)
    chosen = range(len(layers)) if press.layers is None else press.layers
    for i in chosen:
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < len(layers):
            raise ValueError(f"layer={i!r} is out of range: allowed 0..{len(layers) - 1}")
        attn = layers[i].self_attn
        if not all(hasattr(attn, a) for a in ("q_proj", "k_proj", "v_proj", "o_proj", "scaling", "head_dim")):
            raise ValueError(f"attention {type(attn).__name__} of layer {i} is invalid: allowed a Llama-family "
                             "(Llama, SmolLM2, Qwen2/3) or Gemma 3 attention")
    for i in chosen:
        layers[i].self_attn = PressedLlamaAttention(layers[i].self_attn, press)
    return model


def apply_attention(model: nn.Module, how: Any) -> nn.Module:
    """The model with `how` in place of whatever compression or press it had: a `KVCompression`
    (`compress_attention`), a `SelectionPress` (`press_attention`) or None (the original attention).

    Example:
        >>> apply_attention(model, SelectionPress("chunk", 8, 4))  # doctest: +SKIP
    """
    from phaseinterp.backends.kv_compression import KVCompression, compress_attention

    restore_attention(model)
    restore_presses(model)
    if isinstance(how, KVCompression):
        return compress_attention(model, how)
    return model if how is None else press_attention(model, how)
