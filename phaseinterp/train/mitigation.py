"""Training-time mitigations of phase sensitivity: random chunk offsets and two gate regularizers.

Architectural mitigations are model options (`CompressionConfig.chunkings`, overlapping windows
`window > stride`); these three act during training only (`TrainConfig.mitigation`):

- random_offsets: every training sequence sees the chunk grid shifted back by its own offset
  o ~ U{0..M-1} (M = the model's residue modulus; layer l uses o mod S_l), so no phase of the
  data is tied to a window boundary. Rows with the same offset share one forward pass, so a step
  costs up to M forwards of smaller batches. Evaluation uses the unshifted grid.
- coverage_weight * overlap: the "coverage" term the theory says is missing. Each key gate unit
  (layer, KV head of a key or tied branch) has a phase profile p_u(r), its mean gate mass on
  positions = r mod S (0 <= r < S, sums to 1); the penalty is the mean over pairs of units with
  the same stride of sum_r p_u(r) p_v(r). Two units on the same phase pay 1, disjoint ones 0.
  Identical units sit on a saddle of it: any difference between them grows.
- entropy_weight * (log W - H(mean gate)): penalizes *static* concentration (the entropy of the
  gate averaged over windows, per unit and chunking and channel); a gate may still pick
  different offsets in different windows.
"""

from __future__ import annotations

import dataclasses
import math
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np
import torch
from torch import Tensor

from phaseinterp.config import check_known_fields
from phaseinterp.model.compressor import Compressor, window_starts


def _weight(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{name}={value!r} is invalid: allowed a finite number >= 0")


@dataclass(frozen=True)
class Mitigation:
    """Training-time mitigations (all off by default); see the module docstring."""

    random_offsets: bool = False
    coverage_weight: float = 0.0
    entropy_weight: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.random_offsets, bool):
            raise ValueError(f"random_offsets={self.random_offsets!r} is invalid: allowed True or False")
        _weight("coverage_weight", self.coverage_weight)
        _weight("entropy_weight", self.entropy_weight)

    @property
    def active(self) -> bool:
        return self.random_offsets or self.coverage_weight > 0 or self.entropy_weight > 0

    @property
    def reads_gates(self) -> bool:
        return self.coverage_weight > 0 or self.entropy_weight > 0

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Mitigation":
        check_known_fields(cls, d)
        return cls(**d)


def key_gate_units(model) -> list[tuple[int, Compressor]]:
    """(layer, compressor) of every key or tied compression branch."""
    out = []
    for layer, block in enumerate(model.blocks):
        attn = block.attn
        if attn.cc is not None:
            out.append((layer, attn.compress_kv if attn.cc.kv == "tied" else attn.compress_k))
    return out


def check_mitigation(model, mitigation: Mitigation) -> None:
    """Raise when a mitigation would change nothing on this model."""
    units = key_gate_units(model)
    if mitigation.active and not units:
        raise ValueError(f"mitigation={mitigation} is invalid for a model without compressed layers: it changes nothing")
    if mitigation.coverage_weight > 0:
        pairs = 0
        for stride in {c.cc.stride for _, c in units}:
            n = sum(c.n_kv_heads * c.cc.chunkings for _, c in units if c.cc.stride == stride and c.kind.learned)
            pairs += n * (n - 1) // 2
        if not pairs:
            raise ValueError(f"coverage_weight={mitigation.coverage_weight} is invalid here: it needs at least two "
                             "learned key-gate units with the same stride (KV heads x layers x chunkings); "
                             "this model has fewer, so the term would change nothing")
    if mitigation.entropy_weight > 0 and not any(c.kind.learned for _, c in units):
        raise ValueError(f"entropy_weight={mitigation.entropy_weight} is invalid here: uniform gates have no "
                         "parameters, the term would change nothing")


@contextmanager
def shifted_grid(model, offset: int) -> Iterator[None]:
    """Run `model` with every compressed layer's chunk grid shifted back by `offset` (mod its
    stride, on top of its own `grid_offset`); restored on exit, also on error."""
    if isinstance(offset, bool) or not isinstance(offset, (int, np.integer)) or offset < 0:
        raise ValueError(f"offset={offset!r} is invalid: allowed an integer >= 0")
    saved = []
    for block in model.blocks:
        attn = block.attn
        if attn.cc is None:
            continue
        cc = attn.cc
        new = dataclasses.replace(cc, grid_offset=(cc.grid_offset + int(offset)) % cc.stride)
        comps = [m for m in attn.modules() if isinstance(m, Compressor)]
        saved.append((attn, cc, comps))
        attn.cc = new
        for comp in comps:
            comp.cc = new
    try:
        yield
    finally:
        for attn, cc, comps in saved:
            attn.cc = cc
            for comp in comps:
                comp.cc = cc


def draw_offsets(modulus: int, seed: int, step: int, batch_size: int) -> np.ndarray:
    """Grid offset of every row of step `step`'s global batch (a pure function of seed and step)."""
    return np.random.default_rng([seed, step, 0x6F66]).integers(0, modulus, size=batch_size)


