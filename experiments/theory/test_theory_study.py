"""The theory study writes the fields the claims page reads, and rejects too few seeds."""

import json

import pytest

from experiments.theory import run


def test_theory_study_writes_what_the_claims_read(tmp_path, monkeypatch):
    from phaseinterp.theory import FlowConfig

    monkeypatch.setattr("phaseinterp.theory.FlowConfig", lambda: FlowConfig(n_steps=20, n_eval_contexts=8))
    out = tmp_path / "theory.json"
    assert run.main(["--seeds", "2", "--sweep-seeds", "2", "--betas", "2", "7", "--out", str(out)]) == 0
    d = json.loads(out.read_text())
    assert len(d["seeds"]) == 2 and {"all_onehot", "all_static", "coverage"} <= set(d["seeds"][0])
    assert [r["beta"] for r in d["sweep"]] == [2.0, 7.0] and 0 <= d["sweep"][0]["random"] <= 1
    assert d["settings"]["flow_config"]["n_steps"] == 20


def test_too_few_seeds_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="--seeds=1 is invalid"):
        run.main(["--seeds", "1", "--out", str(tmp_path / "t.json")])
