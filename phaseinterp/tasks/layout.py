"""Where records go: position-matched target distributions and the two padding protocols.

Position matching. For every residue r (mod R), the target key position p follows a discrete
distribution on {p : p = r mod R} with the *same* mean c and variance V for all r. With
u = p - c and a = (r - c) mod R, the support is M + 2 consecutive points
u_i = a + R (j0 + i), i = 0..M+1 (M = `spread`); the M interior points get weight 1 and the two
end points weights w0, w1 >= 0 solved from the two linear equations

    w0 u_0 + w1 u_{M+1} + sum_interior u_i = 0                                   (mean c)
    w0 (u_0^2 - V) + w1 (u_{M+1}^2 - V) + sum_interior (u_i^2 - V) = 0           (variance V)

with V = R^2 ((M + 1)^2 + 2) / 12 (the variance of the centred design with end weights 1/2).
j0 is chosen near -a/R - (M+1)/2 so that the larger end weight is smallest. All target
positions then lie in a window of R (M + 2) - 1 tokens. A sample of n positions per residue
takes each point floor or ceil of n w times, the roundings chosen so that the achieved
moments are closest to (c, V); the achieved moments are reported in the batch metadata.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

import numpy as np

from phaseinterp.config import period_of
from phaseinterp.tasks.names import PROTOCOLS


def check_protocol(protocol: str) -> str:
    """Return `protocol` if it is known, else raise ValueError listing the allowed names."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; choose one of: {', '.join(PROTOCOLS)}")
    return protocol


def default_modulus(strides: Sequence[int]) -> int:
    """Residue modulus for a model: the least common multiple of its compression strides.

    Args:
        strides: the strides of the compressed layers (empty for full attention).

    Raises:
        ValueError: for full attention (no strides), where the user must choose the modulus.

    Example:
        >>> default_modulus((4, 6))
        12
    """
    strides = [int(s) for s in strides]
    if not strides:
        raise ValueError("the model has no compressed layers (full attention): give the residue modulus explicitly")
    if min(strides) < 1:
        raise ValueError(f"strides must be >= 1, got {strides}")
    return period_of(strides)


@lru_cache(maxsize=256)
def _offset_designs(modulus: int, spread: int) -> tuple[tuple[np.ndarray, np.ndarray], ...]:
    """Per offset class a in [0, R): (offsets u, weights) with mean 0 and variance V."""
    R, M = modulus, spread
    V = R * R * ((M + 1) ** 2 + 2) / 12.0
    designs = []
    for a in range(R):
        mid = -a / R - (M + 1) / 2
        best = None
        for j0 in range(math.floor(mid) - 1, math.ceil(mid) + 2):
            u = a + R * np.arange(j0, j0 + M + 2, dtype=np.float64)
            inner = u[1:-1]
            lhs = np.array([[u[0], u[-1]], [u[0] ** 2 - V, u[-1] ** 2 - V]])
            rhs = np.array([-inner.sum(), V * M - (inner**2).sum()])
            w0, w1 = np.linalg.solve(lhs, rhs)
            if min(w0, w1) >= -1e-9 and (best is None or max(w0, w1) < best[0]):
                best = (max(w0, w1), u, np.r_[max(w0, 0.0), np.ones(M), max(w1, 0.0)])
        if best is None:  # not reached: checked numerically for all R <= 64, M <= 7
            raise ValueError(f"no position-matched design for modulus={R}, spread={M}")
        u, w = best[1], best[2]
        keep = w > 1e-12
        designs.append((u[keep].astype(np.int64), w[keep] / w[keep].sum()))
    return tuple(designs)


def target_variance(modulus: int, spread: int) -> float:
    """Common variance V = R^2 ((M+1)^2 + 2) / 12 of the matched target distributions."""
    return modulus * modulus * ((spread + 1) ** 2 + 2) / 12.0


def offset_range(modulus: int, spread: int) -> tuple[int, int]:
    """Smallest and largest target offset u = p - c over all residues (inclusive)."""
    designs = _offset_designs(modulus, spread)
    return int(min(u.min() for u, _ in designs)), int(max(u.max() for u, _ in designs))


