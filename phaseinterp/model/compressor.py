"""One compression branch: fold W-token windows (every S tokens) into one entry per KV head.

For window j and offset i (absolute position p = start_j + i, layer input h_p):

    s_{j,i} = Z_{m(i)} h_p + b_i          gate logits, [kv_head] (scalar) or [kv_head, d_head] (vector)
    a_{j,i} = softmax_i(s_{j,i})          gate weights
    E_j     = RMSNorm(sum_i a_{j,i} * C_{m(i)} h_p)

`m(i)` picks the map used at offset i: i ("per_offset"), 0 ("shared"), or the window's block
`i // S` when the layout has block maps (`phaseinterp.layouts`; "deepseek-csa": 0 = previous
block's `a` slots, 1 = current block's `b` slots). Slots before position 0
(deepseek-csa entry 0, or a shifted grid's first window) get gate logit -inf, i.e. weight 0, as in
HuggingFace DeepSeek-V4. RoPE is not applied here: the attention rotates key entries
(`attn.hook_rot_entries`).

With `chunkings = k > 1`, entry j belongs to chunking j mod k, which has its own maps: rows
`c * n_maps + m(i)` of `W_C`, `W_Z` and rows `c * W + i` of `b_Z`.
"""

from __future__ import annotations

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor, nn

from phaseinterp.config import CompressionConfig
from phaseinterp.gates import gate_kind
from phaseinterp.layouts import layout_of
from phaseinterp.model.layers import RMSNorm
from phaseinterp.model.hook_point import HookPoint
from phaseinterp.model.static import tracing


def window_starts(cc: CompressionConfig, n_entries: int, device: torch.device | None = None) -> Int[Tensor, " entry"]:
    """First absolute position of each of the first `n_entries` windows (may be negative)."""
    return torch.arange(n_entries, device=device) * cc.entry_stride - cc.pad


def entry_rope_positions(cc: CompressionConfig, n_entries: int, device: torch.device | None = None
                         ) -> Int[Tensor, " entry"]:
    """Positions at which the key entries are rotated (`CompressionConfig.rope_position`)."""
    return window_starts(cc, n_entries, device) + cc.rope_shift


def window_positions(cc: CompressionConfig, seq_len: int, device: torch.device | None = None
                     ) -> Int[Tensor, "entry window"]:
    """Absolute positions covered by each complete window: [n_entries, W] (may hold negatives)."""
    return slot_positions(cc, cc.n_entries(seq_len), device)


def slot_positions(cc: CompressionConfig, n_entries: int, device: torch.device | None = None
                   ) -> Int[Tensor, "entry window"]:
    """Absolute position of every slot of the first `n_entries` windows (negative: before 0)."""
    return window_starts(cc, n_entries, device)[:, None] + torch.arange(cc.window, device=device)


def map_index(cc: CompressionConfig, maps: str) -> Int[Tensor, " window"]:
    """Row of the payload or gate weights that each window offset uses (`CompressionConfig.payload`, `gate_maps`)."""
    if layout_of(cc.layout).block_maps:
        return torch.arange(cc.window) // cc.stride
    if maps == "per_offset":
        return torch.arange(cc.window)
    return torch.zeros(cc.window, dtype=torch.long)


