"""Per-residue aggregation and the paired cluster bootstrap for intervention effects.

One bootstrap for every map (knockout, patching, NSA branch knockouts, induction sweeps):
`paired_cluster_bootstrap` resamples the logical examples once per replicate and scores the base
run and the edited runs on the same draw; `accuracy_change` is a map's cells from it (the point
change per unit and residue, its interval and its two-sided bootstrap p-value, both read from the
same replicates)."""

from __future__ import annotations

import warnings
from typing import NamedTuple, Union

import numpy as np
from jaxtyping import Bool, Float, Int

from phaseinterp.interventions.checks import check_at_least_one
from phaseinterp.measure.intervals import MIN_CLUSTERS, percentile_interval
from phaseinterp.measure.pvalues import bootstrap_p_value
from phaseinterp.measure.specialization import POOLED


def by_residue(x: Float[np.ndarray, "*units row"], residue: Int[np.ndarray, " row"], modulus: int
               ) -> Float[np.ndarray, "*units modulus"]:
    """Mean of `x` over the rows of each residue (nan for residues without rows)."""
    counts = np.bincount(residue, minlength=modulus).astype(np.float64)
    onehot = np.zeros((len(residue), modulus))
    onehot[np.arange(len(residue)), residue] = 1.0
    with np.errstate(invalid="ignore", divide="ignore"):
        return (x @ onehot) / counts


Number = Union[float, np.floating]


def relative_change(clean: Union[Float[np.ndarray, "..."], Number], edited: Union[Float[np.ndarray, "..."], Number]
                    ) -> Float[np.ndarray, "..."]:
    """`100 * (edited - clean) / clean`, nan where clean == 0.

    The shapes only need to broadcast against each other with numpy's rules (e.g. clean
    [residue] or [1, residue] against edited [unit, residue]; scalars too), which a named
    jaxtyping shape cannot express, so each argument is annotated "..." and the result has the
    broadcast shape."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(clean > 0, 100.0 * (edited - clean) / np.where(clean > 0, clean, 1.0), np.nan)


def absolute_change(clean: Union[Float[np.ndarray, "..."], Number], edited: Union[Float[np.ndarray, "..."], Number]
                    ) -> Float[np.ndarray, "..."]:
    """`100 * (edited - clean)`: the change in percentage points (broadcasting as `relative_change`)."""
    return 100.0 * (np.asarray(edited, dtype=np.float64) - clean)


CHANGES = {"relative": relative_change, "absolute": absolute_change}


def paired_cluster_replicates(clean: Bool[np.ndarray, " row"], edited: Bool[np.ndarray, "unit row"],
                              residue: Int[np.ndarray, " row"], cluster: Int[np.ndarray, " row"], modulus: int, *,
                              n_boot: int = 2000, seed: int = 0, change: str = "relative"
                              ) -> Float[np.ndarray, "n_boot unit modulus"]:
    """Bootstrap replicates of the accuracy change per unit and residue.

    Each replicate draws the logical examples (clusters) with replacement, once, and computes
    both the base ("clean") and the edited accuracy on that draw (paired), then the `change`:
    "relative", `100 * (acc_edited - acc_clean) / acc_clean` (replicates with clean accuracy 0
    are nan), or "absolute", `100 * (acc_edited - acc_clean)` in points. Intervals
    (`percentile_interval`) and p-values (`measure.pvalues.bootstrap_p_value`) both read these.

    A residue whose rows come from fewer than `MIN_CLUSTERS` logical examples has nan replicates:
    resampling one example redraws the same rows every time, a zero-width interval and p = 2/(n+1)
    whatever the effect, so its interval and p-value cannot be estimated (nan, out of any FDR family).
    """
    if change not in CHANGES:
        raise ValueError(f"change={change!r} is invalid: allowed one of {sorted(CHANGES)}")
    check_at_least_one("n_boot", n_boot)
    _, cid = np.unique(cluster, return_inverse=True)
    C = int(cid.max()) + 1
    cells = cid * modulus + residue
    N = np.bincount(cells, minlength=C * modulus).reshape(C, modulus).astype(np.float64)
    Kc = np.bincount(cells, weights=clean, minlength=C * modulus).reshape(C, modulus)
    Ke = np.stack([np.bincount(cells, weights=e, minlength=C * modulus).reshape(C, modulus) for e in edited])
    m = np.random.default_rng(seed).multinomial(C, np.full(C, 1.0 / C), size=n_boot).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        n = m @ N
        acc_c = (m @ Kc) / n
        acc_e = np.einsum("bc,ucr->ubr", m, Ke) / n
    rel = CHANGES[change](acc_c[None], acc_e)  # [unit, boot, modulus]
    rel[..., (N > 0).sum(0) < MIN_CLUSTERS] = np.nan
    return np.moveaxis(rel, 1, 0)


def paired_cluster_bootstrap(clean: Bool[np.ndarray, " row"], edited: Bool[np.ndarray, "unit row"],
                             residue: Int[np.ndarray, " row"], cluster: Int[np.ndarray, " row"], modulus: int, *,
                             n_boot: int = 2000, confidence: float = 0.95, seed: int = 0, change: str = "relative"
                             ) -> tuple[Float[np.ndarray, "unit modulus"], Float[np.ndarray, "unit modulus"]]:
    """Percentile interval of the accuracy change per unit and residue: the `confidence`
    quantiles of `paired_cluster_replicates` (see there for the resampling and `change`)."""
    reps = paired_cluster_replicates(clean, edited, residue, cluster, modulus, n_boot=n_boot, seed=seed, change=change)
    return percentile_interval(reps, confidence)


#: The bootstrap's former name (it has computed absolute changes too since `change` was added).
paired_bootstrap_relative = paired_cluster_bootstrap


class AccuracyChange(NamedTuple):
    """A map's cells per unit and residue (`accuracy_change`), unpacked in this order."""

    change: Float[np.ndarray, "unit modulus"]  # edited against base: pp ("absolute") or % ("relative")
    lo: Float[np.ndarray, "unit modulus"]  # percentile interval of the paired cluster bootstrap
    hi: Float[np.ndarray, "unit modulus"]
    base: Float[np.ndarray, " modulus"]  # base accuracy per residue
    edited: Float[np.ndarray, "unit modulus"]  # edited accuracy per unit and residue
    p: Float[np.ndarray, "unit modulus"]  # two-sided bootstrap p-value of "no change", same replicates


