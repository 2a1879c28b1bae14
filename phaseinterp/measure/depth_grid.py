"""Accuracy by depth and phase: the needle test's usual depth axis (share of the context before the
needle, as kvpress, RULER and the original test report it) crossed with the residue mod R."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import torch
from jaxtyping import Bool
from torch import Tensor

from phaseinterp.measure.intervals import wilson_interval
from phaseinterp.tasks import PhaseBatch


@dataclass(frozen=True)
class DepthPhaseGrid:
    """Accuracy per (depth bin, residue) with 95% Wilson intervals.

    Attributes:
        accuracy, lo, hi: [n_bins, modulus] (nan where a cell has no rows).
        n, k: rows and correct rows per cell.
        edges: the n_bins + 1 depth bin edges in [0, 1].
        modulus: residue modulus R.
        meta: label, the task's metadata.
    """

    accuracy: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    n: np.ndarray
    k: np.ndarray
    edges: np.ndarray
    modulus: int
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def centers(self) -> np.ndarray:
        """Middle of each depth bin."""
        return (self.edges[:-1] + self.edges[1:]) / 2

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready lists."""
        as_list = lambda a: [[None if np.isnan(x) else float(x) for x in row] for row in a]  # noqa: E731
        return {"accuracy": as_list(self.accuracy), "lo": as_list(self.lo), "hi": as_list(self.hi),
                "n": self.n.tolist(), "k": self.k.tolist(), "edges": self.edges.tolist(), "modulus": self.modulus,
                "meta": self.meta}


def depth_phase_grid(correct: Bool[Tensor, " batch"] | np.ndarray, batch: PhaseBatch, *,
                     depth: Sequence[float] | np.ndarray | None = None, n_bins: int = 8,
                     label: str = "") -> DepthPhaseGrid:
    """Per-row correctness (`evaluate_correct(model, batch)`) binned by depth and residue.

    Args:
        correct: one bool per row of `batch`.
        batch: the prompts (their residues and modulus).
        depth: each row's depth in [0, 1]; default `batch.meta["depth"]` (the prose task's, one per row).
        n_bins: equal-width depth bins over [0, 1].

    Example:
        >>> grid = depth_phase_grid(evaluate_correct(model, batch), batch)  # doctest: +SKIP
    """
    correct = np.asarray(correct.cpu() if isinstance(correct, Tensor) else correct, dtype=bool)
    depth = np.asarray(batch.meta.get("depth") if depth is None else depth, dtype=float)
    if depth.shape != (len(batch),) or correct.shape != (len(batch),):
        raise ValueError(f"depth of shape {depth.shape} and correct of shape {correct.shape} are invalid: allowed one "
                         f"entry per row of the batch, ({len(batch)},) (a sliced batch: pass depth=)")
    if isinstance(n_bins, bool) or not isinstance(n_bins, int) or n_bins < 1:
        raise ValueError(f"n_bins={n_bins!r} is invalid: allowed an integer >= 1")
    if ((depth < 0) | (depth > 1)).any():
        raise ValueError(f"depth holds values outside [0, 1] (min {depth.min():g}, max {depth.max():g})")
    R = batch.modulus
    edges = np.linspace(0, 1, n_bins + 1)
    b = np.minimum((depth * n_bins).astype(int), n_bins - 1)
    cell = b * R + torch.as_tensor(batch.residue).cpu().numpy()
    n = np.bincount(cell, minlength=n_bins * R).reshape(n_bins, R)
    k = np.bincount(cell, weights=correct, minlength=n_bins * R).reshape(n_bins, R).astype(np.int64)
    with np.errstate(invalid="ignore", divide="ignore"):
        acc = np.where(n > 0, k / np.maximum(n, 1), np.nan)
    lo, hi = wilson_interval(k, n)
    lo, hi = np.where(n > 0, lo, np.nan), np.where(n > 0, hi, np.nan)
    return DepthPhaseGrid(acc, lo, hi, n, k, edges, R, {"label": label, "task": batch.meta.get("config")})


__all__ = ["DepthPhaseGrid", "depth_phase_grid"]