def n_maps(cc: CompressionConfig, maps: str) -> int:
    """How many payload or gate maps a chunking has: W per offset, 1 shared, or one per window block."""
    if layout_of(cc.layout).block_maps:
        return -(-cc.window // cc.stride)
    return cc.window if maps == "per_offset" else 1


def _consecutive(index: Tensor) -> bool:
    """Are the map rows of the window offsets 0, 1, .. (per-offset maps)? Then the maps are a
    view of the weight: at large widths a gathered copy costs more than the einsum reading it."""
    return bool((index == torch.arange(index.numel(), device=index.device)).all())


#: Gate logits at most this wide go through one matmul per window offset when no gradient is
#: recorded (`_through_maps`).
NARROW_LOGITS = 4


def _through_maps(windows: Float[Tensor, "batch entry window d_model"], maps: Float[Tensor, "window d_model out"]
                  ) -> Float[Tensor, "batch entry window out"]:
    """Slot i of every window through map i. For narrow outputs (scalar gates) one matmul per offset,
    reading the windows in place, is 4-7x faster on CPU than the batched matmul einsum runs (2,048
    windows of 8 x 256, one output column); its backward is slower, so autograd keeps the einsum, and
    so does torch.compile (which was no faster with the loop)."""
    if tracing() or maps.shape[-1] > NARROW_LOGITS or (
            torch.is_grad_enabled() and (windows.requires_grad or maps.requires_grad)):
        return torch.einsum("bnwd,wde->bnwe", windows, maps)
    return torch.stack([windows[:, :, i] @ maps[i] for i in range(maps.shape[0])], dim=2)


class Compressor(nn.Module):
    """Hooks: `hook_gate_logits`, `hook_gate` [batch, entry, offset, kv_head(, d_head)] and
    `hook_out` [batch, entry, kv_head, d_head] (normed entries, before RoPE)."""

    def __init__(self, cc: CompressionConfig, d_model: int, n_kv_heads: int, d_head: int, eps: float):
        super().__init__()
        self.cc, self.n_kv_heads, self.d_head = cc, n_kv_heads, d_head
        out = n_kv_heads * d_head
        self.register_buffer("payload_index", map_index(cc, cc.payload), persistent=False)
        self.register_buffer("gate_index", map_index(cc, cc.gate_maps), persistent=False)
        self._arange_seen: dict[str, tuple[tuple[int, int], bool]] = {}
        k = cc.chunkings
        self.W_C = nn.Parameter(torch.empty(k * n_maps(cc, cc.payload), d_model, out))
        self.kind = gate_kind(cc.gate)
        gate_out = self.kind.logit_width(n_kv_heads, d_head)
        if gate_out is not None:
            self.W_Z = nn.Parameter(torch.empty(k * n_maps(cc, cc.gate_maps), d_model, gate_out))
            if cc.offset_bias:
                self.b_Z = nn.Parameter(torch.zeros(k * cc.window, gate_out))
        self.norm = RMSNorm(d_head, eps) if cc.entry_norm else None
        self.hook_gate_logits = HookPoint()
        self.hook_gate = HookPoint()
        self.hook_out = HookPoint()

    def gate_shape(self) -> tuple[int, ...]:
        return self.kind.shape(self.n_kv_heads, self.d_head)

    def forward(self, h: Float[Tensor, "batch pos d_model"]) -> Float[Tensor, "batch entry kv_head d_head"]:
        pos = window_positions(self.cc, h.shape[1], h.device)
        return self.fold(h[:, pos.clamp(min=0)], pos < 0)

    def _maps_of(self, weight: Tensor, index_name: str, first: int) -> Tensor:
        """`weight[index + first]`: the map of each window offset. The index buffer is checked again
        whenever it changes (gate cycling rolls `gate_index` in place)."""
        index = getattr(self, index_name)
        if tracing():  # the check below is Python state: compiled, it would guard and recompile
            return weight[index + first]
        key = (index.data_ptr(), index._version)
        seen = self._arange_seen.get(index_name)
        if seen is None or seen[0] != key:
            seen = self._arange_seen[index_name] = (key, _consecutive(index))
        return weight[first:first + index.numel()] if seen[1] else weight[index + first]

    def _maps(self, windows: Tensor, chunking: int) -> tuple[Tensor, Tensor | None]:
        """Payload [b, n, W, kv_head * d] and gate logits (None for uniform gates) of one chunking."""
        cc = self.cc
        payload = torch.einsum("bnwd,wde->bnwe", windows, self._maps_of(self.W_C, "payload_index", chunking * n_maps(cc, cc.payload)))
        if not self.kind.learned:
            return payload, None
        logits = _through_maps(windows, self._maps_of(self.W_Z, "gate_index", chunking * n_maps(cc, cc.gate_maps)))
        if cc.offset_bias:
            logits = logits + self.b_Z[chunking * cc.window:(chunking + 1) * cc.window]
        return payload, logits

    def fold(self, windows: Float[Tensor, "batch entry window d_model"], before_start: Bool[Tensor, "entry window"],
             first_entry: int = 0) -> Float[Tensor, "batch entry kv_head d_head"]:
        """Entries [batch, n, kv_head, d_head] of windows [batch, n, W, d_model] that are entries
        `first_entry ..` of the layer; `before_start` [n, W] marks slots before position 0."""
        k = self.cc.chunkings
        batch, n, width, _ = windows.shape
        if k == 1:
            payload, logits = self._maps(windows, 0)
        else:
            parts = [(c, self._maps(windows[:, c::k], (first_entry + c) % k)) for c in range(min(k, n))]
            payload = windows.new_empty(batch, n, width, self.W_C.shape[-1])
            logits = None if not self.kind.learned else windows.new_empty(batch, n, width, self.W_Z.shape[-1])
            for c, (p, g) in parts:
                payload[:, c::k] = p
                if logits is not None:
                    logits[:, c::k] = g
        payload = payload.view(batch, n, width, self.n_kv_heads, self.d_head)
        if logits is None:
            logits = windows.new_zeros(batch, n, width, *self.gate_shape())
        else:
            logits = logits.view(batch, n, width, *self.gate_shape())
        before_start = before_start.view(1, n, width, *([1] * len(self.gate_shape())))
        logits = self.hook_gate_logits(logits.masked_fill(before_start, float("-inf")))
        gate = self.hook_gate(self.kind.normalize(logits, 2))
        if not self.kind.per_channel:
            gate = gate[..., None]
        entries = (gate * payload).sum(dim=2)
        if self.norm is not None:
            entries = self.norm(entries)
        return self.hook_out(entries)
