"""The self-calibration study (experiments/self_calibration) in quick mode on one shipped zoo model."""

from __future__ import annotations

import json
from pathlib import Path

from experiments.self_calibration.run import main

ZOO = Path(__file__).resolve().parents[2] / "assets" / "checkpoints" / "zoo"


def test_the_study_compares_both_maps_of_a_model(tmp_path, capsys):
    out = tmp_path / "self_calibration.json"
    assert main(["--models", "zoo-w4s4-s0", "--n-per-residue", "2", "--checkpoints", str(ZOO), "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    row = data["models"]["zoo-w4s4-s0"]
    assert data["command"] == "python -m experiments.self_calibration.run" and data["n_per_residue"] == 2
    assert row["modulus"] == 8 and row["cells"] == 2 * 8  # 2 layers x 1 KV head x 8 residues
    assert 0 <= row["mean_abs_pp"] <= row["max_abs_pp"] and 0 <= row["inside_interval"] <= 1
    assert "| zoo-w4s4-s0 |" in capsys.readouterr().out