def accuracy_change(base: Bool[np.ndarray, " row"], edited: Bool[np.ndarray, "unit row"],
                    residue: Int[np.ndarray, " row"], cluster: Int[np.ndarray, " row"], modulus: int, *,
                    change: str = "absolute", n_boot: int = 2000, confidence: float = 0.95, seed: int = 0
                    ) -> AccuracyChange:
    """A map's cells: (change, lo, hi, base accuracy, edited accuracy, p) per unit and residue,
    the change of the edited runs' accuracy against the base run's (`change`: "absolute" pp or
    "relative" %) with its `paired_cluster_bootstrap` interval and the two-sided bootstrap
    p-value of "no change" (`measure.pvalues.bootstrap_p_value`) from the same replicates.

    Example:
        >>> base = np.array([True, False, True, False]); edited = np.array([[True, True, True, True]])
        >>> cells = accuracy_change(base, edited, np.array([0, 0, 1, 1]), np.arange(4), 2, n_boot=200)
        >>> cells.change.tolist()
        [[50.0, 50.0]]
    """
    if change not in CHANGES:
        raise ValueError(f"change={change!r} is invalid: allowed one of {sorted(CHANGES)}")
    acc_base = by_residue(base.astype(np.float64), residue, modulus)
    acc_edited = by_residue(edited.astype(np.float64), residue, modulus)
    point = CHANGES[change](acc_base[None], acc_edited)
    with warnings.catch_warnings():  # residues without rows, or a base accuracy of 0 in a replicate: nan
        warnings.simplefilter("ignore", RuntimeWarning)
        reps = paired_cluster_replicates(base, edited, residue, cluster, modulus, n_boot=n_boot, seed=seed,
                                         change=change)
        lo, hi = percentile_interval(reps, confidence)
    return AccuracyChange(point, lo, hi, acc_base, acc_edited, bootstrap_p_value(reps))


def pooled_change(base: Bool[np.ndarray, " row"], edited: Bool[np.ndarray, "unit row"], cluster: Int[np.ndarray, " row"],
                  *, change: str = "absolute", n_boot: int = 2000, confidence: float = 0.95, seed: int = 0,
                  shape: tuple[int, ...] | None = None) -> dict[str, Float[np.ndarray, "..."]]:
    """Each unit's change over all rows, residues pooled (`POOLED` keys): one test per unit where the
    map has one per unit and residue. A unit that lowers accuracy a little at every residue can fail
    BH over all the map's cells and pass it over units, with `modulus` times fewer tests. `shape`: the map's
    unit axes (its shape without the residue axis), to which each array is reshaped.

    Example:
        >>> base = np.ones(8, bool); edited = np.array([[True, False] * 4])
        >>> pooled_change(base, edited, np.arange(8) // 2, n_boot=200)["pooled"].tolist()
        [-50.0]
    """
    cells = accuracy_change(base, edited, np.zeros(len(base), dtype=np.int64), cluster, 1, change=change,
                            n_boot=n_boot, confidence=confidence, seed=seed)
    return dict(zip(POOLED, (a[:, 0].reshape(shape or -1) for a in (cells.change, cells.lo, cells.hi, cells.p))))
