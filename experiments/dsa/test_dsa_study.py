"""The DSA study (experiments/dsa) in quick mode, and the shipped result against its inputs."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from experiments.dsa import study
from experiments.dsa.train import RUNS, main as train_main

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "assets" / "checkpoints" / "dsa"
RESULT = ROOT / "assets" / "results" / "dsa.json"


def test_the_queue_trains_and_ships_and_the_study_measures_it(tmp_path, capsys):
    argv = ["--names", "hf-deepseek-v32", "--steps", "2", "--eval-examples", "1", "--runs", str(tmp_path / "runs"),
            "--ship", str(tmp_path / "dsa")]
    assert train_main(argv) == 0
    card = json.loads((tmp_path / "dsa" / "hf-deepseek-v32.json").read_text())
    assert card["steps"] == 2 and card["model_config"]["hf_config"]["index_topk"] == 16
    assert train_main(argv) == 0 and "hf-deepseek-v32: shipped, skipped" in capsys.readouterr().out
    docs = tmp_path / "dsa.md"
    docs.write_text(f"intro\n{study.BEGIN}\nold\n{study.END}\n")
    out = tmp_path / "out"
    assert study.main(["--checkpoints", str(tmp_path / "dsa"), "--out", str(out), "--n-per-residue", "2",
                       "--n-boot", "10", "--n-perm", "10"]) == 0
    data = json.loads((out / "dsa.json").read_text())
    (r,) = data["results"]
    assert r["seed"] == 0 and set(r["curves"]) == {"prefix", "insequence"} and len(r["curves"]["prefix"]["rate"]) == 8
    assert [s["layer"] for s in r["selection"]] == [0, 1] and r["curves"]["prefix"]["rows"] == 16
    assert set(r["knockouts"]) == {"value token replaced", "indexer knocked out (16 most recent)"}
    # a selection rate by source position near index_topk / visible tokens (16 of ~50): the read is not empty
    rate = r["selection"][0]["by_source_position"]["mean"]
    assert 0.1 < rate < 0.7
    text = (out / "dsa.md").read_text()
    assert f"--checkpoints {tmp_path / 'dsa'}" in text and "## Answer" in text
    assert "did not learn" in text  # 2 steps: reported, not dropped
    page = study.render_docs(docs.read_text(), data)
    assert page.startswith("intro\n") and study.answer(data) in page and "old" not in page
    changed = copy.deepcopy(data)
    changed["results"][0]["curves"]["prefix"]["p_phase"] = 0.0001
    assert study.answer(changed) != study.answer(data)


def test_the_shipped_result_matches_its_inputs():
    data = json.loads(RESULT.read_text())
    cards = sorted(p.stem for p in SHIPPED.glob("*.json"))
    assert sorted(r["model"] for r in data["results"]) == cards == sorted(RUNS), \
        "assets/results/dsa.json does not cover the shipped DSA checkpoints: python -m experiments.dsa.study"
    changed = [r["model"] for r in data["results"] if study.sha256(ROOT / r["checkpoint"]) != r["sha256"]]
    assert not changed, f"checkpoints changed since dsa.json was written: {changed}; python -m experiments.dsa.study"
    assert (ROOT / "assets" / "results" / "dsa.md").read_text() == study.markdown(data), \
        "dsa.md is stale: python -m experiments.dsa.study --render-only"
    page = (ROOT / "docs" / "dsa.md").read_text()
    assert page == study.render_docs(page, data), "docs/dsa.md's numbers are stale: --render-only"
