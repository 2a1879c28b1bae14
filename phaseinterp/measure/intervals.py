"""Confidence intervals for per-residue accuracy: Wilson score and logical-example cluster bootstrap."""

from __future__ import annotations

import warnings

import numpy as np
from beartype import beartype
from jaxtyping import Bool, Float, Int, jaxtyped
from scipy.stats import norm


def _check_confidence(confidence: float) -> None:
    if not 0 < confidence < 1:
        raise ValueError(f"confidence={confidence} out of range (0, 1)")


@jaxtyped(typechecker=beartype)
def wilson_interval(k: Int[np.ndarray, "*shape"], n: Int[np.ndarray, "*shape"], confidence: float = 0.95
                    ) -> tuple[Float[np.ndarray, "*shape"], Float[np.ndarray, "*shape"]]:
    """Wilson score interval for a binomial proportion, elementwise.

    With p = k / n and z = Phi^{-1}((1 + confidence) / 2) (1.95996 for 95%):

        centre = (p + z^2 / (2n)) / (1 + z^2 / n)
        half   = z / (1 + z^2 / n) * sqrt(p (1 - p) / n + z^2 / (4 n^2))
        interval = [centre - half, centre + half]

    These are the roots in p' of (p - p')^2 = z^2 p' (1 - p') / n. For n = 0 the interval is
    [0, 1]. Example: k = 0, n = 10 gives [0, z^2 / (n + z^2)] = [0, 0.2775].

    Args:
        k: successes, 0 <= k <= n.
        n: trials, n >= 0.
        confidence: coverage level in (0, 1).

    Returns:
        (lower, upper) arrays of the broadcast shape.

    Example:
        >>> lo, hi = wilson_interval(np.array([5]), np.array([10]))
        >>> [round(float(lo[0]), 4), round(float(hi[0]), 4)]
        [0.2366, 0.7634]
    """
    _check_confidence(confidence)
    if (n < 0).any():
        raise ValueError(f"trials n={n[n < 0].flat[0]} out of range [0, inf)")
    if ((k < 0) | (k > n)).any():
        bad = ((k < 0) | (k > n)).nonzero()
        raise ValueError(f"successes k={k[bad].flat[0]} out of range [0, n={n[bad].flat[0]}]")
    z = float(norm.ppf((1 + confidence) / 2))
    nf = np.maximum(n, 1).astype(np.float64)
    p = k / nf
    denom = 1 + z * z / nf
    centre = (p + z * z / (2 * nf)) / denom
    half = z / denom * np.sqrt(p * (1 - p) / nf + z * z / (4 * nf * nf))
    lo = np.where((n > 0) & (k > 0), np.clip(centre - half, 0.0, 1.0), 0.0)
    hi = np.where((n > 0) & (k < n), np.clip(centre + half, 0.0, 1.0), 1.0)
    return lo, hi


#: clusters (logical examples) a group needs before a bootstrap interval of it is estimable
MIN_CLUSTERS = 2


@jaxtyped(typechecker=beartype)
def cluster_bootstrap(correct: Bool[np.ndarray, " row"], group: Int[np.ndarray, " row"],
                      cluster: Int[np.ndarray, " row"], n_groups: int, *, n_boot: int = 2000,
                      seed: int = 0) -> Float[np.ndarray, "n_boot n_groups"]:
    """Cluster-bootstrap replicates of per-group accuracy (groups = residues, clusters = logical examples).

    Let K[c, g] and N[c, g] be the correct and total row counts of cluster c in group g, and
    C the number of clusters. Replicate b draws C clusters with replacement; m[b, c] ~
    Multinomial(C, 1/C) is how often cluster c is drawn, and

        A_b(g) = sum_c m[b, c] K[c, g] / sum_c m[b, c] N[c, g]      (nan if the sum is 0).

    Whole clusters are resampled, so all residues of one key->value mapping stay together and
    the within-cluster correlation is kept. Seeded (numpy PCG64 with `seed`). A group whose rows
    come from fewer than `MIN_CLUSTERS` clusters gets nan replicates: redrawing its one cluster
    gives the same accuracy every time (a zero-width interval), so its interval cannot be estimated.

    Args:
        correct: per-row outcome.
        group: per-row group (residue) in [0, n_groups).
        cluster: per-row cluster id (any integers).
        n_groups: number of groups.
        n_boot: replicates, >= 1 (2000 by default).
        seed: random seed.

    Returns:
        Replicate accuracies, shape [n_boot, n_groups]; see `percentile_interval`.
    """
    if n_boot < 1:
        raise ValueError(f"n_boot={n_boot} out of range [1, inf)")
    if n_groups < 1 or (group < 0).any() or (group >= n_groups).any():
        raise ValueError(f"group labels must lie in [0, n_groups={n_groups})")
    if correct.size == 0:
        raise ValueError("no rows to bootstrap")
    _, cid = np.unique(cluster, return_inverse=True)
    C = int(cid.max()) + 1
    cells = cid * n_groups + group
    K = np.bincount(cells, weights=correct, minlength=C * n_groups).reshape(C, n_groups)
    N = np.bincount(cells, minlength=C * n_groups).reshape(C, n_groups).astype(np.float64)
    m = np.random.default_rng(seed).multinomial(C, np.full(C, 1.0 / C), size=n_boot).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        reps = (m @ K) / (m @ N)
    reps[:, (N > 0).sum(0) < MIN_CLUSTERS] = np.nan
    return reps


@jaxtyped(typechecker=beartype)
def percentile_interval(replicates: Float[np.ndarray, "n_boot *shape"], confidence: float = 0.95  # noqa: F821  (shape string)
                        ) -> tuple[Float[np.ndarray, "*shape"], Float[np.ndarray, "*shape"]]:
    """Percentile bootstrap interval: the (1 - confidence)/2 and (1 + confidence)/2 quantiles
    of the replicates along axis 0 (nan replicates ignored; nan where every replicate is nan)."""
    _check_confidence(confidence)
    with warnings.catch_warnings():  # an all-nan cell (not estimable) is nan on purpose
        warnings.simplefilter("ignore", RuntimeWarning)
        q = np.nanquantile(replicates, [(1 - confidence) / 2, (1 + confidence) / 2], axis=0)
    return np.asarray(q[0], dtype=np.float64), np.asarray(q[1], dtype=np.float64)
