"""The claims' rules (docs/statistics.md, "Claims: seeds and multiplicity"): Holm and Benjamini-Hochberg against hand
computations, the seed rule on constructed rows, and claims 1 and 2's counts recomputed from the table rows by code
that shares nothing with `phaseinterp.report` but the library's measurements."""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import false_discovery_control

from phaseinterp.measure import bh_adjust, dominant_period, holm_adjust, period_component, unpack_correct
from phaseinterp.measure.pvalues import adjust
from experiments.claims import claim_checks, claims
from experiments.claims.claim_rows import Row
from experiments.claims.claim_units import SeedUnit, correct, floor_note, seed_units

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def data():
    return claims.load_inputs(ROOT / "assets")


def test_holm_and_bh_match_a_hand_computation():
    p = np.array([0.001, 0.039, 0.012, 0.029, 0.5])
    # Holm: sorted 0.001, 0.012, 0.029, 0.039, 0.5 times 5, 4, 3, 2, 1 = 0.005, 0.048, 0.087, 0.078, 0.5; running max
    assert holm_adjust(p).tolist() == pytest.approx([0.005, 0.087, 0.048, 0.087, 0.5])
    # BH: p_(k) m / k = 0.005, 0.03, 0.04833, 0.04875, 0.5; running min from the top
    assert bh_adjust(p).tolist() == pytest.approx([0.005, 0.04875, 0.03, 0.029 * 5 / 3, 0.5])
    assert adjust(list(p) + [None], "bh")[:5].tolist() == pytest.approx(false_discovery_control(p).tolist())
    assert np.isnan(adjust([0.01, None], "holm")[1]) and adjust([0.01, None], "holm")[0] == pytest.approx(0.01)
    # at alpha = 0.05 Holm rejects 0.001 and 0.012 only; BH rejects four
    assert (holm_adjust(p) <= 0.05).sum() == 2 and (bh_adjust(p) <= 0.05).sum() == 4
    assert holm_adjust(np.array([0.2, 0.9, 0.05])).tolist() == pytest.approx([0.4, 0.9, 0.15])  # capped, monotone
    with pytest.raises(ValueError, match="method='bonferroni'"):
        adjust([0.1], "bonferroni")


def test_the_permutation_floor_is_said_where_it_limits_holm():
    assert "so Holm could reject nothing here" in floor_note(120, 2000, "bh")  # 0.05/120 < 1/2001
    assert "lies above it" in floor_note(94, 2000, "bh") and "from k = 1 on" in floor_note(94, 2000, "bh")
    assert "so the floor does not limit the correction" in floor_note(16, 2000, "holm")
    assert "so no curve can pass" in floor_note(200, 2000, "holm")


def _row(run, protocol, *, learned=True, p_phase=0.0005, p_periodic=0.5, dominant=8, S=8, worst=0.1):
    return Row("t.json", run, protocol, 0, S, learned, 0.5, worst, 50.0, (40.0, 60.0), dominant, p_phase, p_periodic,
               "-")


def _unit(*rows) -> SeedUnit:
    correct(list(rows), "bh")
    return seed_units(list(rows))[0]


def test_the_seed_rule_combines_protocols():
    assert _unit(_row("a", "prefix"), _row("a", "insequence")).shows_period
    # exact periodicity rejected in one protocol, not in the other: still a period-S effect
    u = _unit(_row("a", "prefix", p_periodic=0.001), _row("a", "insequence"))
    assert u.shows_period and [r.protocol for r in u.rejected] == ["prefix"]
    # rejected wherever there is a phase effect
    u = _unit(_row("a", "prefix", p_periodic=0.001), _row("a", "insequence", p_periodic=0.002))
    assert not u.shows_period and "period S rejected in every protocol" in u.why_not()
    # a protocol with a phase effect whose dominant period is a divisor of S (or none) fails the seed
    u = _unit(_row("a", "prefix"), _row("a", "insequence", dominant=4))
    assert not u.shows_period and u.why_not() == "insequence: dominant period 4"
    # a protocol without a phase effect, or one that did not learn, does not count against the seed
    assert _unit(_row("a", "prefix"), _row("a", "insequence", p_phase=0.6, dominant=None)).shows_period
    assert _unit(_row("a", "prefix"), _row("a", "insequence", learned=False, dominant=None)).shows_period
    # no phase effect anywhere: at ceiling it cannot show one (not counted); below ceiling it fails
    flat = _unit(_row("a", "prefix", p_phase=0.9, worst=1.0), _row("a", "insequence", p_phase=0.9, worst=0.995))
    assert flat.at_ceiling and not flat.shows_period
    low = _unit(_row("a", "prefix", p_phase=0.9), _row("a", "insequence", p_phase=0.9))
    assert not low.at_ceiling and low.why_not().startswith("no phase effect after correction")


