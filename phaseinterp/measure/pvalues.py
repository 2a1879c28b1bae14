"""Per-cell p-values of a map from its bootstrap replicates, Benjamini-Hochberg control of the
false discovery rate across a map's cells (see docs/statistics.md, "Many cells, one map"), and Holm's
family-wise correction for any family of tests (docs/statistics.md, "Claims: seeds and multiplicity").

A map of 128 cells marked by "the 95% interval excludes 0" expects ~6 false cells under the null;
the p-values here come from the replicates that give the intervals (no second bootstrap), so the
two calls agree cell by cell, and BH then controls the share of false cells among those called."""

from __future__ import annotations

import math

import numpy as np
from beartype import beartype
from jaxtyping import Bool, Float, jaxtyped
from scipy.stats import false_discovery_control


def check_q(q: float) -> None:
    """ValueError unless 0 < q < 1 (the false discovery rate to control)."""
    if isinstance(q, bool) or not isinstance(q, (int, float)) or not 0 < q < 1:
        raise ValueError(f"q={q!r} out of range (0, 1): the false discovery rate to control, e.g. 0.05")


@jaxtyped(typechecker=beartype)
def bootstrap_p_value(replicates: Float[np.ndarray, "n_boot *shape"], null: float = 0.0  # noqa: F821  (shape string)
                      ) -> Float[np.ndarray, "*shape"]:
    """Two-sided bootstrap p-value of "effect = null" per cell, from the replicates along axis 0:

        p = min(1, 2 (min(#{b: T_b <= null}, #{b: T_b >= null}) + 1) / (n + 1))

    with n the cell's finite replicates (nan ones, e.g. a relative change whose base accuracy is 0
    in that draw, are left out as `percentile_interval` leaves them out); nan where n = 0. The +1
    counts the observed sample as one of the draws, so p is never 0: its floor is 2 / (n + 1).
    Replicates equal to `null` count on both sides (a cell whose every replicate is 0 has p = 1).

    Duality with the percentile interval of the same replicates (`percentile_interval`; with
    a = (1 - confidence) / 2, j = floor(a (n - 1)) and j' = floor((1 - a) (n - 1)), the sorted
    replicates its bounds interpolate between): a cell whose interval excludes `null` has
    p <= 2 (max(j + 1, n - 1 - j') + 1) / (n + 1), one whose interval holds it has
    p >= 2 (min(j + 1, n - 1 - j') + 1) / (n + 1). At 95% with n = 2000 both are 102 / 2001 =
    0.051: the two calls agree up to the +1 (tests/test_map_fdr.py checks the bounds).

    Example:
        >>> reps = np.array([[1.0, -1.0], [2.0, 1.0], [3.0, 0.5], [4.0, 2.0]])  # 4 replicates, 2 cells
        >>> bootstrap_p_value(reps).round(3).tolist()  # 2 (0 + 1) / 5, 2 (1 + 1) / 5
        [0.4, 0.8]
    """
    finite = np.isfinite(replicates)
    n = finite.sum(axis=0)
    below = (finite & (replicates <= null)).sum(axis=0)
    above = (finite & (replicates >= null)).sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = np.minimum(1.0, 2.0 * (np.minimum(below, above) + 1) / (n + 1))
    return np.asarray(np.where(n > 0, p, np.nan), dtype=np.float64)


@jaxtyped(typechecker=beartype)
def bh_adjust(p: Float[np.ndarray, "*shape"], family: Bool[np.ndarray, "*shape"] | None = None  # noqa: F821
              ) -> Float[np.ndarray, "*shape"]:
    """Benjamini-Hochberg adjusted p-values over one family of cells (`scipy.stats.
    false_discovery_control(method="bh")`): the cells with finite p (and `family` True, when
    given) form the family; the others are nan. A cell is significant at FDR q when its adjusted
    p <= q, which is BH's step-up rule p_(k) <= k q / m.

    Example:
        >>> bh_adjust(np.array([0.01, 0.04, 0.03, 0.2, np.nan])).round(4).tolist()
        [0.04, 0.0533, 0.0533, 0.2, nan]
    """
    inside = np.isfinite(p) if family is None else np.isfinite(p) & family
    out = np.full(p.shape, np.nan)
    if inside.any():
        out[inside] = false_discovery_control(p[inside], method="bh")
    return out


@jaxtyped(typechecker=beartype)
def holm_adjust(p: Float[np.ndarray, "*shape"], family: Bool[np.ndarray, "*shape"] | None = None  # noqa: F821
                ) -> Float[np.ndarray, "*shape"]:
    """Holm (step-down Bonferroni) adjusted p-values over one family of tests; a test is rejected at
    family-wise error rate alpha when its adjusted p <= alpha. With the family's m p-values sorted,
    p_(1) <= ... <= p_(m):

        adj_(i) = max_{j <= i} min(1, (m - j + 1) p_(j))

    so the smallest p must reach alpha / m, the next alpha / (m - 1), and so on, stopping at the first
    that does not. Valid under any dependence between the tests. The cells with finite p (and
    `family` True, when given) form the family; the others are nan. A p-value with a floor (a
    permutation test's 1 / (n_perm + 1)) can pass only when the floor is <= alpha / m.

    Example:
        >>> holm_adjust(np.array([0.01, 0.04, 0.03, 0.2, np.nan])).round(4).tolist()  # 4 x 0.01, 3 x 0.03, ...
        [0.04, 0.09, 0.09, 0.2, nan]
    """
    inside = np.isfinite(p) if family is None else np.isfinite(p) & family
    out = np.full(p.shape, np.nan)
    values = p[inside]
    m = values.size
    if m:
        order = np.argsort(values, kind="stable")
        stepped = np.minimum(1.0, (m - np.arange(m)) * values[order])
        adjusted = np.empty(m)
        adjusted[order] = np.maximum.accumulate(stepped)
        out[inside] = adjusted
    return out


#: The corrections `adjust` knows: Benjamini-Hochberg (false discovery rate) and Holm (family-wise error).
METHODS = ("bh", "holm")


def adjust(p, method: str = "bh") -> np.ndarray:
    """Adjusted p-values of one family (a sequence; None and nan stay nan) by `method`: "bh"
    (`bh_adjust`, false discovery rate) or "holm" (`holm_adjust`, family-wise error rate).

    Example:
        >>> adjust([0.01, 0.04, None], "holm").round(4).tolist()
        [0.02, 0.04, nan]
    """
    if method not in METHODS:
        raise ValueError(f"method={method!r}: allowed {', '.join(map(repr, METHODS))} (Benjamini-Hochberg or Holm)")
    values = np.array([np.nan if x is None else float(x) for x in p], dtype=np.float64)
    return bh_adjust(values) if method == "bh" else holm_adjust(values)


def min_n_boot(n_cells: int, q: float = 0.05) -> int:
    """The fewest bootstrap replicates whose p-value floor, 2 / (n_boot + 1), lets a lone effect
    among `n_cells` pass BH at `q` (its threshold is q / n_cells): ceil(2 n_cells / q) - 1.

    Example:
        >>> min_n_boot(128)  # a 128-cell map at q = 0.05
        5119
    """
    check_q(q)
    return max(1, math.ceil(2 * n_cells / q) - 1)


__all__ = ["METHODS", "adjust", "bh_adjust", "bootstrap_p_value", "check_q", "holm_adjust", "min_n_boot"]
