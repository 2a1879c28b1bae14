"""Evidence rows for `experiments.claims.claims`: one phase curve from a result file, with both tests' verdicts.

A row names its result file and run, and carries what a reader checks first: mean, held-out gap with its
interval, the spectral test (`dominant_period`: the smallest period whose harmonics carry 90% of the curve's
power) and the permutation test (`p_phase`: any phase effect; `p_periodic` and the verdict: is it consistent
with period S). Files that predate `dominant_period` get it computed from their stored per-residue accuracy
with the same library function, so every row is judged by one rule.

A claim that pools rows corrects their p-values across the family it pools (`claim_units.correct`): the
adjusted values then decide `phase_effect` and `permutation_ok`, and the evidence tables show both.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import numpy as np

from phaseinterp.measure import dominant_period

#: a full-attention curve passes claim 2 when its held-out gap interval covers 0 or lies within this (pp)
FULL_TOLERANCE_PP = 6.0
#: a curve whose worst residue reaches this accuracy is at ceiling: no phase effect could show in it
CEILING = 0.99
#: significance level of the permutation tests
ALPHA = 0.05


@dataclass
class Row:
    """One phase curve as evidence. `S` is the period the claim tests (None: no single stride)."""

    source: str
    run: str
    protocol: str
    seed: int | None
    S: int | None
    learned: bool | None
    mean: float | None
    worst: float | None
    gap_pp: float | None
    gap_ci: tuple[float, float] | None
    dominant: int | None
    p_phase: float | None
    p_periodic: float | None
    verdict: str
    member: str | None = None
    #: the packed per-example correctness of a zoo-shaped table ({"examples": n, "bits": [...]}), when stored
    correct: dict | None = None
    #: p-values adjusted across the family the claim pools ("bh" or "holm" in `correction`); None: not corrected
    correction: str | None = None
    p_phase_adj: float | None = None
    p_periodic_adj: float | None = None

    @property
    def phase_effect(self) -> bool:
        """A phase effect: adjusted p (phase) <= 0.05 when the row was corrected, else raw p (phase) < 0.05."""
        if self.correction is not None:
            return self.p_phase_adj is not None and self.p_phase_adj <= ALPHA
        return self.p_phase is not None and self.p_phase < ALPHA

    @property
    def spectral_ok(self) -> bool:
        """The spectral test gives exactly period S (a divisor of S, e.g. 4 for S = 8, does not count)."""
        return self.S is not None and self.dominant == self.S

    @property
    def permutation_ok(self) -> bool:
        """The permutation test finds a phase effect and does not reject period S (after correction when the row
        was corrected: adjusted p (period S) > 0.05; a curve with no p (period S), R = S, is never ok)."""
        if self.S is None:
            return False
        if self.correction is not None:
            return self.phase_effect and self.p_periodic_adj is not None and self.p_periodic_adj > ALPHA
        return f"consistent with period {self.S}" in self.verdict

    @property
    def corrected_verdict(self) -> str:
        """The permutation verdict after correction ("-" when the row was not corrected)."""
        if self.correction is None:
            return "-"
        if not self.phase_effect:
            return "no phase effect"
        if self.p_periodic_adj is None:
            return "phase effect, period S untested"
        return "phase effect, period S " + ("not rejected" if self.p_periodic_adj > ALPHA else "rejected")

    @property
    def at_ceiling(self) -> bool:
        return self.worst is not None and self.worst >= CEILING

    @property
    def name(self) -> str:
        return f"{self.run} {self.protocol}"

    def within_tolerance(self, tol: float = FULL_TOLERANCE_PP) -> bool:
        """The held-out gap interval covers 0 or stays within +-tol pp."""
        if self.gap_ci is None:
            return False
        lo, hi = self.gap_ci
        return lo <= 0.0 <= hi or (-tol <= lo and hi <= tol)


def _num(x) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


def _pair(x) -> tuple[float, float] | None:
    return None if x is None or x[0] is None else (float(x[0]), float(x[1]))


def _dominant(accuracy) -> int | None:
    return None if accuracy is None else dominant_period(np.asarray(accuracy, dtype=float))


def zoo_row(r: dict, source: str) -> Row:
    """A row of a zoo-shaped table (`zoo.json`, `zoo-seeds/zoo.json`, `control/zoo.json`)."""
    dom = r["dominant_period"] if "dominant_period" in r else _dominant(r.get("accuracy"))
    return Row(source, r["model"], r["protocol"], r.get("seed"), r.get("S"), r.get("learned"), _num(r.get("mean")),
               _num(r.get("worst")), _num(r.get("gap_heldout_pp")), _pair(r.get("gap_ci_pp")), dom,
               _num(r.get("p_phase")), _num(r.get("p_periodic")), r.get("verdict") or "-", r.get("member"),
               r.get("correct") if isinstance(r.get("correct"), dict) else None)


def periodicity_row(r: dict, curve: dict, protocol: str, source: str) -> Row:
    """A row of `prefix/periodicity.json` or `insequence/periodicity.json` (the first shipped checkpoints)."""
    return Row(source, r["model"], protocol, r.get("seed"), r.get("P"), _num(r.get("best")) is not None and r["best"] >= 0.8,
               _num(r["mean"]), _num(r["worst"]), _num(r["gap_heldout_pp"]), (r["gap_lo_pp"], r["gap_hi_pp"]),
               _dominant(curve.get("accuracy")), _num(r["p_phase"]), _num(r.get("p_periodic")), r["verdict"])


def nsa_rows(result: dict, source: str) -> list[Row]:
    return [Row(source, result["model"], c["protocol"], result.get("seed"), result.get("S"), c["learned"], _num(c["mean"]),
                _num(c["worst"]), _num(c["gap_heldout_pp"]), _pair(c.get("gap_ci_pp")), c.get("dominant_period"),
                _num(c["p_phase"]), _num(c.get("p_periodic")), c["verdict"]) for c in result["curves"]]


def mitigation_row(r: dict, curve: dict | None, S: int, source: str) -> Row:
    """A mitigation run; its curve file (`mitigations/curves/`) gives accuracy, best and the verdict."""
    summary = (curve or {}).get("summary") or {}
    best = summary.get("best")
    return Row(source, f"{r['variant']}-seed{r['seed']}", "prefix", r["seed"], S, None if best is None else best >= 0.8,
               _num(r["mean"]), _num(r["worst"]), _num(r.get("gap_heldout")), (r["gap_lo"], r["gap_hi"]),
               _dominant((curve or {}).get("accuracy")), _num(r.get("p_phase")), _num(r.get("p_periodic")),
               summary.get("verdict") or "-")


def smollm2_row(r: dict, source: str) -> Row:
    layers = ",".join(map(str, (r.get("spec") or {}).get("layers") or [])) or "all"
    return Row(source, f"{r['setting']} [layers {layers}]", "induction", None, r.get("stride"), None, _num(r["mean"]),
               _num(r.get("worst")), _num(r.get("gap_pp")), _pair(r.get("gap_ci_pp")), r.get("dominant_period"),
               _num(r.get("p_phase")), _num(r.get("p_periodic")), r.get("verdict") or "-")


def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def num(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def interval(pair, digits: int = 1) -> str:
    return "-" if pair is None else f"[{pair[0]:.{digits}f}, {pair[1]:.{digits}f}]"


def p(x: float | None) -> str:
    return "-" if x is None else f"{x:.4f}"


def spread(values: list[float], digits: int = 1) -> str:
    """Median (min to max), the across-seed summary."""
    if not values:
        return "-"
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f} to {max(values):.{digits}f})"


def table(header: list[str], rows: list[list]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return out + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]


def evidence_table(rows: list[Row]) -> list[str]:
    """The rows behind a claim, with both tests side by side; corrected rows add their adjusted p-values
    (the correction named in the column) and the verdict after correction."""
    if not rows:
        return []
    methods = sorted({r.correction for r in rows if r.correction})
    names = "/".join("BH" if m == "bh" else "Holm" for m in methods)
    corrected = [f"p (phase) adjusted ({names})", f"p (period S) adjusted ({names})", "after correction"] if methods else []
    return table(["file", "run", "protocol", "seed", "S", "learned", "mean %", "worst %", "held-out gap pp",
                  "gap interval", "dominant period (spectral)", "p (phase)", "p (period S)", "permutation verdict",
                  *corrected],
                 [[r.source, r.run, r.protocol, "-" if r.seed is None else r.seed, r.S or "-",
                   "-" if r.learned is None else ("yes" if r.learned else "no"), pct(r.mean), pct(r.worst),
                   num(r.gap_pp), interval(r.gap_ci), r.dominant or "none", p(r.p_phase), p(r.p_periodic), r.verdict,
                   *([p(r.p_phase_adj), p(r.p_periodic_adj), r.corrected_verdict] if methods else [])]
                  for r in rows])
