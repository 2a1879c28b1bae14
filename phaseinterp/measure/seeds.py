"""Seeds as the unit: a member (one architecture and recipe, several training seeds) summarized across
its seeds (docs/statistics.md, "Across seeds").

A seed's data is its per-example correctness matrix X[e, r] (logical example e rendered at residue r,
one row each: `correct_matrix`), stored compactly in result files by `pack_correct`. `member_summary`
gives the share of seeds that learned with its Wilson interval, the median and range across seeds of
each seed's mean, worst residue and held-out gap, and the member's mean curve (the average of the seeds'
curves) with a two-level bootstrap: resample seeds, then logical examples within each resampled seed.

Example:
    >>> rng = np.random.default_rng(0)
    >>> runs = [SeedRun(rng.random((64, 8)) < 0.5 + 0.4 * (np.arange(8) % 2), learned=True, label=f"s{i}")
    ...         for i in range(3)]
    >>> s = member_summary(runs, n_boot=200)
    >>> s.n_seeds, s.n_learned, [round(x, 3) for x in s.learned_interval]
    (3, 3, [0.439, 1.0])
    >>> lo, hi = s.curves["all"].mean_interval
    >>> bool(lo < s.curves["all"].mean < hi)
    True
"""

from __future__ import annotations

import base64
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from phaseinterp.measure.gap import heldout_gap, split_halves
from phaseinterp.measure.intervals import percentile_interval, wilson_interval
from phaseinterp.measure.provenance import jsonable

#: The statistics `SeedSpread` reports across seeds (per seed: `seed_statistics`).
STATISTICS = ("mean", "worst", "gap_pp", "gap_heldout_pp")


@dataclass(frozen=True)
class SeedRun:
    """One trained seed of a member: its correctness matrix [examples, residues] and whether it learned.

    `learned` comes from the caller (e.g. best residue >= 80%, `train.rule.LEARNED_BEST`); the summary never drops a seed
    that did not learn, it reports it (the "all" statistics) next to the learned seeds' ones."""

    correct: np.ndarray
    learned: bool
    label: str = ""

    def __post_init__(self) -> None:
        x = np.asarray(self.correct)
        if x.ndim != 2 or x.shape[0] < 2 or x.shape[1] < 1:
            raise ValueError(f"seed {self.label!r}: correct must be [examples >= 2, residues >= 1], got shape {x.shape}")
        if x.dtype != bool and not np.isin(x, (0, 1)).all():
            raise ValueError(f"seed {self.label!r}: correct must hold 0/1 or booleans")
        object.__setattr__(self, "correct", x.astype(bool))
        object.__setattr__(self, "learned", bool(self.learned))


@dataclass(frozen=True)
class SeedSpread:
    """Median, min and max across `n` seeds of each statistic in `STATISTICS` (accuracies as
    fractions, gaps in pp): e.g. `median["mean"]`, `low["worst"]`, `high["gap_heldout_pp"]`."""

    n: int
    median: dict[str, float]
    low: dict[str, float]
    high: dict[str, float]


@dataclass(frozen=True)
class MemberCurve:
    """The member's mean curve M(r) = (1/S) sum_s A_s(r) over S seeds, with two-level bootstrap intervals.

    Attributes:
        accuracy, lo, hi: M(r) per residue and its percentile interval.
        mean, mean_interval: the mean over residues of M(r).
        gap_heldout_pp, gap_interval_pp: the held-out gap of M (pp): best and worst residue of M on one half
            of every seed's examples, measured on the other half, both directions averaged. Seeds whose weak
            phases differ flatten M: read it with `seed_gap_pp`.
        seed_gap_pp, seed_gap_interval_pp: the average over seeds of each seed's own held-out gap (pp).
        n_seeds, n_boot, confidence, seed: what the intervals were computed with.
    """

    accuracy: list[float]
    lo: list[float]
    hi: list[float]
    mean: float
    mean_interval: tuple[float, float]
    gap_heldout_pp: float
    gap_interval_pp: tuple[float, float]
    seed_gap_pp: float
    seed_gap_interval_pp: tuple[float, float]
    n_seeds: int
    n_boot: int
    confidence: float
    seed: int