def _matched_counts(points: np.ndarray, weights: np.ndarray, n: int, center: int, variance: float) -> np.ndarray:
    """Integer counts near n * weights (each floor or ceil) whose sample mean and variance are
    closest to (center, variance): minimises ((mean - c)^2 + (var - V)^2 / V) / V."""
    raw = weights * n
    base = np.floor(raw).astype(np.int64)
    short = int(n - base.sum())
    k = len(points)
    if short == 0:
        return base
    choices = np.array([[b >> i & 1 for i in range(k)] for b in range(2**k) if bin(b).count("1") == short])
    counts = base + choices
    x = points - center
    mean = counts @ x / n
    var = counts @ (x * x) / n - mean**2
    cost = (mean**2 + (var - variance) ** 2 / variance) / variance
    return counts[int(np.argmin(cost))]


@dataclass(frozen=True)
class MatchedTargets:
    """Position-matched target distributions for one modulus around one centre.

    Attributes:
        modulus: residue modulus R.
        spread: number of interior support points per residue (M).
        center: common mean c of the target position.
        variance: common variance V.
    """

    modulus: int
    spread: int
    center: int

    @property
    def variance(self) -> float:
        return target_variance(self.modulus, self.spread)

    def support(self, residue: int) -> tuple[np.ndarray, np.ndarray]:
        """Absolute positions (all = residue mod R) and their probabilities."""
        if not 0 <= residue < self.modulus:
            raise ValueError(f"residue {residue} out of range [0, {self.modulus})")
        u, w = _offset_designs(self.modulus, self.spread)[(residue - self.center) % self.modulus]
        return self.center + u, w.copy()

    def sample(self, residue: int, n: int, rng: np.random.Generator) -> np.ndarray:
        """n target positions for `residue`, randomly ordered. Each support point appears
        floor or ceil of n times its weight, choosing the roundings whose sample mean and
        variance are closest to (center, variance)."""
        points, w = self.support(residue)
        counts = _matched_counts(points, w, n, self.center, self.variance)
        return rng.permutation(np.repeat(points, counts))


def composition(total: int, parts: int, rng: np.random.Generator) -> np.ndarray:
    """A uniformly random composition of `total` into `parts` non-negative integers."""
    if parts == 0:
        if total:
            raise ValueError(f"cannot place {total} filler tokens in zero gaps")
        return np.zeros(0, dtype=np.int64)
    bars = np.sort(rng.choice(total + parts - 1, parts - 1, replace=False))
    edges = np.concatenate([[-1], bars, [total + parts - 1]])
    return np.diff(edges) - 1


@dataclass(frozen=True)
class Geometry:
    """Fixed token geometry of a record-lookup prompt.

    Layout: `head` (BOS/template) | haystack of `n_records` records of `rec_len` tokens plus
    `filler` padding tokens | `tail_len` tokens of demonstrations, queries and template footer.
    The first target record has index `slots[0]`; its key position ranges over [lo, hi].
    In-sequence padding keeps `between[i]` filler tokens between target records i and i + 1.
    """

    protocol: str
    seq_len: int
    head_len: int
    n_records: int
    rec_len: int
    tail_len: int
    slots: tuple[int, ...]
    between: tuple[int, ...]

    @property
    def tail_start(self) -> int:
        return self.seq_len - self.tail_len

    @property
    def filler(self) -> int:
        return self.tail_start - self.head_len - self.n_records * self.rec_len

    @property
    def lo(self) -> int:
        return self.head_len + self.slots[0] * self.rec_len

    @property
    def hi(self) -> int:
        return self.lo + self.filler - sum(self.between)

    def record_starts(self, target_pos: int, rng: np.random.Generator) -> np.ndarray:
        """Start positions of all records, given the first target record's key position.

        Prefix padding: records are contiguous and shifted together by d = target_pos - lo.
        In-sequence padding: the n + 1 gaps (before, between and after records) are random
        compositions of the filler, constrained so the target lands on `target_pos` and the
        filler between consecutive target records is fixed (`between`).
        """
        if not self.lo <= target_pos <= self.hi:
            raise ValueError(f"target position {target_pos} out of range [{self.lo}, {self.hi}]")
        n, L = self.n_records, self.rec_len
        idx = np.arange(n)
        if self.protocol == "prefix":
            return target_pos - self.slots[0] * L + idx * L
        pre = target_pos - self.lo
        post = self.hi - target_pos
        edges = [0, *[s + 1 for s in self.slots], n + 1]
        sums = [pre, *self.between, post]
        gaps = np.concatenate([composition(t, b - a, rng) for a, b, t in zip(edges[:-1], edges[1:], sums)])
        return self.head_len + np.cumsum(gaps)[:n] + idx * L
