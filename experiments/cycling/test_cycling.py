"""The cycling study (experiments/cycling): quick mode on one zoo run, the renderer on curves whose
answer is known, and the shipped result files against their inputs (stale files fail here)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from experiments.cycling.members import sha256, zoo_runs
from experiments.cycling.render import docs_page, markdown, run_summary, summary, untestable, verdict
from experiments.cycling.run import main
from phaseinterp.measure.provenance import jsonable

ROOT = Path(__file__).resolve().parents[2]
RESULT = ROOT / "assets" / "results" / "cycling.json"


@pytest.fixture(scope="module")
def shipped() -> dict:
    assert RESULT.is_file(), "assets/results/cycling.json is missing: run python -m experiments.cycling.run"
    return json.loads(RESULT.read_text())


def test_quick_run_cycles_one_run_in_every_scope_and_variant_and_keeps_it(tmp_path, monkeypatch):
    assert main(["--runs", "zoo-w2s2-s0", "--n-all", "2", "--n-layer", "2", "--n-boot", "20", "--out", str(tmp_path),
                 "--docs", "none"]) == 0
    data = json.loads((tmp_path / "cycling.json").read_text())
    (run,) = data["runs"]
    assert run["status"] == "cycled" and run["sha256"] == sha256(ROOT / run["checkpoint"])
    res = run["result"]
    assert res["stride"] == 2 and res["modulus"] == 8 and sorted(res["scopes"]) == ["all", "layer 0", "layer 1"]
    for scope in res["scopes"].values():
        for v in ("gates only", "with payload"):
            assert [d["delta"] for d in scope[v]["deltas"]] == [1] and len(scope[v]["baseline"]) == 8
    assert {s["branch"] for s in res["payload_similarity"]} == {"k", "v"}
    assert all(-1 <= s["cos_pairs"] <= 1 for s in res["payload_similarity"])
    assert (tmp_path / "cycling.md").read_text() == markdown(data)
    assert data["settings"]["n_per_residue_all_layers"] == 2 and "torch" in data["versions"]

    def no_cycling(*args, **kwargs):
        raise AssertionError("a kept record was cycled again")

    monkeypatch.setattr("experiments.cycling.measure.cycle_run", no_cycling)
    args = ["--runs", "zoo-w2s2-s0", "--n-all", "2", "--n-layer", "2", "--n-boot", "20", "--out", str(tmp_path), "--docs", "none"]
    assert main(args) == 0  # same settings, same weights: the record is kept
    assert json.loads((tmp_path / "cycling.json").read_text())["runs"] == data["runs"]
    with pytest.raises(AssertionError, match="cycled again"):
        main([*args, "--fresh"])
    with pytest.raises(AssertionError, match="cycled again"):
        main([*args[:-6], "--n-all", "3", *args[-4:]])  # other settings: nothing kept
    with pytest.raises(ValueError, match="no such zoo run"):
        main(["--runs", "zoo-nothing-s9", "--out", str(tmp_path), "--docs", "none"])


def _fake(baseline: list[float], cycled: list[list[float]], p_phase: float = 0.001) -> dict:
    record = {"baseline": baseline, "baseline_gap_pp": 100.0, "baseline_gap_ci_pp": [90.0, 100.0],
              "baseline_p_phase": p_phase,
              "deltas": [{"delta": d + 1, "r2": r2, "r2_all": r2, "boundary_predicted": [], "boundary_actual": [],
                          "cycled": c} for d, (c, r2) in enumerate(cycled)]}
    return {"stride": 4, "modulus": 4, "scopes": {"all": {"n_per_residue": 1, "gates only": record,
                                                          "with payload": record}}, "payload_similarity": []}


def test_a_moved_curve_holds_and_a_collapsed_one_fails():
    moved = _fake([1, 0, 0, 0], [([0, 1, 0, 0], 1.0), ([0, 0, 1, 0], 1.0), ([0, 0, 0, 0], None)])
    s = run_summary(moved, "all", "gates only")
    assert (s["median"], s["flat"], s["moves"], s["n"], s["holds"]) == (1.0, 1, 2, 3, True)
    collapsed = _fake([1, 0, 0, 0], [([0, 0, 0, 0], None), ([0, 0, 0, 0], None), ([1, 0, 0, 0], -2.0)])
    assert not run_summary(collapsed, "all", "gates only")["holds"]
    runs = [{"name": f"zoo-x-s{i}", "member": "x", "seed": i, "status": "cycled", "result": r}
            for i, r in enumerate([moved, collapsed])]
    assert "**does not hold across the zoo**" in verdict({"runs": runs}) and "1 of 2" in verdict({"runs": runs})
    assert "**holds**" in verdict({"runs": runs[:1]}) and "**fails**" in verdict({"runs": runs[1:]})
    flat = {"name": "zoo-x-s2", "member": "x", "seed": 2, "status": "cycled",
            "result": _fake([1, 1, 1, 1], [([0, 1, 0, 0], 1.0)], p_phase=0.9)}
    assert untestable(flat) == "no phase effect to move (baseline p = 0.90)"
    line = verdict({"runs": runs[1:] + [flat]})  # an untestable run counts neither way
    assert "0 of 1 testable" in line and "Untestable: 1 (x-s2)" in line


def test_the_shipped_markdown_and_docs_numbers_are_rendered_from_the_json(shipped):
    assert (ROOT / "assets" / "results" / "cycling.md").read_text() == markdown(shipped), \
        "cycling.md is stale: python -m experiments.cycling.run --render-only"
    page = (ROOT / "docs" / "cycling.md").read_text()
    assert page == docs_page(page, shipped), "docs/cycling.md's numbers are stale: python -m experiments.cycling.run --render-only"
    assert shipped["summary"] == jsonable(summary(shipped)), "cycling.json's summary is stale: --render-only"
    changed = copy.deepcopy(shipped)
    run = next(r for r in changed["runs"] if r["status"] == "cycled")
    run["result"]["scopes"]["all"]["gates only"]["deltas"][0]["r2"] = -5.0
    assert markdown(changed) != markdown(shipped) and summary(changed) != summary(shipped)


def test_the_shipped_result_matches_its_inputs(shipped):
    """Every cycled checkpoint has the recorded sha256, and the zoo tables still give every run the
    recorded status (a new learned seed, or a retrained run, makes the result stale)."""
    changed = [r["name"] for r in shipped["runs"] if "sha256" in r and sha256(ROOT / r["checkpoint"]) != r["sha256"]]
    assert not changed, f"checkpoints changed since cycling.json was written: {changed}; rerun python -m experiments.cycling.run"
    now = {r.name: r.status for r in zoo_runs(ROOT)}
    recorded = {r["name"]: r["status"] for r in shipped["runs"]}
    assert now == recorded, f"zoo runs or their status changed: {sorted(set(now.items()) ^ set(recorded.items()))}"
