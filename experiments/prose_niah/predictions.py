"""The predictions the study stated before its units ran (experiments/prose_niah/run.py's docstring), as data,
each judged against its unit's result file, so the page says which held.

A prediction of weak or strong residues needs the unit's Holm reading to be "weak phases"; a prediction of
no effect needs "no phase effect detected". A unit its reading sets aside (floor, ceiling, no power) cannot
tell, and one not run yet is named as such: neither counts as held.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatch
from typing import Any, Callable

import numpy as np

from experiments.prose_niah.survivors import gap_above_zero

#: (accuracy by residue, the unit's Holm reading, the unit's file) -> held
Check = Callable[[np.ndarray, str, dict[str, Any]], bool]


def strong_at(residues: tuple[int, ...]) -> Check:
    """Weak phases, and every residue in `residues` above every other residue.

    Example:
        >>> strong_at((3, 4))(np.array([0, 0, 0, .9, .8, 0, 0, .1]), "weak phases: worst r = 0", {})
        True
    """
    def check(acc: np.ndarray, said: str, unit: dict[str, Any]) -> bool:
        others = [a for r, a in enumerate(acc) if r not in residues]
        return said.startswith("weak") and bool(min(acc[list(residues)]) > max(others))

    return check


def flat(acc: np.ndarray, said: str, unit: dict[str, Any]) -> bool:
    """No phase effect detected after Holm."""
    return said.startswith("no phase effect detected")


def weak(acc: np.ndarray, said: str, unit: dict[str, Any]) -> bool:
    """Weak phases after Holm (no prediction of which residues)."""
    return said.startswith("weak")


@dataclass(frozen=True)
class Prediction:
    """One stated prediction: the unit it concerns (`setting` a glob, since a press's budget is chosen by a scan;
    `unless` a setting the glob must not match)."""

    model: str
    anchor: str
    setting: str
    n: int
    said: str
    check: Check
    length: int = 1024
    unless: str = ""

    def concerns(self, u: dict[str, Any]) -> bool:
        return ((u["model"], u["anchor"], u["n_per_residue"], u["length"]) == (self.model, self.anchor, self.n, self.length)
                and fnmatch(u["setting"], self.setting) and u["setting"] != self.unless)


PREDICTIONS = (
    Prediction("smollm2", "value", "evict0-W8S8", 32, "the strongest residue moves from 7 to 0 (the kept offset)",
               strong_at((0,))),
    Prediction("smollm2", "value", "chunk-S8k1-static", 32, "weak at residues 0-2 and 5-7, strong at 3-4 (as at n8)",
               strong_at((3, 4))),
    Prediction("gemma3-270m", "value", "chunk-S8k1-static", 32, "weak at residues 0-2 and 5-7, strong at 3-4 (as at n8)",
               strong_at((3, 4))),
    Prediction("smollm2", "value", "evict-W8S8", 2, "the strong residue stays at 7 at 4,096 tokens", strong_at((7,)),
               length=4096),
    Prediction("smollm2", "question", "evict-W8S8", 32, "no effect of the question's phase", flat),
    Prediction("smollm2", "value", "score-W8S8", 32, "no phase effect (as at n8)", flat),
    Prediction("smollm2", "value", "mean-W16S8", 32, "no phase effect (as at n8)", flat),
    Prediction("gemma3-270m", "value", "mean-W8S8", 32, "no phase effect", flat),
    Prediction("gemma3-270m", "value", "mean-W16S8", 32, "no phase effect", flat),
    Prediction("gemma3-270m", "question", "mean-W8S8", 32, "no effect of the question's phase", flat),
    Prediction("smollm2", "question", "mean-W8S8", 32, "no effect of the question's phase", flat),
    Prediction("smollm2", "value", "evict-W8S8", 8, "the strong residue stays at 7 at 4,096 tokens", strong_at((7,)),
               length=4096),
    Prediction("gemma3-270m", "value", "evict-W8S8", 4, "weak phases at 4,096 tokens, as at 1,024",
               weak, length=4096),
    Prediction("smollm2", "value", "chunk-S8k2-static", 8, "strong at residues 0-4, weak at 5-7, as at 1,024 tokens",
               strong_at((0, 1, 2, 3, 4)), length=4096),
    Prediction("smollm2", "value", "evict-W8S8", 32, "the strong residue stays at 7 at 4,096 tokens (as at n8)",
               strong_at((7,)), length=4096),
    Prediction("smollm2", "value", "chunk-S8k2-static", 32, "strong at residues 0-4, weak at 5-7 at 4,096 tokens (as at n8)",
               strong_at((0, 1, 2, 3, 4)), length=4096),
    Prediction("gemma3-270m", "value", "evict-W8S8", 32, "weak phases at 4,096 tokens, as at 1,024 (as for n4)",
               weak, length=4096),
    Prediction("smollm2", "value", "evict0-W8S8", 8, "strongest at residue 0 (the kept offset) at 4,096 tokens, as at 1,024",
               strong_at((0,)), length=4096),
    Prediction("smollm2", "value", "score-W8S8", 8, "weak phases at 4,096 tokens, as at 1,024",
               weak, length=4096),
    Prediction("smollm2", "value", "evict0-W8S8", 32, "strongest at residue 0 (the kept offset) at 4,096 tokens (as for n8)",
               strong_at((0,)), length=4096),
    Prediction("smollm2", "question", "evict-W8S8", 32, "no effect of the question's phase at 4,096 tokens, as at 1,024",
               flat, length=4096),
    Prediction("smollm2", "value", "evict0-W8S8", 32, "residues 0, 5, 6 and 7 (a value digit survives) score above "
               "the other four: survivor gap interval above 0", gap_above_zero(4), length=4096),
    Prediction("smollm2", "value", "score-W8S8", 32, "weak phases at 4,096 tokens, as at 1,024 (as for n8)", weak,
               length=4096),
    Prediction("gemma3-270m", "value", "mean-W8S8", 32, "no phase effect at 4,096 tokens, as at 1,024", flat,
               length=4096),
    Prediction("smollm2", "value", "token-S8k*-static", 32, "no phase effect (token selection: no grid)", flat),
    Prediction("gemma3-270m", "value", "token-S8k*-static", 32, "no phase effect (token selection: no grid)", flat),
    *(Prediction(model, "value", "chunk-S8k*-static", 32, "weak phases at the token press's budget",
                 weak, unless="chunk-S8k1-static") for model in ("smollm2", "gemma3-270m")),
)


def judged(rows: list[dict[str, Any]], said: dict[str, str], key: Callable[[dict[str, Any]], str]
           ) -> list[tuple[Prediction, dict[str, Any] | None, str]]:
    """(prediction, its unit or None, outcome: "held", "did not hold" or "cannot tell: ...")."""
    out = []
    for p in PREDICTIONS:
        mine = [u for u in rows if p.concerns(u)]
        if not mine:
            out.append((p, None, "cannot tell: not run yet"))
        for u in mine:
            reading = said[key(u)]
            acc = np.array([np.nan if a is None else a for a in u["curve"]["accuracy"]], dtype=float)
            if not reading.startswith(("weak", "no phase effect detected")):
                outcome = f"cannot tell: {reading}"
            else:
                outcome = "held" if p.check(acc, reading, u) else "did not hold"
            out.append((p, u, outcome))
    return out


def prediction_lines(rows: list[dict[str, Any]], said: dict[str, str], key: Callable[[dict[str, Any]], str]) -> list[str]:
    """The page's table of stated predictions and what each unit showed."""
    found = judged(rows, said, key)
    held = sum(outcome == "held" for _, _, outcome in found)
    told = sum(outcome in ("held", "did not hold") for _, _, outcome in found)
    out = [f"**Predictions stated before the runs** (`experiments/prose_niah/run.py`; judged by "
           f"`experiments/prose_niah/predictions.py`): {held} of {told} that a unit could judge held.", "",
           "| unit | predicted | accuracy by residue | reading | outcome |", "|---|---|---|---|---|"]
    for p, u, outcome in found:
        acc = " ".join("-" if a is None else f"{a:.2f}" for a in u["curve"]["accuracy"]) if u else "-"
        unit = key(u) if u else f"{p.model} T{p.length} {p.anchor} {p.setting} n{p.n}"
        out.append(f"| {unit} | {p.said} | {acc} | {said[key(u)] if u else '-'} | {outcome} |")
    return out + [""]
