"""The member table (experiments/zoo/members_table.py): seeds as the unit, built from zoo tables alone."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from experiments.zoo import members_table
from phaseinterp.measure import SeedRun, pack_correct
from phaseinterp.measure.seeds import seed_statistics

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("out", ["assets/results", "assets/results/control", "assets/results/variants"])
def test_the_shipped_member_table_is_fresh_against_the_zoo_tables(monkeypatch, capsys, out):
    path = ROOT / out / "zoo_members.json"
    if not path.is_file():
        pytest.skip(f"no member table shipped in {out}")
    shipped = json.loads(path.read_text())
    folders = [str(Path(s["path"]).parent) for s in shipped["sources"]]  # the folders it was built from
    assert {"assets/results", "assets/results/zoo-seeds"} <= set(folders) if out == "assets/results" else folders == [out]
    monkeypatch.chdir(ROOT)  # the table names its sources and command relative to the repository
    assert members_table.main([*folders, "--out", out, "--check"]) == 0, capsys.readouterr().err
    zoo = [r for f in folders for r in json.loads((ROOT / f / "zoo.json").read_text())["rows"]]
    for m in shipped["members"]:  # every (member, protocol) row of every table folder is counted once
        runs = [r for r in zoo if r["member"] == m["member"] and r["protocol"] == m["protocol"]]
        assert m["n_seeds"] == len(runs) and m["n_learned"] == sum(r["learned"] for r in runs)
    assert sum(m["n_seeds"] for m in shipped["members"]) == len(zoo)


def _row(model, protocol, x, learned):
    stats = seed_statistics(SeedRun(x, learned))
    member, seed = model.removeprefix("zoo-").rsplit("-s", 1)
    return {"model": model, "member": member, "seed": int(seed), "protocol": protocol, "modulus": x.shape[1],
            "architecture": "W4/S4 scalar", "S": 4, "kv_heads": 1, "learned": learned,
            **{k: stats[k] for k in ("mean", "worst", "gap_pp", "gap_heldout_pp")},
            "accuracy": x.mean(0).tolist(), "correct": {"examples": len(x), "bits": pack_correct(x)}}


def _tables(tmp_path, rng):
    """Two table folders: seeds 0, 1 of member a (both protocols) and seed 2 of a (prefix only)."""
    rates = {0: [0.9, 0.3, 0.9, 0.3], 1: [0.1, 0.1, 0.1, 0.1], 2: [0.95, 0.5, 0.95, 0.5]}
    folders = []
    for name, seeds in (("zoo", (0, 1)), ("more", (2,))):
        rows = [_row(f"zoo-a-s{s}", p, rng.random((64, 4)) < rates[s], learned=s != 1)
                for s in seeds for p in (("prefix", "insequence") if s < 2 else ("prefix",))]
        (tmp_path / name).mkdir()
        (tmp_path / name / "zoo.json").write_text(json.dumps({"rows": rows}))
        folders.append(tmp_path / name)
    return folders


def test_one_row_per_member_and_protocol_over_every_folder(tmp_path, monkeypatch, capsys):
    folders = _tables(tmp_path, np.random.default_rng(0))
    payload = members_table.build(folders, n_boot=100)
    (prefix, insequence) = payload["members"]
    assert (prefix["protocol"], prefix["seeds"], prefix["n_learned"]) == ("prefix", [0, 1, 2], 2)
    assert (insequence["protocol"], insequence["seeds"], insequence["n_learned"]) == ("insequence", [0, 1], 1)
    assert prefix["learned_any_protocol"] == {"learned": 2, "seeds": 3, "interval": prefix["learned_interval"]}
    assert prefix["spread"]["learned"]["n"] == 2 and prefix["curves"]["all"]["n_seeds"] == 3
    assert prefix["sources"] == sorted(f"{f.as_posix()}/zoo.json" for f in folders)
    monkeypatch.chdir(tmp_path)
    argv = ["zoo", "more", "--out", "out", "--n-boot", "100"]
    assert members_table.main(argv) == 0 and members_table.main([*argv, "--check"]) == 0
    md = (tmp_path / "out" / "zoo_members.md").read_text()
    assert "Reproduce: `python -m experiments.zoo.members_table zoo more --out out --n-boot 100`." in md
    assert "| a | W4/S4 scalar | prefix | 3 (0, 1, 2) | 2 of 3 [21, 94] |" in md
    table = json.loads((tmp_path / "zoo" / "zoo.json").read_text())
    table["rows"][0] = _row("zoo-a-s0", "prefix", np.random.default_rng(9).random((64, 4)) < 0.5, True)  # re-swept
    (tmp_path / "zoo" / "zoo.json").write_text(json.dumps(table))
    capsys.readouterr()
    assert members_table.main([*argv, "--check"]) == 1 and "stale" in capsys.readouterr().err


def test_bad_tables_are_named(tmp_path):
    folders = _tables(tmp_path, np.random.default_rng(1))
    with pytest.raises(ValueError, match=re.escape("zoo-a-s0 (prefix) is in both")):
        members_table.build([folders[0], folders[0]], n_boot=10)
    table = json.loads((folders[1] / "zoo.json").read_text())
    table["rows"][0]["mean"] += 0.01  # the bits no longer give the row's own statistics
    (folders[1] / "zoo.json").write_text(json.dumps(table))
    with pytest.raises(ValueError, match=re.escape("zoo-a-s2 (prefix): its per-example correctness gives ['mean']")):
        members_table.build(folders, n_boot=10)
    del table["rows"][0]["correct"]
    (folders[1] / "zoo.json").write_text(json.dumps(table))
    with pytest.raises(ValueError, match="has no per-example correctness"):
        members_table.build(folders, n_boot=10)
    other = json.loads((folders[0] / "zoo.json").read_text())
    for r in other["rows"]:
        r["model"], r["task"] = r["model"] + "0", {"seq_len": 128}  # a harder task for seed 00 of the same member
    (tmp_path / "control").mkdir()
    (tmp_path / "control" / "zoo.json").write_text(json.dumps({**other, "protocol": {"task_seed": 0}}))
    with pytest.raises(ValueError, match="evaluated on 2 different tasks"):
        members_table.build([folders[0], tmp_path / "control"], n_boot=10)
    (tmp_path / "control" / "zoo.json").write_text(json.dumps({**other, "protocol": {"task_seed": 3}}))
    with pytest.raises(ValueError, match="swept with task_seed=3"):
        members_table.build([folders[0], tmp_path / "control"], n_boot=10)
    with pytest.raises(FileNotFoundError, match="experiments.zoo.table"):
        members_table.build([tmp_path / "nowhere"], n_boot=10)