def _chunkings(cc, n: int, device) -> list[Tensor]:
    """Per chunking, a mask of its entries among the first n whose window starts at position >= 0."""
    starts = window_starts(cc, n, device)
    index = torch.arange(n, device=device)
    masks = [(index % cc.chunkings == c) & (starts >= 0) for c in range(cc.chunkings)]
    return [m for m in masks if m.any()]


def _phase_profiles(gate: Tensor, comp: Compressor) -> list[Tensor]:
    """Phase profiles [S] of one key branch, one per (chunking, KV head); entries whose window
    starts before position 0 are skipped."""
    cc = comp.cc
    n = gate.shape[1]
    starts = window_starts(cc, n, gate.device)
    phase = (starts[:, None] + torch.arange(cc.window, device=gate.device)) % cc.stride  # [n, W]
    a = gate.float().reshape(*gate.shape[:4], -1).mean(-1)  # [b, n, W, kv_head], channels averaged
    out = []
    for keep in _chunkings(cc, n, gate.device):
        one_hot = torch.nn.functional.one_hot(phase[keep], cc.stride).to(a.dtype)  # [n', W, S]
        prof = torch.einsum("bnwh,nws->hs", a[:, keep], one_hot) / (a.shape[0] * int(keep.sum()))
        out.extend(prof.unbind(0))
    return out


def coverage_penalty(gates: list[tuple[Compressor, Tensor]]) -> Tensor:
    """Mean phase overlap sum_r p_u(r) p_v(r) over pairs of key-gate units with the same stride."""
    by_stride: dict[int, list[Tensor]] = {}
    for comp, gate in gates:
        if comp.kind.learned:
            by_stride.setdefault(comp.cc.stride, []).extend(_phase_profiles(gate, comp))
    terms = []
    for profiles in by_stride.values():
        p = torch.stack(profiles)  # [units, S]
        overlap = p @ p.T
        iu = torch.triu_indices(len(p), len(p), offset=1)
        terms.append(overlap[iu[0], iu[1]])
    return torch.cat(terms).mean()


def static_entropy_penalty(gates: list[tuple[Compressor, Tensor]]) -> Tensor:
    """Mean over units, chunkings and channels of log W - H(gate averaged over windows)."""
    terms = []
    for comp, gate in gates:
        cc = comp.cc
        if not comp.kind.learned:
            continue
        for keep in _chunkings(cc, gate.shape[1], gate.device):
            mean = gate[:, keep].float().mean(dim=(0, 1)).movedim(0, -1)  # [kv_head(, d), W]
            h = -(mean * mean.clamp_min(1e-12).log()).sum(-1)
            terms.append((math.log(cc.window) - h).flatten())
    return torch.cat(terms).mean()


@contextmanager
def recorded_key_gates(model, enabled: bool = True) -> Iterator[list[tuple[Compressor, Tensor]]]:
    """Collect (compressor, hook_gate output) of every key branch during the forwards inside."""
    store: list[tuple[Compressor, Tensor]] = []
    handles = []
    if enabled:
        for _, comp in key_gate_units(model):
            handles.append(comp.hook_gate.register_forward_hook(
                lambda mod, args, out, comp=comp: store.append((comp, out))))
    try:
        yield store
    finally:
        for h in handles:
            h.remove()


def penalty(mitigation: Mitigation, gates: list[tuple[Compressor, Tensor]]) -> Tensor | float:
    """The regularizers' weighted sum on the gates of one forward."""
    total: Tensor | float = 0.0
    if mitigation.coverage_weight > 0:
        total = total + mitigation.coverage_weight * coverage_penalty(gates)
    if mitigation.entropy_weight > 0:
        total = total + mitigation.entropy_weight * static_entropy_penalty(gates)
    return total


def mitigated_forward(forward, model, tokens: Tensor, mitigation: Mitigation, offsets: np.ndarray | None
                      ) -> tuple[Tensor, Tensor | float]:
    """(logits, penalty) of one training batch under `mitigation`.

    `forward` runs the (possibly DDP-wrapped) model; `offsets` [batch] are the rows' grid
    offsets (None = unshifted). With several offsets the penalty is the row-weighted mean over
    the groups of rows that share one.
    """
    if offsets is None:
        with recorded_key_gates(model, mitigation.reads_gates) as gates:
            logits = forward(tokens)
        return logits, penalty(mitigation, gates) if mitigation.reads_gates else 0.0
    offsets_t = torch.as_tensor(offsets, device=tokens.device)
    pieces, order, total = [], [], 0.0
    for o in np.unique(offsets):
        rows = (offsets_t == int(o)).nonzero()[:, 0]
        with shifted_grid(model, int(o)), recorded_key_gates(model, mitigation.reads_gates) as gates:
            pieces.append(forward(tokens[rows]))
            if mitigation.reads_gates:
                total = total + penalty(mitigation, gates) * (len(rows) / len(tokens))
        order.append(rows)
    logits = torch.cat(pieces)[torch.argsort(torch.cat(order))]
    return logits, total


__all__ = ["Mitigation", "check_mitigation", "coverage_penalty", "draw_offsets", "key_gate_units",
           "mitigated_forward", "penalty", "recorded_key_gates", "shifted_grid", "static_entropy_penalty"]
