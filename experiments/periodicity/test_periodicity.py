"""The periodicity tables (experiments/periodicity) in quick mode, on the shipped W4/S4 and full models."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.periodicity.table import main, run

CHECKPOINTS = Path(__file__).resolve().parents[2] / "assets" / "checkpoints"
QUICK = ["--n-per-residue", "2", "--n-boot", "20", "--n-perm", "20"]


def test_one_protocol_writes_the_table_its_data_and_the_overlay(tmp_path):
    table = run(CHECKPOINTS, tmp_path, n_per_residue=2, n_boot=20, n_perm=20, names=["w4s4", "full"])
    assert table["model"].tolist() == ["full", "w4s4"] and table["P"].tolist() == [4, 4]
    assert table["architecture"].tolist() == ["full attention", "W4/S4 scalar"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["overlay.html", "periodicity.csv", "periodicity.json",
                                                          "periodicity.md"]
    data = json.loads((tmp_path / "periodicity.json").read_text())
    assert data["protocol"]["modulus"] == 8 and len(data["curves"]["w4s4"]["accuracy"]) == 8
    with pytest.raises(ValueError, match="no checkpoint cards"):
        run(CHECKPOINTS, tmp_path / "none", n_per_residue=2, names=["no-such-model"])


def test_the_command_runs_both_protocols_and_names_itself(tmp_path):
    assert main(["--checkpoints", str(CHECKPOINTS), "--out", str(tmp_path), "--names", "w4s4", *QUICK]) == 0
    text = (tmp_path / "periodicity.md").read_text()
    assert "Reproduce: `python -m experiments.periodicity.table`" in text
    assert "## prefix padding" in text and "## insequence padding" in text
    assert (tmp_path / "prefix" / "periodicity.json").is_file() and (tmp_path / "insequence" / "overlay.html").is_file()