@dataclass(frozen=True)
class MemberSummary:
    """A member across its seeds; `spread` and `curves` have keys "all" (every seed) and "learned"
    (the seeds that learned; None when none did)."""

    n_seeds: int
    n_learned: int
    learned_share: float
    learned_interval: tuple[float, float]
    per_seed: list[dict[str, Any]]
    spread: dict[str, SeedSpread | None]
    curves: dict[str, MemberCurve | None]
    confidence: float = 0.95

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (nan -> None)."""
        return jsonable(self)


def correct_matrix(correct: Any, residue: Any, example_id: Any, modulus: int) -> np.ndarray:
    """Per-row outcomes as the matrix X[e, r] (examples in sorted id order); every logical example
    must have exactly one row at every residue (as `PhaseBatch` renders them).

    Example:
        >>> correct_matrix([1, 0, 0, 1], [0, 1, 0, 1], [7, 7, 9, 9], 2).astype(int).tolist()
        [[1, 0], [0, 1]]
    """
    y, res, ids = (np.asarray(a).reshape(-1) for a in (correct, residue, example_id))
    if not len(y) == len(res) == len(ids) or len(y) == 0:
        raise ValueError(f"need equal, non-zero lengths: correct {len(y)}, residue {len(res)}, example_id {len(ids)}")
    if modulus < 1 or (res < 0).any() or (res >= modulus).any():
        raise ValueError(f"residues must lie in [0, modulus={modulus}), got {sorted(set(res.tolist()))[:5]}...")
    uniq, e = np.unique(ids, return_inverse=True)
    count = np.bincount(e * modulus + res, minlength=len(uniq) * modulus)
    if (count != 1).any():
        bad = int(np.flatnonzero(count != 1)[0])
        raise ValueError(f"example {uniq[bad // modulus]} has {count[bad]} rows at residue {bad % modulus}: "
                         "a correctness matrix needs exactly one row per example and residue")
    out = np.zeros((len(uniq), modulus), bool)
    out[e, res] = np.asarray(y).astype(bool)
    return out


def pack_correct(matrix: np.ndarray) -> list[str]:
    """A correctness matrix [examples, residues] as one base64 bit string per residue (`np.packbits`
    of the column, examples in order): 256 examples take 44 characters per residue."""
    x = np.asarray(matrix)
    if x.ndim != 2:
        raise ValueError(f"pack_correct: need a 2-d [examples, residues] matrix, got shape {x.shape}")
    return [base64.b64encode(np.packbits(x[:, r].astype(bool)).tobytes()).decode("ascii") for r in range(x.shape[1])]


def unpack_correct(packed: list[str], n_examples: int) -> np.ndarray:
    """Inverse of `pack_correct`: the [n_examples, len(packed)] boolean matrix.

    Example:
        >>> x = np.array([[1, 0], [1, 1], [0, 1]], bool)
        >>> bool((unpack_correct(pack_correct(x), 3) == x).all())
        True
    """
    if n_examples < 1 or not packed:
        raise ValueError(f"unpack_correct: need n_examples >= 1 and >= 1 residue, got {n_examples} and {len(packed)}")
    cols = []
    for r, text in enumerate(packed):
        bits = np.unpackbits(np.frombuffer(base64.b64decode(text), np.uint8))
        if len(bits) < n_examples or bits[n_examples:].any():
            raise ValueError(f"unpack_correct: residue {r} holds {len(bits)} bits, not {n_examples} examples")
        cols.append(bits[:n_examples])
    return np.stack(cols, 1).astype(bool)


def seed_statistics(run: SeedRun, *, seed: int = 0) -> dict[str, Any]:
    """One seed's mean, best, worst (fractions), observed gap and held-out gap (pp, `measure.gap.heldout_gap`
    with split seed `seed`: a table's value when `seed` is its task seed)."""
    x = run.correct
    acc = x.mean(0)
    E, R = x.shape
    res, ids = np.tile(np.arange(R), E), np.repeat(np.arange(E), R)
    # the point estimate does not depend on the replicates; one keeps this cheap
    held = heldout_gap(x.reshape(-1), res, ids, R, n_boot=1, seed=seed)[0]
    return {"label": run.label, "learned": run.learned, "examples": E, "mean": float(acc.mean()),
            "best": float(acc.max()), "worst": float(acc.min()), "gap_pp": float(100 * (acc.max() - acc.min())),
            "gap_heldout_pp": held}