def test_correction_decides_the_phase_effect_across_the_family():
    # 20 curves: one at p = 0.01 alone does not survive BH across 20 (0.01 x 20 = 0.2), ten at 0.001 do
    rows = [_row(f"r{i}", "prefix", p_phase=0.001) for i in range(10)] + [_row("x", "prefix", p_phase=0.01)]
    rows += [_row(f"n{i}", "prefix", p_phase=0.5) for i in range(9)]
    fam = correct(rows, "bh")
    assert (fam.m_phase, fam.n_phase, fam.n_phase_raw) == (20, 11, 11)  # BH: 0.01 x 20 / 11 = 0.018 passes
    fam = correct(rows, "holm")
    assert (fam.m_phase, fam.n_phase) == (20, 10)  # Holm: 0.01 x 10 = 0.1 does not
    assert not next(r for r in rows if r.run == "x").phase_effect
    assert rows[0].corrected_verdict == "phase effect, period S not rejected"


def _dominant(r: dict):
    return r["dominant_period"] if "dominant_period" in r else dominant_period(np.asarray(r["accuracy"], dtype=float))


def independent_seed_count(data: dict) -> tuple[int, int, list[str]]:
    """Claim 1 from the raw tables: (learned seeds counted, seeds showing a period-S effect, zoo seeds failing).
    BH via scipy directly; no code from phaseinterp.report."""
    curves = []
    for key in ("zoo", "zoo_seeds", "variants", "rule_sweep"):
        for r in (data.get(key) or {"rows": []})["rows"]:
            if r.get("S") and not r["member"].startswith("full"):
                curves.append({"run": r["model"], "learned": r["learned"], "worst": r["worst"], "p": r["p_phase"],
                               "pp": r["p_periodic"], "dom": _dominant(r), "S": r["S"]})
    for protocol in ("prefix", "insequence"):
        d = data[protocol]
        for r in d["summary"]:
            if r["model"] != "full" and r.get("P"):
                curves.append({"run": r["model"], "learned": r["best"] >= 0.8, "worst": r["worst"], "p": r["p_phase"],
                               "pp": r.get("p_periodic"), "S": r["P"],
                               "dom": dominant_period(np.asarray(d["curves"][r["model"]]["accuracy"], dtype=float))})
    family = [c for c in curves if c["learned"]]
    for c, a in zip(family, false_discovery_control([c["p"] for c in family])):
        c["effect"] = a <= 0.05
    periodic = [c for c in family if c["effect"] and c["pp"] is not None]
    for c, a in zip(periodic, false_discovery_control([c["pp"] for c in periodic])):
        c["kept"] = a > 0.05
    seeds = defaultdict(list)
    for c in family:
        seeds[c["run"]].append(c)
    counted, passing, failing = 0, 0, []
    for run, cs in seeds.items():
        effects = [c for c in cs if c["effect"]]
        if not effects and all(c["worst"] >= 0.99 for c in cs):
            continue  # at ceiling: cannot show it
        counted += 1
        if effects and all(c["dom"] == c["S"] for c in effects) and any(c.get("kept") for c in effects):
            passing += 1
        elif run.startswith("zoo-"):
            failing.append(run)
    return counted, passing, failing


def test_claim1_counts_recomputed_from_the_rows(data):
    n, passing, failing = independent_seed_count(data)
    c = claim_checks.claim1(data)
    assert c.count == f"{passing} of {n} seeds" and n > passing > n / 2
    assert sorted(e.split(":")[0] for e in c.exceptions if e.startswith("zoo-")) == sorted(failing)


