"""Training-free chunked KV compression of a pretrained Llama-family model (SmolLM2, Llama, Qwen2...).

`compress_attention(model, KVCompression(...))` replaces the attention of chosen layers by
`CompressedLlamaAttention`, which reuses the layer's own projections (same parameters, no training;
its QK-norm too where the layer has one, as Qwen3 and Gemma 3 do; Gemma 3's layers get the subclass
`families.gemma3.attention.CompressedGemma3Attention`, which keeps sliding windows) and attends, in one joint softmax, over

- compressed entries: window j covers positions jS .. jS+W-1; its key and value entries pool the
  layer's own keys and values over the window with weights a_{j,i} (i = 0..W-1); entry j is visible
  to query t iff jS + W - 1 <= t (docs/paper.md: the setting: only complete windows), and
- an exact local window: the last `local` tokens t-local+1 .. t (current included), as our
  compressed model does (a token may be seen both exactly and inside an entry), and
- optionally the first `sink` tokens exactly (attention sinks, as StreamingLLM keeps them), when
  they are outside the local window.

Pooling rules (the weights a_{j,i}, per KV head, shared by keys and values):

- `mean`: a_{j,i} = 1/W.
- `score`: the window's last query sees its window. With t_j = jS + W - 1 and G the query heads
  reading KV head g, a_{j,i} = (1/G) sum_{h in G} softmax_i(<RoPE(q_h, t_j), RoPE(k_{jS+i}, jS+i)> / sqrt(d)):
  the attention the query at the window's end (the moment the entry becomes visible, so causal)
  gives each of the window's keys, restricted to the window, averaged over the group's heads.
- `evict`: keep one token: a_{j,i} = 1 if i = `offset` else 0.

Rotation anchor (where pooled keys get their position):

- `post`: pool keys after RoPE (each rotated at its own position); nothing more.
- `first`, `centre`, `last`: pool keys before RoPE, rotate the entry at jS, jS + (W-1)/2
  (fractional for even W; RoPE is defined at any real position) or jS + W - 1.

Values are never rotated. With W = S = 1, `local=0` and any anchor the layer equals the original
attention (tested to float precision). A query that sees no key (`local=0`, before the first
window completes) gets a zero attention output.

Hook points (TransformerLens `HookPoint`s, names as in docs/hooks.md under `blocks.{l}.attn.`):
`hook_k`, `hook_v` [batch, pos, kv_head, d_head] (keys before RoPE, values), `compress_k.hook_gate`,
`compress_v.hook_gate` [batch, entry, offset, kv_head] (pool weights of the key and value branch;
computed once, an edit of one branch changes only that branch), `compress_k.hook_out`,
`compress_v.hook_out` [batch, entry, kv_head, d_head] (key entries before the anchor rotation,
rotated keys for `post`; value entries), `hook_rot_entries` [batch, entry, kv_head, d_head] (keys
attention reads), `hook_pattern` [batch, head, pos, key] (key axis: entries 0..n-1, then the sink
slots 0..sink-1 (positions 0..sink-1), then local slot i = position t - local + 1 + i, as in
`phaseinterp.model.key_positions`), `hook_z` [batch, pos, head, d_head].
`hook_cache(model, tokens)` reads them by name without nnsight.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Callable, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F
from jaxtyping import Bool, Float, Int
from torch import Tensor
from transformer_lens.hook_points import HookPoint

from phaseinterp.backends.compressed_final import _rope, _rotate_half, final_position_attention

RULES = ("mean", "score", "evict")
#: softmax scores (minus the row maximum) are clamped here before exp: see `CompressedLlamaAttention._pattern`
EXP_FLOOR = -80.0
ANCHORS = ("post", "first", "centre", "last")


@dataclass(frozen=True)
class KVCompression:
    """Geometry and rule of a training-free compression.

    Args:
        window: W, tokens per entry (>= 1). stride: S, tokens between window starts (1..W).
        rule: "mean", "score" or "evict" (module docstring). anchor: "post", "first", "centre" or "last".
        offset: the kept offset for `evict` (0..W-1; default W - 1).
        local: exact local window L (>= 0).
        sink: first tokens always attended exactly (>= 0; 0: none).
        layers: layers to compress (None: all).

    Example:
        >>> KVCompression(8, 8, "evict").kept_offset, KVCompression(4, 4, anchor="centre").name
        (7, 'W4/S4 mean@centre L16')
    """

    window: int
    stride: int
    rule: str = "mean"
    anchor: str = "post"
    offset: int | None = None
    local: int = 16
    sink: int = 0
    layers: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        for name, low in (("window", 1), ("stride", 1), ("local", 0), ("sink", 0)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise ValueError(f"{name}={v!r} is invalid: allowed an integer >= {low}")
        if self.stride > self.window:
            raise ValueError(f"stride={self.stride} is out of range: allowed 1..window={self.window} (gaps would drop tokens)")
        if self.rule not in RULES:
            raise ValueError(f"rule={self.rule!r} is invalid: allowed {list(RULES)}")
        if self.anchor not in ANCHORS:
            raise ValueError(f"anchor={self.anchor!r} is invalid: allowed {list(ANCHORS)}")
        if self.offset is not None and (self.rule != "evict" or isinstance(self.offset, bool)
                                        or not isinstance(self.offset, int) or not 0 <= self.offset < self.window):
            raise ValueError(f"offset={self.offset!r} is invalid: allowed None, or 0..{self.window - 1} with rule='evict'")
        if self.layers is not None:
            object.__setattr__(self, "layers", tuple(self.layers))

    @property
    def kept_offset(self) -> int:
        return self.window - 1 if self.offset is None else self.offset

    @property
    def name(self) -> str:
        rule = f"evict{self.kept_offset}" if self.rule == "evict" else self.rule
        sink = f" sink{self.sink}" if self.sink else ""
        return f"W{self.window}/S{self.stride} {rule}@{self.anchor} L{self.local}{sink}"

    def n_entries(self, seq_len: int) -> int:
        """Complete windows in a sequence of `seq_len` tokens."""
        return 0 if seq_len < self.window else (seq_len - self.window) // self.stride + 1

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "layers": None if self.layers is None else list(self.layers)}


class _Branch(nn.Module):
    """One compressor branch's hook points (`compress_k` / `compress_v`)."""

    def __init__(self) -> None:
        super().__init__()
        self.hook_gate = HookPoint()
        self.hook_out = HookPoint()


