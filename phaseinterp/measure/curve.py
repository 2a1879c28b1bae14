"""`PhaseCurve`: accuracy per residue with intervals and periodicity statistics."""

from __future__ import annotations

import dataclasses
import json
import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from jaxtyping import Bool, Int
from torch import Tensor

from phaseinterp.config import renamed_keyword
from phaseinterp.measure.gap import heldout_gap
from phaseinterp.measure.intervals import cluster_bootstrap, percentile_interval, wilson_interval
from phaseinterp.measure.periodicity import period_baseline, period_share, periodicity_gap, power_spectrum
from phaseinterp.measure.permutation import permutation_test
from phaseinterp.measure.outputs import write_atomic
from phaseinterp.measure.provenance import dumps, jsonable, versions

if TYPE_CHECKING:
    from phaseinterp.tasks import PhaseBatch

_ARRAYS = {"correct": bool, "residue": np.int64, "example_id": np.int64, "n": np.int64, "n_correct": np.int64,
           "accuracy": np.float64, "wilson_lo": np.float64, "wilson_hi": np.float64, "boot_lo": np.float64,
           "boot_hi": np.float64, "power": np.float64}


def _array(x: Any, dtype: Any) -> np.ndarray:
    if isinstance(x, Tensor):
        x = x.detach().cpu().numpy()
    return np.asarray(x).astype(dtype).reshape(-1)


