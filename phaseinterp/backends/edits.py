"""Interventions a backend applies during one forward, as plain data.

Every backend presents its activations in one canonical layout per site, and these edits act on
that layout, so an edit means the same on every model:

    site     canonical layout                          edit
    head     [batch, pos, head, d_head]                Replace(Unit("head"|"kv_head", l, i), value, positions)
    layer    [batch, pos, d_model]                     Replace(Unit("layer", l), value, positions)
    gate_logits [batch, entry, offset, kv_head, channel]  CycleGate(Unit("gate", l, b), delta)
    gate     [batch, entry, offset, kv_head, channel]  SetGate(Unit("gate", l, b), weights)
    entry    [batch, entry, kv_head, d_entry]          SetEntries(Unit("gate", l, b), entries, value)

`channel` is 1 for scalar gates and d_head for vector gates (DeepSeek-V4). Edits are checked
against the backend and the input (`check`) before any forward runs. `HookEdit` (a function of a
site's activation in its TransformerLens layout) serves `Backend.run_units`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Union

import torch
from torch import Tensor

from phaseinterp.backends.compression import slot_logits
from phaseinterp.backends.units import Positions, UnitSpace
from phaseinterp.units import Unit


def _positions(positions: int | tuple[int, ...] | list[int], size: int, what: str = "position") -> list[int]:
    """Indices in [0, size) from ints that may count from the end; ValueError naming the bad one."""
    out = []
    for p in [positions] if isinstance(positions, int) else list(positions):
        if isinstance(p, bool) or not isinstance(p, int) or not -size <= p < size:
            raise ValueError(f"{what}={p!r} is out of range: allowed integers in [{-size}, {size - 1}]")
        out.append(p % size)
    if not out:
        raise ValueError(f"{what}s=() is empty: allowed one or more")
    return out


def sites(positions: Positions, batch: int, seq_len: int) -> Tensor:
    """Absolute positions [batch, n_sites]: shared ints (negative count from the end) or a per-row
    tensor [batch] / [batch, n_sites] of positions in [0, seq_len)."""
    if isinstance(positions, Tensor):
        pos = positions.long()
        if pos.ndim == 1:
            pos = pos[:, None]
        if pos.ndim != 2 or pos.shape[0] != batch or pos.shape[1] == 0:
            raise ValueError(f"per-row positions of shape {tuple(positions.shape)} are invalid: allowed [{batch}] "
                             f"or [{batch}, n_sites]")
        if (pos < 0).any() or (pos >= seq_len).any():
            bad = pos[(pos < 0) | (pos >= seq_len)][0].item()
            raise ValueError(f"position={bad} is out of range: allowed 0..{seq_len - 1}")
        return pos
    return torch.tensor(_positions(positions, seq_len)).expand(batch, -1)


def _value(value: Tensor | float, shape: tuple[int, ...], what: str) -> None:
    if isinstance(value, Tensor):
        try:
            ok = torch.broadcast_shapes(tuple(value.shape), shape) == torch.Size(shape)
        except RuntimeError:
            ok = False
        if not ok:
            raise ValueError(f"{what} value of shape {tuple(value.shape)} does not broadcast to {shape}")
    elif isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{what} value={value!r} is invalid: allowed a finite number or a tensor broadcasting to {shape}")


@dataclass(frozen=True, eq=False)
class Replace:
    """Replace activations of a unit at some positions (knockout, mean ablation, patching).

    Head and KV-head units replace per-head attention outputs z (value broadcasting to
    `[batch, n_positions, n_unit_heads, d_head]`, heads in increasing order); a layer unit
    replaces the layer's attention output (`[batch, n_positions, d_model]`).

    Args:
        unit: a "head", "kv_head" or "layer" unit.
        value: the replacement (0.0 = zero ablation; a calibration mean for mean ablation).
        positions: positions shared by all rows (ints; negative counts from the end; default the
            last one), or per row: a tensor [batch] or [batch, n_positions].

    Example:
        >>> Replace(Unit("kv_head", 1, 0), value=0.0, positions=(-1,)).unit.name
        'L1.KV0'
    """

    unit: Unit
    value: Union[Tensor, float] = 0.0
    positions: Positions = (-1,)

    def __post_init__(self) -> None:
        if not isinstance(self.unit, Unit) or self.unit.kind not in ("head", "kv_head", "layer"):
            raise ValueError(f"Replace unit={self.unit!r} is invalid: allowed a head, kv_head or layer Unit")

    site = property(lambda self: ("layer" if self.unit.kind == "layer" else "head", self.unit.layer, 0))

    def check(self, backend: UnitSpace, batch: int, seq_len: int) -> None:
        backend.check_unit(self.unit)
        n_pos = sites(self.positions, batch, seq_len).shape[1]
        cfg = backend.cfg
        shape = ((batch, n_pos, cfg.d_model) if self.unit.kind == "layer"
                 else (batch, n_pos, len(backend.heads_of(self.unit)), cfg.d_head))
        _value(self.value, shape, f"Replace({self.unit.name})")

    def apply(self, x: Tensor, backend: UnitSpace) -> Tensor:
        pos = sites(self.positions, x.shape[0], x.shape[1]).to(x.device)
        rows = torch.arange(x.shape[0], device=x.device)[:, None]
        value = torch.as_tensor(self.value, dtype=x.dtype, device=x.device)
        x = x.clone()
        if self.unit.kind == "layer":
            x[rows, pos] = value.expand(*pos.shape, x.shape[2])
            return x
        heads = backend.heads_of(self.unit)
        patch = x[rows, pos]
        patch[:, :, heads] = value.expand(*pos.shape, len(heads), x.shape[3])
        x[rows, pos] = patch
        return x


@dataclass(frozen=True, eq=False)
class SetGate:
    """Override a compressor branch's gate weights (the softmax over window offsets).

    `weights` is "uniform", an int (one-hot on that offset), or a tensor of shape `[W]`,
    `[W, kv_head, channel]`, `[entry, W, kv_head, channel]` or `[batch, entry, W, kv_head, channel]`
    (size-1 axes broadcast), non-negative and summing to 1 over W. Slots before position 0 (the
    previous-block half of DeepSeek CSA entry 0) keep weight 0 and the rest is renormalized, as
    the model itself does; an entry left with no weight becomes a zero vector before its norm.

    Example:
        >>> SetGate(Unit("gate", 1, 0), "uniform").weights
        'uniform'
    """

    unit: Unit
    weights: Union[Tensor, str, int]

    def __post_init__(self) -> None:
        if not isinstance(self.unit, Unit) or self.unit.kind != "gate":
            raise ValueError(f"SetGate unit={self.unit!r} is invalid: allowed a gate Unit")
        w = self.weights
        if isinstance(w, str):
            if w != "uniform":
                raise ValueError(f"SetGate weights={w!r} is invalid: allowed 'uniform', an offset or a tensor")
        elif isinstance(w, Tensor):
            if w.ndim not in (1, 3, 4, 5):
                raise ValueError(f"SetGate weights of shape {tuple(w.shape)} are invalid: allowed [W], "
                                 "[W, kv_head, channel], [entry, W, kv_head, channel] or [batch, entry, W, kv_head, channel]")
            if not torch.isfinite(w).all() or (w < 0).any():
                raise ValueError("SetGate weights must be finite and >= 0")
            sums = w.sum(0 if w.ndim <= 3 else -3)
            if (sums - 1).abs().max() > 1e-4:
                raise ValueError(f"SetGate weights must sum to 1 over the offsets; sums range "
                                 f"{sums.min().item():.4g}..{sums.max().item():.4g}")
        elif isinstance(w, bool) or not isinstance(w, int):
            raise ValueError(f"SetGate weights={w!r} is invalid: allowed 'uniform', an offset or a tensor")

    site = property(lambda self: ("gate", self.unit.layer, self.unit.index))

    def check(self, backend: UnitSpace, batch: int, seq_len: int) -> None:
        backend.check_unit(self.unit)
        W = backend.cfg.gate_windows[self.unit.layer]
        w = self.weights
        if isinstance(w, int) and not isinstance(w, bool) and not 0 <= w < W:
            raise ValueError(f"SetGate offset={w} is out of range: allowed 0..{W - 1} (window W={W})")
        if isinstance(w, Tensor):
            full = self._full(w)
            shape = (batch, backend.n_entries(self.unit.layer, seq_len), W, *backend.gate_shape(self.unit.layer))
            _value(full, shape, f"SetGate({self.unit.name})")

    @staticmethod
    def _full(w: Tensor) -> Tensor:
        return w.view(-1, 1, 1) if w.ndim == 1 else w

    def apply(self, x: Tensor, backend: UnitSpace) -> Tensor:
        """`x`: the canonical gate [batch, entry, W, kv_head, channel] the model computed."""
        batch, n, W = x.shape[:3]
        if isinstance(self.weights, str):
            w = x.new_ones(W, 1, 1)
        elif isinstance(self.weights, int):
            w = torch.zeros(W, 1, 1, dtype=x.dtype, device=x.device)
            w[self.weights] = 1.0
        else:
            w = self._full(self.weights).to(dtype=x.dtype, device=x.device)
        valid = backend.gate_valid(self.unit.layer, n).to(x.device).view(1, n, W, 1, 1)
        w = w.expand_as(x) * valid
        return w / w.sum(2, keepdim=True).clamp_min(torch.finfo(x.dtype).tiny)


@dataclass(frozen=True, eq=False)
class SetEntries:
    """Overwrite compressed entries (the cache entries attention reads) of a compressor branch.

    Args:
        unit: a "gate" unit (the compressor branch).
        entries: entry indices j.
        value: broadcasting to `[batch, n_entries_given, kv_head, d_entry]`, in the layout the
            model stores (our model: after RMSNorm, before RoPE; DeepSeek-V4: after RoPE).

    Example:
        >>> SetEntries(Unit("gate", 1, 0), (0, 2), 0.0).entries
        (0, 2)
    """

    unit: Unit
    entries: Union[int, tuple[int, ...]]
    value: Union[Tensor, float] = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.unit, Unit) or self.unit.kind != "gate":
            raise ValueError(f"SetEntries unit={self.unit!r} is invalid: allowed a gate Unit")

    site = property(lambda self: ("entry", self.unit.layer, self.unit.index))

    def check(self, backend: UnitSpace, batch: int, seq_len: int) -> None:
        backend.check_unit(self.unit)
        n = backend.n_entries(self.unit.layer, seq_len)
        if n == 0:
            raise ValueError(f"SetEntries({self.unit.name}): a sequence of {seq_len} tokens has no complete window")
        idx = _positions(self.entries, n, "entry")
        _value(self.value, (batch, len(idx), *backend.entry_shape(self.unit.layer)), f"SetEntries({self.unit.name})")

    def apply(self, x: Tensor, backend: UnitSpace) -> Tensor:
        idx = _positions(self.entries, x.shape[1], "entry")
        x = x.clone()
        x[:, idx] = torch.as_tensor(self.value, dtype=x.dtype, device=x.device).expand(x.shape[0], len(idx), *x.shape[2:])
        return x


@dataclass(frozen=True, eq=False)
class CycleGate:
    """Cycle a compressor branch's gate parameters by `delta` offsets: offset i uses the gate map
    and offset bias of offset (i - delta) mod W (Z'_i = Z_{(i - delta) mod W}, b'_i likewise),
    payload maps unchanged (docs/paper.md: the mechanism). On our model this is what
    `interventions.cycled_gates` does to the parameters; here it is an edit of the gate logits,
    rebuilt from each token's gate projections (`compression.slot_logits`), so it batches and
    runs on HF DeepSeek-V4 too. Slots before position 0 keep logit -inf (weight 0).

    Example:
        >>> CycleGate(Unit("gate", 1, 0), 1).site
        ('gate_logits', 1, 0)
    """

    unit: Unit
    delta: int

    needs_projection = True  # `Backend._apply` reads the gate projections before the logits

    def __post_init__(self) -> None:
        if not isinstance(self.unit, Unit) or self.unit.kind != "gate":
            raise ValueError(f"CycleGate unit={self.unit!r} is invalid: allowed a gate Unit")
        if isinstance(self.delta, bool) or not isinstance(self.delta, int):
            raise ValueError(f"CycleGate delta={self.delta!r} is invalid: allowed an integer")

    site = property(lambda self: ("gate_logits", self.unit.layer, self.unit.index))

    def check(self, backend: UnitSpace, batch: int, seq_len: int) -> None:
        backend.check_unit(self.unit)
        comp = backend.compression(self.unit.layer, self.unit.index)
        W = comp.cc.window
        if not comp.kind.learned:
            raise ValueError(f"CycleGate({self.unit.name}): gate={comp.cc.gate!r} has no gate parameters to cycle: "
                             "allowed a learned gate kind")
        if self.delta % W == 0:
            raise ValueError(f"CycleGate({self.unit.name}) delta={self.delta} is invalid (W={W}): allowed delta != 0 mod W")

    def apply(self, x: Tensor, backend: UnitSpace, projection: Tensor) -> Tensor:
        """`x`: the canonical gate logits (only their shape is used); `projection`: the layer's
        per-token gate projections under every map row."""
        layer, branch = self.unit.layer, self.unit.index
        cc = backend.compression(layer, branch).cc
        return slot_logits(projection, cc, backend._gate_bias(layer, branch), x.shape[1], self.delta).to(x.dtype)


@dataclass(frozen=True, eq=False)
class HookEdit:
    """An edit given as a function of a site's activation in its TransformerLens layout."""

    site_name: str
    layer: int
    branch: int
    fn: Callable[[Tensor], Tensor]
    squeeze_channel: bool = False

    @property
    def site(self) -> tuple[str, int, int]:
        return (self.site_name, self.layer, self.branch)

    @property
    def unit(self) -> Unit:
        return Unit("layer", self.layer) if self.site_name in ("head", "layer") else Unit("gate", self.layer, self.branch)

    def check(self, backend: UnitSpace, batch: int, seq_len: int) -> None:
        backend.check_unit(self.unit)

    def apply(self, x: Tensor, backend: UnitSpace) -> Tensor:
        if self.squeeze_channel:
            return self.fn(x[..., 0].clone())[..., None]
        return self.fn(x.clone())


Edit = Union[Replace, SetGate, SetEntries, CycleGate, HookEdit]