def member_summary(runs: list[SeedRun], *, n_boot: int = 2000, confidence: float = 0.95, seed: int = 0) -> MemberSummary:
    """Summarize a member across its seeds (see the module doc and docs/statistics.md).

    Args:
        runs: one `SeedRun` per seed; every matrix must have the same number of residues (examples may differ).
        n_boot: two-level bootstrap replicates. confidence: interval coverage (Wilson and bootstrap).
        seed: seeds the bootstrap and the held-out split (the split is `heldout_gap`'s for this seed).

    Raises:
        ValueError: no runs, residue counts that differ, n_boot < 1 or confidence outside (0, 1).
    """
    _check("member_summary", runs, n_boot, confidence)
    per_seed = [seed_statistics(r, seed=seed) for r in runs]
    k = sum(r.learned for r in runs)
    lo, hi = wilson_interval(np.array([k]), np.array([len(runs)]), confidence)
    learned = [r for r in runs if r.learned]
    return MemberSummary(
        n_seeds=len(runs), n_learned=k, learned_share=k / len(runs), learned_interval=(float(lo[0]), float(hi[0])),
        per_seed=per_seed, confidence=confidence,
        spread={"all": seed_spread(per_seed), "learned": seed_spread([s for s in per_seed if s["learned"]])},
        curves={"all": member_curve(runs, n_boot=n_boot, confidence=confidence, seed=seed),
                "learned": member_curve(learned, n_boot=n_boot, confidence=confidence, seed=seed) if learned else None})


def seed_spread(per_seed: list[dict[str, Any]]) -> SeedSpread | None:
    """Median, min and max across seeds of each of `STATISTICS` (None for no seeds; nan values ignored)."""
    if not per_seed:
        return None
    cols = {s: np.array([p[s] for p in per_seed], float) for s in STATISTICS}
    pick = lambda f: {s: float(f(v[~np.isnan(v)])) if (~np.isnan(v)).any() else math.nan for s, v in cols.items()}  # noqa: E731
    return SeedSpread(n=len(per_seed), median=pick(np.median), low=pick(np.min), high=pick(np.max))


