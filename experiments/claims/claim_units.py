"""What a claim counts and how it pools tests (docs/statistics.md, "Claims: seeds and multiplicity").

- The unit is a **seed**: one trained run of a member. Its curves (the prefix and in-sequence protocols) are
  combined by `SEED_RULE` into one verdict per seed (`SeedUnit.shows_period`); a re-evaluation of the same
  checkpoint on another task (the control's harder task) is separate evidence, labelled, never extra seeds.
- A verdict that pools p-values corrects them across the family it pools (`correct`): Benjamini-Hochberg
  (false discovery rate) or Holm (family-wise error rate), named with the family's size in the claim.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from phaseinterp.measure.pvalues import adjust
from experiments.claims.claim_rows import ALPHA, Row

#: How each correction is named on the page.
METHOD_NAMES = {"bh": "Benjamini-Hochberg (false discovery rate 0.05)", "holm": "Holm (family-wise error rate 0.05)"}

#: How a seed's protocols are combined: the rule every seed-level claim states.
SEED_RULE = ("the unit is a seed (one trained run of a member); it learned when its best residue reached 80% in "
             "some protocol, and its protocols that did (prefix, in-sequence) are its evidence. A learned seed shows "
             "a period-S effect when, after correction, at least one of those protocols has a phase effect, every "
             "protocol with a phase effect has dominant period S (spectral test), and the permutation test does "
             "not reject period S in at least one of them; a learned seed with no phase effect whose protocols are "
             "all at ceiling (worst residue >= 99%) cannot show one and is reported, not counted")


def member_of(run) -> str:
    """A row's member (its table's `member` field), else from a run name: zoo-w8s8-kv4-s1 -> w8s8-kv4."""
    if isinstance(run, Row):
        return run.member or member_of(run.run)
    return run.removeprefix("zoo-").rsplit("-s", 1)[0]


@dataclass
class Family:
    """One correction across the rows a claim pools: the phase test over all of them, then the period-S test
    over those with a phase effect after the first correction."""

    method: str
    m_phase: int
    n_phase: int
    n_phase_raw: int
    m_periodic: int
    n_reject: int
    n_reject_raw: int

    def text(self, what: str = "curves") -> str:
        return (f"{METHOD_NAMES[self.method]} across the {self.m_phase} {what}: {self.n_phase} have a phase effect "
                f"({self.n_phase_raw} at p < {ALPHA} uncorrected); across those {self.m_periodic} with a p (period S), "
                f"the permutation test rejects period S for {self.n_reject} ({self.n_reject_raw} uncorrected)")


def correct(rows: list[Row], method: str = "bh") -> Family:
    """Adjust the rows' p-values in place: p (phase) across every row (a row without one is outside the family
    and has no phase effect), then p (period S) across the rows with a phase effect after that correction."""
    family = [r for r in rows if r.p_phase is not None]
    for r in rows:
        r.correction, r.p_phase_adj, r.p_periodic_adj = method, None, None
    for r, a in zip(family, adjust([r.p_phase for r in family], method)):
        r.p_phase_adj = float(a)
    effect = [r for r in family if r.phase_effect]
    periodic = [r for r in effect if r.p_periodic is not None]
    for r, a in zip(periodic, adjust([r.p_periodic for r in periodic], method)):
        r.p_periodic_adj = float(a)
    return Family(method, len(family), len(effect), sum(r.p_phase < ALPHA for r in family), len(periodic),
                  sum(r.p_periodic_adj <= ALPHA for r in periodic), sum(r.p_periodic < ALPHA for r in periodic))


def floor_note(m: int, n_perm: int | None, method: str) -> str:
    """What the permutation p-values' floor, 1 / (n_perm + 1), does to a correction across m tests."""
    if not n_perm or not m:
        return ""
    floor = 1 / (n_perm + 1)
    first = ALPHA / m
    text = (f"Permutation p-values have a floor of 1/(n_perm + 1) = 1/{n_perm + 1} = {floor:.5f}; Holm's smallest "
            f"threshold, 0.05/{m} = {first:.5f}, lies {'below' if first < floor else 'above'} it")
    if method == "bh":
        need = math.ceil(floor * m / ALPHA)
        return text + ((", so Holm could reject nothing here" if first < floor else "")
                       + f"; Benjamini-Hochberg's threshold for the k smallest, k x 0.05/{m}, clears the floor from "
                       f"k = {need} on")
    return text + (", so no curve can pass" if first < floor else ", so the floor does not limit the correction")


@dataclass
class SeedUnit:
    """One seed's curves in a claim's pool (its protocols), judged together by `SEED_RULE`."""

    run: str
    member: str
    seed: int | None
    rows: list[Row]

    @property
    def learned(self) -> bool:
        return any(r.learned for r in self.rows)

    @property
    def evidence(self) -> list[Row]:
        """The protocols that reached 80% at some residue."""
        return [r for r in self.rows if r.learned]

    @property
    def effects(self) -> list[Row]:
        return [r for r in self.evidence if r.phase_effect]

    @property
    def at_ceiling(self) -> bool:
        """No phase effect, and every protocol at ceiling: the seed could not have shown one."""
        return bool(self.evidence) and not self.effects and all(r.at_ceiling for r in self.evidence)

    @property
    def spectral_ok(self) -> bool:
        return bool(self.effects) and all(r.spectral_ok for r in self.effects)

    @property
    def shows_period(self) -> bool:
        """`SEED_RULE`: a phase effect, dominant period S wherever there is one, period S not rejected in one."""
        return self.spectral_ok and any(r.permutation_ok for r in self.effects)

    @property
    def shows_period_strict(self) -> bool:
        """The stricter rule, reported beside `SEED_RULE`: every protocol with a phase effect passes both tests."""
        return bool(self.effects) and all(r.spectral_ok and r.permutation_ok for r in self.effects)

    @property
    def rejected(self) -> list[Row]:
        """Protocols with a phase effect whose permutation test rejects period S (after correction)."""
        return [r for r in self.effects if not r.permutation_ok]

    def why_not(self) -> str:
        """Why the seed does not show a period-S effect ("" when it does)."""
        if self.shows_period:
            return ""
        if not self.effects:
            return f"no phase effect after correction ({', '.join(r.protocol for r in self.evidence)})"
        parts = [f"{r.protocol}: dominant period {r.dominant or 'none'}" for r in self.effects if not r.spectral_ok]
        if not any(r.permutation_ok for r in self.effects):
            parts.append("period S rejected in every protocol with a phase effect ("
                         + ", ".join(f"{r.protocol} p adj {_p(r.p_periodic_adj)}" for r in self.effects) + ")")
        return "; ".join(parts)


def _p(x: float | None) -> str:
    return "-" if x is None else f"{x:.4f}"


def seed_units(rows: list[Row]) -> list[SeedUnit]:
    """The rows grouped by run (one seed each), in order of first appearance."""
    out: dict[str, SeedUnit] = {}
    for r in rows:
        if r.run not in out:
            out[r.run] = SeedUnit(r.run, member_of(r), r.seed, [])
        out[r.run].rows.append(r)
    return list(out.values())


def n_of(k: int, n: int, unit: str = "seeds") -> str:
    return f"{k} of {n} {unit}"


__all__ = ["Family", "METHOD_NAMES", "SEED_RULE", "SeedUnit", "correct", "floor_note", "member_of", "n_of",
           "seed_units"]
