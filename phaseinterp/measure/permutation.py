"""Permutation tests on residue labels, within logical examples."""

from __future__ import annotations

import numpy as np
from beartype import beartype
from jaxtyping import Bool, Int, jaxtyped


def _statistic(K: np.ndarray, n: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """T = sum_r n_r (A(r) - B(r))^2 with A(r) = K_r / n_r; rows of K are replicates."""
    with np.errstate(invalid="ignore", divide="ignore"):
        A = np.where(n > 0, K / np.maximum(n, 1), 0.0)
    return np.asarray((n * (A - reference) ** 2).sum(-1))


@jaxtyped(typechecker=beartype)
def permutation_test(correct: Bool[np.ndarray, " row"], residue: Int[np.ndarray, " row"],
                     cluster: Int[np.ndarray, " row"], modulus: int, *, fold: int | None = None,
                     n_perm: int = 2000, seed: int = 0) -> float:
    """Permutation p-value for "no phase effect" (or, with `fold`, "period `fold` explains it").

    Statistic, with A(r) the accuracy and n_r the row count at residue r:

        T = sum_r n_r (A(r) - B(r))^2

    where B(r) is the overall accuracy (H0: accuracy does not depend on the residue) or, with
    fold = P, the accuracy of all rows whose residue is = r (mod P) (H0: accuracy depends on
    the residue only through r mod P). Null distribution: the residue labels are shuffled at
    random among the rows of each logical example (and, with `fold`, of the same r mod P),
    which keeps every n_r and every example's composition; rows of one example are the unit
    the paired design makes exchangeable under H0. With T_1..T_B the permuted statistics,

        p = (1 + #{b : T_b >= T_obs}) / (1 + B).

    Seeded (numpy PCG64 with `seed`); p = 1 when no labels can move.

    Args:
        correct: per-row outcome.
        residue: per-row residue in [0, modulus).
        cluster: per-row logical example id.
        modulus: R.
        fold: None, or a period S dividing R.
        n_perm: permutations B, >= 1 (2000 by default).
        seed: random seed.
    """
    if n_perm < 1:
        raise ValueError(f"n_perm={n_perm} out of range [1, inf)")
    if (residue < 0).any() or (residue >= modulus).any():
        raise ValueError(f"residues must lie in [0, modulus={modulus})")
    if fold is not None and (fold < 1 or modulus % fold):
        raise ValueError(f"fold={fold} must divide the modulus R={modulus}")
    _, cid = np.unique(cluster, return_inverse=True)
    strata = cid if fold is None else cid * fold + residue % fold
    order = np.argsort(strata, kind="stable")
    strata, res, y = strata[order], residue[order], correct[order].astype(np.float64)
    n = np.bincount(res, minlength=modulus).astype(np.float64)
    K = np.bincount(res, weights=y, minlength=modulus)
    if fold is None:
        reference = np.full(modulus, y.mean())
    else:
        folded = lambda v: np.bincount(np.arange(modulus) % fold, weights=v, minlength=fold)  # noqa: E731
        with np.errstate(invalid="ignore", divide="ignore"):
            reference = (folded(K) / folded(n))[np.arange(modulus) % fold]
        reference = np.nan_to_num(reference)
    observed = _statistic(K, n, reference)
    rng = np.random.default_rng(seed)
    rows = len(y)
    exceed, chunk = 0, max(1, 2_000_000 // max(rows, 1))
    for start in range(0, n_perm, chunk):
        b = min(chunk, n_perm - start)
        perm = np.argsort(strata + rng.random((b, rows)), axis=1)
        labels = res[perm] + modulus * np.arange(b)[:, None]
        Kb = np.bincount(labels.ravel(), weights=np.broadcast_to(y, (b, rows)).ravel(),
                         minlength=b * modulus).reshape(b, modulus)
        exceed += int((_statistic(Kb, n, reference) >= observed * (1 - 1e-12) - 1e-15).sum())
    return (1 + exceed) / (1 + n_perm)


def attainable_p(correct: np.ndarray, residue: np.ndarray, cluster: np.ndarray, modulus: int, *,
                 n_perm: int = 2000, seed: int = 0) -> float:
    """The smallest p-value `permutation_test` could give with these examples' outcomes: the test conditions on
    each example's number of correct rows, so rearrange them as unevenly as they can be (every example's correct
    rows on its lowest residues, the same residues for all) and test that. At or above alpha, the unit has no power
    to show a phase effect whatever the model did: e.g. one example right at one residue and wrong at the others
    (its statistic does not move under any permutation) gives p = 1.

    Example:
        >>> residue, cluster = np.tile(np.arange(8), 2), np.repeat([0, 1], 8)
        >>> attainable_p(residue == 7, residue, cluster, 8, n_perm=200)  # one right row per example
        0.1...
        >>> attainable_p(np.r_[np.zeros(15, bool), True], residue, cluster, 8, n_perm=200)
        1.0
    """
    correct, residue, cluster = np.asarray(correct, bool), np.asarray(residue), np.asarray(cluster)
    aligned = np.zeros_like(correct)
    for c in np.unique(cluster):
        rows = np.flatnonzero(cluster == c)
        rows = rows[np.argsort(residue[rows], kind="stable")]
        aligned[rows[: int(correct[rows].sum())]] = True
    return permutation_test(aligned, residue.astype(np.int64), cluster.astype(np.int64), modulus, n_perm=n_perm,
                            seed=seed)