class CompressedLlamaAttention(nn.Module):
    """Drop-in replacement of a Llama-family attention module (see the module docstring).

    Shares `q_proj`, `k_proj`, `v_proj`, `o_proj` with the module it replaces (same parameters,
    same state_dict names); keeps the original for `restore_attention`. Full-sequence forwards only:
    a prefill may pass a KV cache (left alone), decoding from one raises. With `shared_prefix` (a
    `compressed_final.CompressedPrefix`) it recomputes one position instead (the final-position path).
    """

    def __init__(self, original: nn.Module, spec: KVCompression, rotary: nn.Module) -> None:
        super().__init__()
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (original.q_proj, original.k_proj,
                                                              original.v_proj, original.o_proj)
        self.spec = spec
        self.head_dim = original.head_dim
        self.group = original.num_key_value_groups
        self.scaling = original.scaling
        self.layer_idx = getattr(original, "layer_idx", None)
        # QK-norm (Qwen3, Gemma 3): RMSNorm of each head's query and key before RoPE; None elsewhere
        self.q_norm, self.k_norm = getattr(original, "q_norm", None), getattr(original, "k_norm", None)
        object.__setattr__(self, "original", original)  # not a submodule: parameters appear once
        object.__setattr__(self, "rotary", rotary)
        self.hook_k, self.hook_v = HookPoint(), HookPoint()
        self.compress_k, self.compress_v = _Branch(), _Branch()
        self.hook_rot_entries, self.hook_pattern, self.hook_z = HookPoint(), HookPoint(), HookPoint()

    def _cos_sin(self, x: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        return self.rotary(x, positions[None].to(x.device))

    def heads(self, which: str, x: Float[Tensor, "batch pos d_model"]) -> Float[Tensor, "batch pos heads d_head"]:
        """The layer's queries (`which="q"`) or keys ("k") of x before RoPE, per head (QK-norm applied)."""
        proj, norm = (self.q_proj, self.q_norm) if which == "q" else (self.k_proj, self.k_norm)
        h = proj(x).view(*x.shape[:-1], -1, self.head_dim)
        return h if norm is None else norm(h)

    def visible(self, t: Int[Tensor, " pos"], ends: Int[Tensor, " entry"]) -> Bool[Tensor, "pos key"]:
        """Which keys of `hook_pattern`'s layout (entries, sink slots, local slots) query t sees."""
        L, n_sink, dev = self.spec.local, self.spec.sink, t.device
        return torch.cat([ends[None] <= t[:, None],
                          torch.arange(n_sink, device=dev)[None] < t[:, None] - L + 1,  # outside the local window
                          t[:, None] - L + 1 + torch.arange(L, device=dev) >= 0], 1)

    def pool_weights(self, q_rot: Float[Tensor, "batch pos head d_head"], k_rot: Float[Tensor, "batch pos kv_head d_head"],
                     windows: Int[Tensor, "entry offset"]) -> Float[Tensor, "batch entry offset kv_head"]:
        """a_{j,i} of the spec's rule, for the windows' positions."""
        b, _, n_kv, _ = k_rot.shape
        n, W = windows.shape
        if self.spec.rule == "mean":
            return k_rot.new_full((b, n, W, n_kv), 1.0 / W)
        if self.spec.rule == "evict":
            a = k_rot.new_zeros((b, n, W, n_kv))
            a[:, :, self.spec.kept_offset] = 1.0
            return a
        q_end = q_rot[:, windows[:, -1]].unflatten(2, (n_kv, self.group))  # [b, n, kv, g, d]
        keys = _windows(k_rot, self.spec, n)  # [b, n, kv, d, W], a view
        scores = torch.einsum("bnkgd,bnkdw->bnkgw", q_end, keys) * self.scaling
        return scores.softmax(-1).mean(3).permute(0, 1, 3, 2)

    def entries(self, q_rot: Tensor, k: Tensor, k_rot: Tensor, v: Tensor, cos: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(rotated key entries, value entries, window ends) of every complete window, through the
        compressor hook points. Windows are strided views (`unfold`), never copied per window."""
        spec = self.spec
        T = k.shape[1]
        n = spec.n_entries(T)
        dev = k.device
        windows = torch.arange(n, device=dev)[:, None] * spec.stride + torch.arange(spec.window, device=dev)
        a = self.pool_weights(q_rot, k_rot, windows)
        # branch order k then v (gate, then entries): the order nnsight must visit them in
        pooled_from = k_rot if spec.anchor == "post" else k
        a_k = self.compress_k.hook_gate(a)
        k_ent = self.compress_k.hook_out(torch.einsum("bnwk,bnkdw->bnkd", a_k, _windows(pooled_from, spec, n)))
        a_v = self.compress_v.hook_gate(a.clone())
        v_ent = self.compress_v.hook_out(torch.einsum("bnwk,bnkdw->bnkd", a_v, _windows(v, spec, n)))
        if spec.anchor != "post":
            k_ent = _rope(k_ent, *self._cos_sin(k_ent, windows[:, 0].to(cos.dtype) + self.anchor_shift))
        return self.hook_rot_entries(k_ent), v_ent, windows[:, -1]

    @property
    def anchor_shift(self) -> float:
        """Where a pooled key is rotated, relative to its window's start (`first`/`centre`/`last`)."""
        return {"post": 0.0, "first": 0.0, "centre": (self.spec.window - 1) / 2,
                "last": float(self.spec.window - 1)}[self.spec.anchor]

    def forward(self, hidden_states: Tensor, position_embeddings: tuple[Tensor, Tensor] | None = None,
                attention_mask: Tensor | None = None, cache: Any = None, **kwargs: Any) -> tuple[Tensor, Tensor | None]:
        if kwargs.get("shared_prefix") is not None:  # the final-position path (`backends.kv_cache`)
            return final_position_attention(self, hidden_states, position_embeddings, kwargs["shared_prefix"])
        pos_ids = kwargs.get("position_ids")
        decoding = pos_ids is not None and int(pos_ids.reshape(-1)[0]) != 0
        if decoding:
            # a prefill with a cache is fine (the cache is left alone: the final-position path keeps
            # what it needs through the hook points); decoding from it is not
            raise ValueError("a compressed layer runs full sequences only: call the model with use_cache=False")
        d = self.head_dim
        b, T, _ = hidden_states.shape
        cos, sin = position_embeddings
        # head-major [b, heads, T, d] like HF's attention (the projection's own output is freed here)
        q_rot = _rope_heads(self.heads("q", hidden_states), cos, sin)
        k = self.hook_k(self.heads("k", hidden_states))
        v = self.hook_v(self.v_proj(hidden_states).view(b, T, -1, d))
        k_rot = _rope_heads(k, cos, sin)
        k_ent, v_ent, ends = self.entries(q_rot.transpose(1, 2), k, k_rot.transpose(1, 2), v, cos)
        L, n_sink, K = self.spec.local, self.spec.sink, k.shape[2]
        vT = v.transpose(1, 2)
        sink_k, sink_v = _pad_to(k_rot[:, :, :n_sink], n_sink), _pad_to(vT[:, :, :n_sink], n_sink)
        kp = _band_layout(k_rot, L)
        del k, k_rot  # each tensor is dropped once read: the peak stays near the uncompressed layer's
        p = self._pattern(q_rot.view(b, K, self.group, T, d), kp, sink_k, k_ent.transpose(1, 2), ends)
        del q_rot, kp
        z = self._mix(p, _band_layout(vT, L), sink_v, v_ent.transpose(1, 2))
        del p
        z = self.hook_z(z.view(b, T, -1, d))  # [b, T, head, d]
        return self.o_proj(z.reshape(b, T, -1)), None

    def _chunk(self) -> tuple[int, int]:
        """(queries per chunk, band block): chunks of ~64 queries, a multiple of the local window L
        so that band blocks never straddle two chunks."""
        step = max(self.spec.local, 1)
        return max(1, 64 // step) * step, step

    def _pattern(self, q: Float[Tensor, "batch kv_head group pos d_head"], kp: Float[Tensor, "batch kv_head key d_head"],
                 sink_k: Float[Tensor, "batch kv_head sink d_head"], ke: Float[Tensor, "batch kv_head entry d_head"],
                 ends: Int[Tensor, " entry"]) -> Float[Tensor, "batch kv_head group pos key"]:
        """One joint softmax per query over entries, sink and local keys (`hook_pattern`'s layout;
        the hook applied). Written chunk by chunk of queries into one buffer, softmax in place: no
        [pos, keys] temporary of the whole sequence besides the pattern the hook contract asks for;
        the local window is read through blocks (`_band_scores`), never gathered."""
        b, K, G, T, _ = q.shape
        L, n_sink, n = self.spec.local, self.spec.sink, len(ends)
        dev = q.device
        chunk, step = self._chunk()
        ke, sink_k = ke[:, :, None], sink_k[:, :, None]  # [b, kv, 1, n, d]: broadcast over the group
        pattern = q.new_empty(b, K, G, T, n + n_sink + L)  # joint key axis: entries, sink slots, local slots
        for s in range(0, T, chunk):
            e = min(s + chunk, T)
            qc, out, t = q[:, :, :, s:e], pattern[:, :, :, s:e], torch.arange(s, e, device=dev)
            cp = -(-(e - s) // step) * step
            out[..., :n] = qc @ ke.transpose(-1, -2)
            if n_sink:
                out[..., n:n + n_sink] = qc @ sink_k.transpose(-1, -2)
            out[..., n + n_sink:] = _band_scores(qc, kp[:, :, s:s + cp + L], L)
            hidden = ~self.visible(t, ends)
            out.mul_(self.scaling).masked_fill_(hidden, float("-inf"))
            # softmax in place. exp below -87 gives float32 denormals (or 0 from -inf), which CPUs compute
            # about 10x slower than normal values: scores are clamped at EXP_FLOOR (exp = 2e-35 of the row's
            # largest weight, below float32's resolution of the row sum) and hidden keys zeroed after exp.
            # A query that sees nothing (local=0, before the first window) attends to nothing.
            out.sub_(out.amax(-1, keepdim=True)).clamp_(min=EXP_FLOOR).exp_().masked_fill_(hidden, 0.0)
            out.div_(out.sum(-1, keepdim=True).clamp_(min=torch.finfo(out.dtype).tiny))
        return self.hook_pattern(pattern.view(b, K * G, T, -1)).view(b, K, G, T, -1)

    def _mix(self, p: Float[Tensor, "batch kv_head group pos key"], vp: Float[Tensor, "batch kv_head key d_head"],
             sink_v: Float[Tensor, "batch kv_head sink d_head"], ve: Float[Tensor, "batch kv_head entry d_head"]
             ) -> Float[Tensor, "batch pos kv_head group d_head"]:
        """The pattern's weighted values, chunk by chunk, in the layout `hook_z` reads."""
        b, K, G, T, _ = p.shape
        L, n_sink, n = self.spec.local, self.spec.sink, ve.shape[2]
        chunk, step = self._chunk()
        ve, sink_v = ve[:, :, None], sink_v[:, :, None]
        z = p.new_empty(b, T, K, G, ve.shape[-1])
        for s in range(0, T, chunk):
            e = min(s + chunk, T)
            pc = p[:, :, :, s:e]
            cp = -(-(e - s) // step) * step
            acc = pc[..., :n] @ ve  # chunk-sized temporaries, accumulated in place
            if n_sink:
                acc += pc[..., n:n + n_sink] @ sink_v
            if L:
                acc += _band_values(pc[..., n + n_sink:], vp[:, :, s:s + cp + L], L)
            z[:, s:e] = acc.permute(0, 3, 1, 2, 4)
        return z


def _band_layout(x: Float[Tensor, "batch kv_head pos d_head"], L: int) -> Float[Tensor, "batch kv_head key d_head"]:
    """x with L zero positions in front and padded to a multiple of L: index i holds position i - L."""
    return F.pad(x, (0, 0, L, -x.shape[2] % max(L, 1)))


def _rope_heads(x: Float[Tensor, "batch pos heads d_head"], cos: Tensor, sin: Tensor
                ) -> Float[Tensor, "batch heads pos d_head"]:
    """x rotated at its positions (cos/sin [batch or 1, pos, d]), head-major and contiguous; one
    copy of x and one temporary."""
    xt = x.transpose(1, 2).contiguous()
    r = _rotate_half(xt).mul_(sin[:, None])
    return xt.mul_(cos[:, None]).add_(r)


def _windows(x: Float[Tensor, "batch pos kv_head d_head"], spec: KVCompression, n: int
             ) -> Float[Tensor, "batch entry kv_head d_head offset"]:
    """The n complete windows of x as a strided view (no copy when S = W or the windows overlap)."""
    if n == 0:
        return x.new_zeros(x.shape[0], 0, *x.shape[2:], spec.window)
    return x[:, : (n - 1) * spec.stride + spec.window].unfold(1, spec.window, spec.stride)


def _pad_to(x: Tensor, n: int) -> Tensor:
    """x [..., m, d] padded with zeros to n positions (sink slots past the sequence: masked)."""
    return x if x.shape[-2] >= n else F.pad(x, (0, 0, 0, n - x.shape[-2]))


def _band_scores(q: Float[Tensor, "batch kv_head group pos d_head"], k: Float[Tensor, "batch kv_head key d_head"],
                 L: int) -> Float[Tensor, "batch kv_head group pos slot"]:
    """Scores of each query t (c of them, from a start s that is a multiple of L) against
    positions t - L + 1 .. t, slot i = position t - L + 1 + i. `k` holds positions s - L ..
    s + ceil(c / L) * L - 1 (zeros before 0: masked by the caller). Blocks of L queries read
    their own block and the one before: one batched matmul, 2L keys per query, no gather of keys."""
    b, K, G, c, d = q.shape
    if L == 0:
        return q.new_zeros(b, K, G, c, 0)
    nb = k.shape[2] // L - 1
    qb = F.pad(q, (0, 0, 0, nb * L - c)).view(b, K, G, nb, L, d).transpose(2, 3).reshape(b, K, nb, G * L, d)
    kb = k.reshape(b, K, nb + 1, L, d)
    keys = torch.cat([kb[:, :, :-1], kb[:, :, 1:]], 3)  # block i: positions s + (i-1)L .. s + (i+1)L - 1
    sc = (qb @ keys.transpose(-1, -2)).view(b, K, nb, G, L, 2 * L)
    sc = sc.gather(-1, _band_index(L, q.device).expand(b, K, nb, G, L, L))
    return sc.transpose(2, 3).reshape(b, K, G, nb * L, L)[:, :, :, :c]


def _band_index(L: int, device: torch.device) -> Tensor:
    """Query offset r in its block, slot i -> column r + 1 + i of the block's 2L keys."""
    return torch.arange(L, device=device)[:, None] + 1 + torch.arange(L, device=device)


def _band_values(p: Float[Tensor, "batch kv_head group pos slot"], v: Float[Tensor, "batch kv_head key d_head"],
                 L: int) -> Float[Tensor, "batch kv_head group pos d_head"]:
    """sum_i p[..., i] * v[t - L + 1 + i], `v` laid out as `_band_scores`'s `k`."""
    b, K, G, c, _ = p.shape
    if L == 0:
        return p.new_zeros(b, K, G, c, v.shape[-1])
    nb = v.shape[2] // L - 1
    vb = v.reshape(b, K, nb + 1, L, -1)
    band_v = torch.cat([vb[:, :, :-1], vb[:, :, 1:]], 3)  # [b, K, nb, 2L, d]
    pb = F.pad(p, (0, 0, 0, nb * L - c)).view(b, K, G, nb, L, L).transpose(2, 3)  # [b, K, nb, G, L, L]
    full = pb.new_zeros(b, K, nb, G, L, 2 * L).scatter_(-1, _band_index(L, p.device).expand(b, K, nb, G, L, L), pb)
    out = full.view(b, K, nb, G * L, 2 * L) @ band_v  # [b, K, nb, G * L, d]
    return out.view(b, K, nb, G, L, -1).transpose(2, 3).reshape(b, K, G, nb * L, -1)[:, :, :, :c]


def _layers(model: nn.Module) -> nn.ModuleList:
    inner = getattr(model, "model", None)
    if inner is None or not hasattr(inner, "layers") or not hasattr(inner, "rotary_emb"):
        raise ValueError(f"model of type {type(model).__name__} is invalid: allowed a Llama-family HF causal LM "
                         "(model.model.layers and model.model.rotary_emb)")
    return inner.layers


def compressed_layers(model: nn.Module) -> dict[int, CompressedLlamaAttention]:
    """{layer: wrapper} of the layers `compress_attention` replaced."""
    return {i: blk.self_attn for i, blk in enumerate(_layers(model)) if isinstance(blk.self_attn, CompressedLlamaAttention)}


def restore_attention(model: nn.Module) -> nn.Module:
    """Put the original attention modules back (undoes `compress_attention`)."""
    for i, attn in compressed_layers(model).items():
        _layers(model)[i].self_attn = attn.original
    return model


#: HF attention class name -> its compressed wrapper, for attentions that differ from Llama's; a family
#: module registers its own on import (`families.gemma3.attention`), so this floor never imports it.
WRAPPERS: dict[str, type[CompressedLlamaAttention]] = {}
#: attentions whose wrapper lives in a family module, and the function that compresses them
_REGISTERED_BY = {"Gemma3Attention": "compress_gemma3 (families/gemma3/attention.py)"}


def _wrapper(attn: nn.Module) -> type[CompressedLlamaAttention]:
    """The compressed attention class for an HF attention module: the registered one (Gemma 3's:
    sliding windows, RoPE per layer type) or the Llama family's."""
    name = type(attn).__name__
    if name in WRAPPERS:
        return WRAPPERS[name]
    if name in _REGISTERED_BY:
        raise ValueError(f"attention {name} is invalid here until its family's wrapper is registered: "
                         f"compress it with {_REGISTERED_BY[name]}, which registers it")
    return CompressedLlamaAttention


def compress_attention(model: nn.Module, spec: KVCompression) -> nn.Module:
    """Replace the attention of `spec.layers` (default all) by `CompressedLlamaAttention`, in place
    (earlier compression is undone first). Returns the model.

    Raises:
        ValueError: a layer index outside 0..n_layers-1, or a model that is not Llama-family.
    """
    layers = _layers(model)
    restore_attention(model)
    chosen = range(len(layers)) if spec.layers is None else spec.layers
    for i in chosen:
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < len(layers):
            raise ValueError(f"layer={i!r} is out of range: allowed 0..{len(layers) - 1}")
    for i in chosen:
        layers[i].self_attn = _wrapper(layers[i].self_attn)(layers[i].self_attn, spec, model.model.rotary_emb)
    return model


def hook_cache(model: nn.Module, tokens: Int[Tensor, "batch pos"],
               names: Sequence[str] | Callable[[str], bool] | None = None) -> tuple[Tensor, dict[str, Tensor]]:
    """Logits and the activations of the compressed layers' hook points, keyed
    `blocks.{l}.attn.<hook>` (e.g. `blocks.3.attn.compress_k.hook_gate`), like `run_with_cache`.

    Args:
        names: the names to keep (a list or a predicate); None keeps all.

    Raises:
        ValueError: a listed name that no compressed layer has (the closest ones are named).
    """
    found = {f"blocks.{l}.attn.{n}": m for l, attn in compressed_layers(model).items()
             for n, m in attn.named_modules() if isinstance(m, HookPoint)}
    if names is None:
        keep = list(found)
    elif callable(names):
        keep = [n for n in found if names(n)]
    else:
        missing = [n for n in names if n not in found]
        if missing:
            import difflib

            close = difflib.get_close_matches(missing[0], list(found), n=5, cutoff=0.5)
            raise ValueError(f"hook name {missing[0]!r} is not available; closest: {close}")
        keep = list(names)
    store: dict[str, Tensor] = {}
    handles = [found[n].register_forward_hook(lambda mod, inp, out, n=n: store.__setitem__(n, out.detach()))
               for n in keep]
    try:
        with torch.no_grad():
            logits = model(input_ids=tokens, use_cache=False).logits
    finally:
        for h in handles:
            h.remove()
    return logits, store
