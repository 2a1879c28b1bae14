"""The phase gap measured on held-out examples, with its interval.

The observed gap, best minus worst residue accuracy (`PhaseCurve.gap_pp`, the paper's statistic, docs/paper.md),
picks its two residues and measures them on the same rows: noise raises the best and lowers the
worst, so a flat curve of 32 examples per residue shows ~20 pp, and the bootstrap replicates of
max - min sit above the observed value (their percentile interval can exclude it). The held-out
gap splits the logical examples (clusters) in two halves at random (seeded): the best and worst
residues of one half are measured on the other, and the two directions are averaged. It estimates
the true difference between the residues the data single out, never more than the true gap; a
flat curve gives ~0, and a negative value says the ordering did not replicate. Its interval
resamples clusters within each half with the selections held fixed (they come from the other,
independent half).
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from beartype import beartype
from jaxtyping import Bool, Int, jaxtyped

from phaseinterp.measure.intervals import cluster_bootstrap, percentile_interval


@jaxtyped(typechecker=beartype)
def heldout_gap(correct: Bool[np.ndarray, " row"], residue: Int[np.ndarray, " row"], cluster: Int[np.ndarray, " row"],
                modulus: int, *, n_boot: int = 2000, confidence: float = 0.95, seed: int = 0
                ) -> tuple[float, tuple[float, float]]:
    """(held-out gap in pp, its bootstrap percentile interval); nan when a half lacks a residue
    the other half selected (too few examples to split).

    Example:
        >>> rng = np.random.default_rng(0)
        >>> res = np.repeat(np.arange(4), 200); ids = np.tile(np.arange(200), 4)
        >>> flat = rng.random(800) < 0.5                       # observed gap ~10 pp of pure noise
        >>> abs(heldout_gap(flat, res, ids, 4, n_boot=200)[0]) < 6
        True
        >>> step = rng.random(800) < np.array([0.2, 0.8, 0.2, 0.8])[res]   # true gap 60 pp
        >>> 50 < heldout_gap(step, res, ids, 4, n_boot=200)[0] < 70
        True
    """
    _, cid = np.unique(cluster, return_inverse=True)
    rng = np.random.default_rng([seed, 0x6A9])
    in_b = _split(rng, int(cid.max()) + 1)[cid]
    sides = []
    for pick, measure in ((~in_b, in_b), (in_b, ~in_b)):
        with np.errstate(invalid="ignore", divide="ignore"):
            acc = np.bincount(residue[pick], correct[pick], modulus) / np.bincount(residue[pick], minlength=modulus)
        if np.isnan(acc).all() or not measure.any():
            return float("nan"), (float("nan"), float("nan"))
        best, worst = int(np.nanargmax(acc)), int(np.nanargmin(acc))
        n = np.bincount(residue[measure], minlength=modulus)
        if n[best] == 0 or n[worst] == 0:
            return float("nan"), (float("nan"), float("nan"))
        reps = cluster_bootstrap(correct[measure], residue[measure], cid[measure], modulus, n_boot=n_boot,
                                 seed=int(rng.integers(1 << 31)))
        k = np.bincount(residue[measure], correct[measure], modulus)
        sides.append((k[best] / n[best] - k[worst] / n[worst], reps[:, best] - reps[:, worst]))
    point = 100 * (sides[0][0] + sides[1][0]) / 2
    lo, hi = percentile_interval(100 * (sides[0][1] + sides[1][1]) / 2, confidence)
    return float(point), (float(lo), float(hi))


def split_halves(n_clusters: int, seed: int = 0) -> np.ndarray:
    """The held-out gap's random halves: per cluster (in sorted id order), True for half B. Sizes differ
    by at most one; the same split `heldout_gap` draws with this seed."""
    if n_clusters < 2:
        raise ValueError(f"n_clusters={n_clusters} out of range [2, inf): two halves need two clusters")
    return _split(np.random.default_rng([seed, 0x6A9]), n_clusters)


def _split(rng: np.random.Generator, n_clusters: int) -> np.ndarray:
    return rng.permutation(n_clusters) % 2 == 1


#: table header of `gap_text` cells, and the sentence that explains them
GAP_HEADER = "gap pp (held-out [95% CI])"
GAP_NOTE = ("Gap: best minus worst residue (the paper's statistic, inflated by sampling noise), then in parentheses "
            "the held-out gap, whose best and worst residues are picked on one half of the examples and measured on "
            "the other (about 0 on a flat curve; docs/statistics.md), with its cluster-bootstrap interval.")


def gap_text(gap_pp: float, heldout_pp: float, interval: Sequence[float | None] | None) -> str:
    """A table cell: the observed gap, then the held-out gap and its interval.

    Example:
        >>> gap_text(21.9, 0.8, (-9.4, 10.9))
        '21.9 (0.8 [-9.4, 10.9])'
    """
    return f"{gap_pp:.1f} ({heldout_text(heldout_pp, interval)})"


def heldout_text(heldout_pp: float, interval: Sequence[float | None] | None) -> str:
    """The held-out gap and its interval, e.g. '0.8 [-9.4, 10.9]'."""
    return f"{heldout_pp:.1f} {interval_text(interval)}"


def interval_text(interval: Sequence[float | None] | None, scale: float = 1.0) -> str:
    """'[lo, hi]' (times `scale`, one decimal), or '[no interval]' where it could not be estimated
    (None or nan bounds: e.g. a residue whose rows come from one example, `MIN_CLUSTERS`).

    Example:
        >>> interval_text((-9.44, 10.9)), interval_text([None, None]), interval_text((float("nan"),) * 2)
        ('[-9.4, 10.9]', '[no interval]', '[no interval]')
    """
    if interval is None or any(v is None or not math.isfinite(v) for v in interval):
        return "[no interval]"
    return f"[{scale * interval[0]:.1f}, {scale * interval[1]:.1f}]"


__all__ = ["GAP_HEADER", "GAP_NOTE", "gap_text", "heldout_gap", "heldout_text", "interval_text", "split_halves"]