@dataclass(frozen=True, repr=False)
class PhaseCurve:
    """Accuracy by residue r = key position mod R, with its uncertainty and periodicity tests.

    Build with `PhaseCurve.from_correct` (or `phase_sweep`). Accuracies are fractions; gaps
    and periodicity are in percentage points (pp).

    Attributes:
        modulus: R. period: P, the period the periodicity statistics test (None: not computed);
            for a compressed model the lcm of its strides (`config.period_of`).
        correct, residue, example_id: the per-row data the curve was computed from.
        n, n_correct, accuracy: per residue counts and accuracy A(r) = n_correct / n.
        wilson_lo, wilson_hi: Wilson score interval per residue.
        boot_lo, boot_hi: cluster-bootstrap percentile interval per residue.
        mean_interval: bootstrap percentile interval of the mean accuracy.
        gap_heldout, gap_interval: the phase gap measured on held-out examples and its bootstrap
            interval (pp; `measure.gap.heldout_gap`). The observed gap `gap_pp` (best minus worst
            residue, the paper's statistic) is inflated by noise (a flat curve of 32 examples per
            residue shows ~20 pp); the held-out gap is not (~0 on a flat curve).
        p_value: permutation p-value for "no phase effect".
        p_periodic: permutation p-value for "accuracy depends on r only through r mod P".
        periodicity_pp: 100 * mean_r |A(r) - A(r + P)|.
        spectral_share, spectral_baseline: share of spectral power at period P and its
            expectation for a structureless curve, (P - 1)/(R - 1).
        power: |DFT|^2 of the centred curve, frequencies k = 0..R-1.
        label, confidence, n_boot, n_perm, seed, config, versions: provenance.
    """

    modulus: int
    correct: np.ndarray
    residue: np.ndarray
    example_id: np.ndarray
    n: np.ndarray
    n_correct: np.ndarray
    accuracy: np.ndarray
    wilson_lo: np.ndarray
    wilson_hi: np.ndarray
    boot_lo: np.ndarray
    boot_hi: np.ndarray
    mean_interval: tuple[float, float]
    gap_interval: tuple[float, float]
    p_value: float
    period: int | None
    p_periodic: float
    periodicity_pp: float
    spectral_share: float
    spectral_baseline: float
    power: np.ndarray
    label: str = ""
    confidence: float = 0.95
    n_boot: int = 2000
    n_perm: int = 2000
    seed: int = 0
    config: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    gap_heldout: float = math.nan

    @classmethod
    def from_correct(cls, correct: Bool[Tensor, " row"] | Bool[np.ndarray, " row"], batch: PhaseBatch | None = None,
                     *, residue: Any = None, example_id: Any = None, modulus: int | None = None,
                     period: int | None = None, n_boot: int = 2000, n_perm: int = 2000, confidence: float = 0.95,
                     seed: int = 0, label: str = "", config: dict[str, Any] | None = None, **deprecated: Any
                     ) -> PhaseCurve:
        """Statistics of per-row outcomes grouped by residue.

        Give `batch` (residues, example ids and modulus come from it) or `residue` and
        `modulus`, with `example_id` when rows are clustered. Without example ids every row is
        its own bootstrap cluster and the permutation tests shuffle residues across all rows.

        Args:
            correct: per-row outcome (e.g. top-1 == answer, or after an intervention).
            batch: the PhaseBatch the outcomes belong to.
            residue, example_id, modulus: per-row residue and cluster, and R, without a batch.
            period: P for the periodicity statistics; must divide R (None skips them). The old
                name `stride=` still works, with a DeprecationWarning.
            n_boot: cluster-bootstrap replicates. n_perm: permutations per test.
            confidence: interval coverage. seed: seeds the bootstrap and the permutations.
            label: curve name for tables and figures. config: extra provenance.

        Raises:
            ValueError: on mismatched lengths, residues outside [0, R) or a period not dividing R.

        Example:
            >>> c = PhaseCurve.from_correct(np.array([1, 0, 1, 1] * 25, bool), residue=np.arange(100) % 4,
            ...                             modulus=4, period=2, n_boot=200, n_perm=200)
            >>> c.accuracy.tolist(), c.gap_pp
            ([1.0, 0.0, 1.0, 1.0], 100.0)
        """
        period = renamed_keyword("PhaseCurve.from_correct", deprecated, "stride", "period", period)
        y = _array(correct, bool)
        if batch is not None:
            residue, example_id, modulus = batch.residue, batch.example_id, batch.modulus
            config = {"task": batch.meta, **(config or {})}
        if residue is None or modulus is None:
            raise ValueError("give a PhaseBatch, or residue and modulus")
        res = _array(residue, np.int64)
        ids = np.arange(len(y)) if example_id is None else _array(example_id, np.int64)
        strata = np.zeros_like(ids) if example_id is None else ids
        if not len(y) == len(res) == len(ids):
            raise ValueError(f"lengths differ: correct {len(y)}, residue {len(res)}, example_id {len(ids)}")
        R = int(modulus)
        if R < 1 or len(y) == 0:
            raise ValueError(f"need modulus >= 1 and at least one row, got modulus={R}, rows={len(y)}")
        if (res < 0).any() or (res >= R).any():
            raise ValueError(f"residue {int(res[(res < 0) | (res >= R)][0])} out of range [0, {R})")
        if period is not None and (period < 1 or R % period):
            raise ValueError(f"period={period} must divide the modulus R={R}")
        n = np.bincount(res, minlength=R)
        k = np.bincount(res, weights=y, minlength=R).round().astype(np.int64)
        with np.errstate(invalid="ignore", divide="ignore"):
            acc = np.where(n > 0, k / np.maximum(n, 1), np.nan)
        wlo, whi = wilson_interval(k, n, confidence)
        reps = cluster_bootstrap(y, res, ids, R, n_boot=n_boot, seed=seed)
        blo, bhi = percentile_interval(reps, confidence)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # replicates missing a residue are nan
            means = np.nanmean(reps, 1)
        interval = lambda v: tuple(float(x) for x in percentile_interval(v, confidence))  # noqa: E731
        gap_heldout, gap_interval = heldout_gap(y, res, ids, R, n_boot=n_boot, confidence=confidence, seed=seed)
        periodic = period is not None and period < R
        return cls(
            modulus=R, correct=y, residue=res, example_id=ids, n=n, n_correct=k, accuracy=acc,
            wilson_lo=wlo, wilson_hi=whi, boot_lo=blo, boot_hi=bhi,
            mean_interval=interval(means), gap_interval=gap_interval, gap_heldout=gap_heldout,
            p_value=permutation_test(y, res, strata, R, n_perm=n_perm, seed=seed),
            period=period,
            p_periodic=permutation_test(y, res, strata, R, fold=period, n_perm=n_perm, seed=seed) if periodic else math.nan,
            periodicity_pp=100 * periodicity_gap(acc, period) if periodic else math.nan,
            spectral_share=period_share(acc, period) if periodic else math.nan,
            spectral_baseline=period_baseline(R, period) if periodic else math.nan,
            power=power_spectrum(np.nan_to_num(acc)),
            label=label, confidence=confidence, n_boot=n_boot, n_perm=n_perm, seed=seed,
            config=jsonable(config or {}), versions=versions(),
        )

    @property
    def stride(self) -> int | None:
        """Deprecated name of `period` (the period of the residue statistics, not a compressor's stride)."""
        warnings.warn("PhaseCurve.stride is deprecated: use PhaseCurve.period (same value)", DeprecationWarning, stacklevel=2)
        return self.period

    # ---- summary statistics ---------------------------------------------------------------

    @property
    def residues(self) -> Int[np.ndarray, " residue"]:
        return np.arange(self.modulus)

    @property
    def mean(self) -> float:
        """Mean over residues of A(r) (residues without rows ignored)."""
        return float(np.nanmean(self.accuracy))

    @property
    def best(self) -> float:
        return float(np.nanmax(self.accuracy))

    @property
    def worst(self) -> float:
        return float(np.nanmin(self.accuracy))

    @property
    def best_residue(self) -> int:
        return int(np.nanargmax(self.accuracy))

    @property
    def worst_residue(self) -> int:
        return int(np.nanargmin(self.accuracy))

    @property
    def gap_pp(self) -> float:
        """Phase gap: 100 * (best - worst residue accuracy), in percentage points."""
        return 100 * (self.best - self.worst)

    def verdict(self, alpha: float = 0.05) -> str:
        """One line: "no detectable phase effect" (p_value >= alpha), else whether the effect
        is consistent with period P (p_periodic >= alpha) or not."""
        if not 0 < alpha < 1:
            raise ValueError(f"alpha={alpha} out of range (0, 1)")
        if self.p_value >= alpha:
            return "no detectable phase effect"
        if self.period is None or math.isnan(self.p_periodic):
            return "phase effect"
        if self.p_periodic >= alpha:
            return f"phase effect, consistent with period {self.period}"
        return f"phase effect, not explained by period {self.period}"

    def summary(self) -> dict[str, Any]:
        """Scalar statistics as a plain dict."""
        return {"label": self.label, "modulus": self.modulus, "period": self.period, "rows": int(self.n.sum()),
                "examples": int(len(np.unique(self.example_id))), "mean": self.mean,
                "mean_interval": self.mean_interval, "best": self.best, "best_residue": self.best_residue,
                "worst": self.worst, "worst_residue": self.worst_residue, "gap_pp": self.gap_pp,
                "gap_heldout_pp": self.gap_heldout, "gap_interval_pp": self.gap_interval, "p_value": self.p_value,
                "periodicity_pp": self.periodicity_pp, "p_periodic": self.p_periodic,
                "spectral_share": self.spectral_share, "spectral_baseline": self.spectral_baseline,
                "verdict": self.verdict()}

    def to_pandas(self) -> pd.DataFrame:
        """Tidy table, one row per residue: label, residue, phase (r mod P), n, n_correct,
        accuracy, wilson_lo/hi, boot_lo/hi."""
        phase = self.residues % self.period if self.period else [pd.NA] * self.modulus
        return pd.DataFrame({"label": self.label, "residue": self.residues, "phase": pd.array(phase, dtype="Int64"),
                             "n": self.n, "n_correct": self.n_correct, "accuracy": self.accuracy,
                             "wilson_lo": self.wilson_lo, "wilson_hi": self.wilson_hi,
                             "boot_lo": self.boot_lo, "boot_hi": self.boot_hi})

    # ---- serialization and display --------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict of every field plus the summary (nan -> None)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return jsonable({**out, "summary": self.summary()})

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PhaseCurve:
        """Inverse of `to_dict`; also reads files written before the rename of `stride` to `period`."""
        if "period" not in data and "stride" in data:
            data = {**data, "period": data["stride"]}
        kwargs = {}
        for f in dataclasses.fields(cls):
            if f.name == "gap_heldout" and f.name not in data:
                continue  # written before held-out gaps: recomputed below from the rows
            v = data[f.name]
            if f.name in _ARRAYS:
                v = np.array([math.nan if x is None else x for x in v]).astype(_ARRAYS[f.name])
            elif f.name in ("mean_interval", "gap_interval"):
                v = tuple(math.nan if x is None else float(x) for x in v)
            elif f.name in ("p_value", "p_periodic", "periodicity_pp", "spectral_share", "spectral_baseline", "gap_heldout"):
                v = math.nan if v is None else float(v)
            kwargs[f.name] = v
        if "gap_heldout" not in data:  # its gap_interval was the percentile interval of replicate max - min
            kwargs["gap_heldout"], kwargs["gap_interval"] = heldout_gap(
                kwargs["correct"], kwargs["residue"], kwargs["example_id"], kwargs["modulus"], n_boot=kwargs["n_boot"],
                confidence=kwargs["confidence"], seed=kwargs["seed"])
        return cls(**kwargs)

    def to_json(self, path: str | Path) -> Path:
        """Write `to_dict()` as JSON; return the path."""
        return write_atomic(path, dumps(self.to_dict()))

    @classmethod
    def from_json(cls, path: str | Path) -> PhaseCurve:
        return cls.from_dict(json.loads(Path(path).read_text()))

    def __repr__(self) -> str:
        name = f" {self.label!r}" if self.label else ""
        return (f"PhaseCurve{name}(R={self.modulus}, P={self.period}, rows={int(self.n.sum())}, "
                f"mean={100 * self.mean:.1f}%, worst={100 * self.worst:.1f}% at r={self.worst_residue}, "
                f"gap={self.gap_pp:.1f} pp, p={self.p_value:.3g}: {self.verdict()})")

    def _repr_html_(self) -> str:
        """Jupyter: the phase figure (offline; plotly imported only here), then this repr."""
        from phaseinterp.plot.display import curve_html  # the one upward import: tests/test_architecture.py

        return curve_html(self)