def member_curve(runs: list[SeedRun], *, n_boot: int = 2000, confidence: float = 0.95, seed: int = 0) -> MemberCurve:
    """The member's mean curve with its two-level bootstrap (`MemberCurve`).

    Replicate b draws S seed slots with replacement (numpy PCG64 seeded by [seed, 1]); slot j's seed s
    gets multinomial example weights w (E_s examples drawn with replacement; PCG64 seeded by `seed`, the
    stream `cluster_bootstrap` uses, seed after seed over the slots that drew it, in replicate order) and
    the curve w X_s / E_s; the replicate of M is the slots' average. Memory: O(n_boot S R).
    With one seed this is `cluster_bootstrap` of that seed, replicate for replicate. The gaps resample
    the examples of each half of every slot's seed separately, and pick their residues anew in every
    replicate (the selection is part of what is resampled)."""
    _check("member_curve", runs, n_boot, confidence)
    S, R = len(runs), runs[0].correct.shape[1]
    pick = np.random.default_rng([seed, 1]).integers(S, size=(n_boot, S))
    weights = np.random.default_rng(seed)
    halves = np.random.default_rng([seed, 2])
    # replicate b, slot j: the curve of the seed drawn for it (whole, and each half); only drawn slots are computed
    full_r, a_r, b_r = np.empty((n_boot, S, R)), np.empty((n_boot, S, R)), np.empty((n_boot, S, R))
    point_a, point_b = np.empty((S, R)), np.empty((S, R))
    for s, run in enumerate(runs):
        x = run.correct.astype(np.float64)
        E, slots = len(x), pick == s
        drawn = int(slots.sum())
        full_r[slots] = weights.multinomial(E, np.full(E, 1.0 / E), size=drawn) @ x / E
        in_b = split_halves(E, seed)
        for part, out, point in ((x[~in_b], a_r, point_a), (x[in_b], b_r, point_b)):
            n = len(part)
            out[slots] = halves.multinomial(n, np.full(n, 1.0 / n), size=drawn) @ part / n
            point[s] = part.mean(0)
    curve = np.mean([r.correct.mean(0) for r in runs], 0)
    reps = full_r.mean(1)
    lo, hi = percentile_interval(reps, confidence)
    interval = lambda v: tuple(float(q) for q in percentile_interval(v, confidence))  # noqa: E731
    member_gap = _heldout(a_r.mean(1), b_r.mean(1))
    seed_gaps = _heldout(a_r, b_r).mean(1)
    return MemberCurve(
        accuracy=curve.tolist(), lo=lo.tolist(), hi=hi.tolist(), mean=float(curve.mean()),
        mean_interval=interval(reps.mean(1)),
        gap_heldout_pp=float(_heldout(point_a.mean(0), point_b.mean(0))), gap_interval_pp=interval(member_gap),
        seed_gap_pp=float(_heldout(point_a, point_b).mean()), seed_gap_interval_pp=interval(seed_gaps),
        n_seeds=S, n_boot=n_boot, confidence=confidence, seed=seed)


def _check(name: str, runs: list[SeedRun], n_boot: int, confidence: float) -> None:
    if not runs:
        raise ValueError(f"{name}: no seeds (runs is empty): allowed one or more SeedRun")
    widths = sorted({r.correct.shape[1] for r in runs})
    if len(widths) > 1:
        raise ValueError(f"{name}: the seeds' matrices have {widths} residues: all seeds need the same residues")
    if n_boot < 1:
        raise ValueError(f"n_boot={n_boot} out of range [1, inf)")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence={confidence} out of range (0, 1)")


def _heldout(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Held-out gap (pp) of curves over the last axis: residues picked on a measured on b and vice versa, averaged."""
    def measured(pick_on, measure_on):
        best = np.take_along_axis(measure_on, pick_on.argmax(-1)[..., None], -1)[..., 0]
        worst = np.take_along_axis(measure_on, pick_on.argmin(-1)[..., None], -1)[..., 0]
        return best - worst

    return np.asarray(100 * (measured(a, b) + measured(b, a)) / 2)


def median_range_text(spread: dict | None, key: str, scale: int | float = 1.0) -> str:
    """"median (low to high)" of `key` in a seed spread's dict (`SeedSpread.to_dict()`), times
    `scale`, one decimal; "-" when there is no spread or no value (e.g. no seed learned)."""
    if spread is None or spread["median"][key] is None:
        return "-"
    return f"{scale * spread['median'][key]:.1f} ({scale * spread['low'][key]:.1f} to {scale * spread['high'][key]:.1f})"


def estimate_text(curve: dict | None, key: str, interval_key: str, scale: int | float = 1.0) -> str:
    """"value [low, high]" of `key` and its interval `interval_key` in a member curve's dict
    (`MemberCurve.to_dict()`), times `scale`, one decimal; "-" for what is absent (an interval
    that cannot be estimated, e.g. from one seed)."""
    if curve is None or curve[key] is None:
        return "-"
    pair = curve[interval_key]
    if pair is None or pair[0] is None:
        return f"{scale * curve[key]:.1f} -"
    return f"{scale * curve[key]:.1f} [{scale * pair[0]:.1f}, {scale * pair[1]:.1f}]"


__all__ = ["MemberCurve", "MemberSummary", "STATISTICS", "SeedRun", "SeedSpread", "correct_matrix", "estimate_text",
           "median_range_text", "member_curve", "member_summary", "pack_correct", "seed_spread", "seed_statistics", "unpack_correct"]