def test_claim2_counts_recomputed_from_the_rows(data):
    rows = data["control"]["rows"]
    x = {id(r): unpack_correct(r["correct"]["bits"], r["correct"]["examples"]) for r in rows}
    amps = defaultdict(list)
    for r in rows:
        if not r["member"].startswith("full") and r["learned"]:
            amps[r["model"]].append(period_component(x[id(r)], r["S"]).amplitude_pp)
    margin = 0.25 * statistics.median(statistics.mean(a) for a in amps.values())
    period = {r["S"] for r in rows if r["S"]}.pop()
    full = defaultdict(list)
    for r in rows:
        if r["member"].startswith("full") and r["learned"]:
            full[r["model"]].append(period_component(x[id(r)], period).upper_pp < margin and 0.5 <= r["mean"] <= 0.9)
    c = claim_checks.claim2(data)
    assert c.count == f"{sum(all(v) for v in full.values())} of {len(full)} seeds"
    assert any(f"= {margin:.2f} pp" in f for f in c.findings)
    assert c.verdict == ("holds" if all(all(v) for v in full.values()) else "does not hold")


def _prose_unit(setting: str, accuracy: list[float], p: float, anchor: str = "value", n: int = 8,
                moved: bool = True) -> dict:
    """Its rows: 8 examples, each right at residue 1 only (a test that could reach p < 0.05), or (`moved=False`)
    examples 0-3 right at both residues and 4-7 wrong at both (the phase changed no answer: no test possible)."""
    correct = [False, True] * 8 if moved else [e < 4 for e in range(8) for _ in (0, 1)]
    curve = {"accuracy": accuracy, "modulus": 2, "residue": [0, 1] * 8, "correct": correct,
             "example_id": [e for e in range(8) for _ in (0, 1)], "n_perm": 1000, "seed": 0}
    return {"model": "m", "length": 1024, "anchor": anchor, "setting": setting, "layers": "5", "n_per_residue": n,
            "modulus": 2, "seed": 0, "task": {"n_depths": 8}, "curve": curve,
            "summary": {"p_value": p, "p_periodic": None, "period": 8, "worst_residue": int(np.argmin(accuracy))}}


def test_prose_finding_counts_keeping_pooling_and_question_units_after_holm():
    from experiments.claims.claim_prose import prose

    units = [_prose_unit("evict-W8S8", [0.1, 0.9], 0.001), _prose_unit("mean-W8S8", [0.3, 0.4], 0.5),
             _prose_unit("mean-W8S8", [0.3, 0.4], 0.5, anchor="question"), _prose_unit("none", [1.0, 1.0], 1.0),
             _prose_unit("token-S8k1-static", [0.0, 0.0], 1.0)]
    data = {"prose_niah": units, "_paths": {"prose_niah": "prose_niah/"}}
    c = prose(data)
    assert (c.verdict, c.exceptions) == ("holds", []) and "Holm across 3 units" in c.tests  # floor and 'none' set aside
    assert c.count.startswith("1 of 1 keeping units with weak phases; 0 of 1 pooling units; 0 of 0 token-selection "
                              "units; 0 of 1 question")
    data["prose_niah"] = units + [_prose_unit("evict-W8S8", [0.5, 0.5], 1.0, anchor="question", moved=False)]
    c = prose(data)  # a question unit where no answer changed: out of the Holm family, counted apart
    assert "Holm across 3 units" in c.tests and c.count.endswith("(in 1 more, the question's phase changed no answer)")
    # Holm over 4: 0.001 x 4 passes, 0.03 (third smallest) x 2 = 0.06 does not; a weak pooling unit is an exception
    data["prose_niah"] = [units[0], units[1], _prose_unit("evict0-W8S8", [0.1, 0.9], 0.03),
                          _prose_unit("score-W8S8", [0.0, 1.0], 0.001)]
    c = prose(data)
    assert c.verdict == "holds with exceptions" and len(c.exceptions) == 2
    assert any("evict0-W8S8" in e and "no phase effect detected" in e for e in c.exceptions)
    # token selection is the chunk press's control: flat is what it predicts, weak phases are an exception
    data["prose_niah"] = [units[0], _prose_unit("token-S8k2-static", [0.4, 0.5], 0.6)]
    c = prose(data)
    assert (c.verdict, c.exceptions) == ("holds", []) and "0 of 1 token-selection units" in c.count
    data["prose_niah"] = [units[0], _prose_unit("token-S8k2-static", [0.1, 0.9], 0.001)]
    assert [e.split(":")[0] for e in prose(data).exceptions] == ["m T1024 value token-S8k2-static L5 n8"]
    assert prose({"prose_niah": None, "_paths": {}}).verdict == claim_checks.NO_FILE
