"""Finding B8: the classic needle test in real prose on real pretrained models (`experiments/prose_niah`).

Reads the study's unit files (`results/prose_niah/MODEL/T*.json`) and judges them with the study's own
reading (`experiments.prose_niah.render.verdicts`: Holm across the units that can show an effect, a
setting's largest unit only), so this verdict and docs/prose_niah.md cannot disagree.
"""

from __future__ import annotations

from typing import Any

from experiments.claims.claim_checks import Claim
from experiments.claims.claim_units import n_of
from experiments.prose_niah.render import candidates, holm_pool, informative, key, regime_state, verdicts
from experiments.prose_niah.rescue import gain, moved_residues

#: rules that keep some positions of a fixed grid and drop the rest (eviction, chunk selection), by setting prefix
KEEPERS = ("evict", "chunk")
#: token-level selection: the chunk press's control, which keeps any tokens (no grid)
CONTROLS = ("token",)


def rule_of(setting: str) -> str:
    """The rule of a setting name, without offsets or geometry.

    Example:
        >>> rule_of("evict0-W8S8"), rule_of("chunk-S8k1-static"), rule_of("token-S8k2-static")
        ('evict', 'chunk', 'token')
    """
    return setting.split("-")[0].rstrip("0123456789")


def keeps(setting: str) -> bool:
    """Whether a setting keeps positions of a fixed grid and drops the rest (eviction or chunk selection).

    Example:
        >>> keeps("evict0-W8S8"), keeps("chunk-S8k1-static"), keeps("mean-W16S8"), keeps("token-S8k1-static")
        (True, True, False, False)
    """
    return rule_of(setting) in KEEPERS


def prose(data: dict) -> Claim:
    c = Claim("B8", "Real needles in real prose",
              "On the classic needle test (Paul Graham essays) with training-free compression of pretrained "
              "SmolLM2-135M and Gemma 3 270M, rules that keep some entries and drop the rest (eviction, static chunk "
              "selection) give weak phases of the needle; mean and score pooling do not, nor token-level selection (the "
              "chunk press's control), nor the question's phase (decode time).",
              "one unit per setting (model, length, anchor, rule, layers), its largest prompt set; units at floor or "
              "ceiling at every residue, or whose outcomes could not reach p < 0.05 however they fell across residues "
              "(Tarone's rule), cannot fail and are set aside. Each unit's permutation test of no phase effect, "
              "Holm-corrected across all the testable units (docs/prose_niah.md). Holds when every keeping unit at "
              "the needle's phase shows weak phases and no pooling, token-selection or question-phase unit does; each unit "
              "against that is an exception")
    units: list[dict[str, Any]] | None = data.get("prose_niah")
    if not units:
        return c
    c.sources = [data["_paths"]["prose_niah"]]
    said, pool = verdicts(units), holm_pool(units)

    def weak(u: dict[str, Any]) -> bool:
        return said[key(u)].startswith("weak")

    keeping = [u for u in pool if u["anchor"] == "value" and keeps(u["setting"])]
    pooling = [u for u in pool if u["anchor"] == "value" and not keeps(u["setting"]) and rule_of(u["setting"]) not in CONTROLS]
    tokens = [u for u in pool if u["anchor"] == "value" and rule_of(u["setting"]) in CONTROLS]
    decode = [u for u in pool if u["anchor"] != "value"]
    set_aside = [u for u in candidates(units) if u not in pool]  # no power (Tarone)
    unmoved = [u for u in set_aside if u["anchor"] != "value" and informative(u)[0] == 0]
    c.count = (f"{n_of(sum(map(weak, keeping)), len(keeping), 'keeping units')} with weak phases; "
               f"{n_of(sum(map(weak, pooling)), len(pooling), 'pooling units')}; "
               f"{n_of(sum(map(weak, tokens)), len(tokens), 'token-selection units')}; "
               f"{n_of(sum(map(weak, decode)), len(decode), 'question-phase units')}"
               + (f" (in {len(unmoved)} more, the question's phase changed no answer)" if unmoved else ""))
    c.exceptions = ([f"{key(u)}: {said[key(u)]}" for u in keeping if not weak(u)]
                    + [f"{key(u)}: {said[key(u)]}" for u in pooling + tokens + decode if weak(u)])
    c.tests = f"permutation test of no phase effect per unit, Holm across {len(pool)} units"
    bounded = [u for u in units if u["setting"] != "none" and regime_state(u) is not None]
    c.findings += [f"{key(u)}: {said[key(u)]}." for u in pool]
    c.findings.append(f"Set aside: {len(bounded)} compressed unit(s) at floor or ceiling at every residue ("
                      + (", ".join(f"{key(u)}: {regime_state(u)}" for u in bounded) or "none") + "); "
                      f"{len(set_aside)} without power (" + ("; ".join(f"{key(u)}: {said[key(u)]}" for u in set_aside)
                                                             or "none") + ").")
    c.findings += [rescue_finding(r) for r in data.get("prose_rescue", [])]
    c.seeds.append("pretrained models (no training seeds); prompts resampled by cluster bootstrap within a unit")
    c.verdict = ("holds" if keeping and all(map(weak, keeping)) and not c.exceptions else
                 "holds with exceptions" if any(map(weak, keeping)) else "does not hold")
    return c


def rescue_finding(r: dict[str, Any]) -> str:
    """One rescue file as a finding: the gain of keeping each named needle token where evict keeps another."""
    parts = []
    for s in r["shifts"]:
        g, lo, hi = gain(r["rows"], s, moved_residues(r, s))
        parts.append(f"keeping the token at offset {s} from the value's first, {g:+.1f} pp [{lo:+.1f}, {hi:+.1f}]")
    return (f"Rescue ({r['model']} T{r['length']} {r['setting']} L{r['layers']} n{r['n_per_residue']}; every compressed "
            f"layer keeps one chosen needle token in its window, same budget): " + "; ".join(parts) + ".")
