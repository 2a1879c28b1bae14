"""The zoo study (experiments/zoo): its members are rule configs, its table, its training queue."""

from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path

import pytest

from experiments.zoo import table as zoo_table
from experiments.zoo.members import EXTRA, ZOO, member, rule_options, zoo_name, zoo_recipe
from phaseinterp.cli import main
from phaseinterp.measure import unpack_correct
from phaseinterp.tasks import RecordLookup
from phaseinterp.train.rule import period, rule_recipe, table_period

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", sorted(ZOO))
def test_every_zoo_member_is_evaluated_at_every_residue_of_its_table_period(name):
    model_cfg, tcfg = zoo_recipe(name)
    R = table_period(model_cfg.residue_modulus)
    assert R % 8 == 0 and all(R % s == 0 and R >= 2 * s for s in model_cfg.strides)
    kw = tcfg.mixture.eval_task_kwargs()
    task = RecordLookup(**{**kw, "seq_len": max(kw["seq_len"], RecordLookup(**{**kw, "seq_len": None}).min_seq_len(R))})
    batch = task.sample(2, R, seed=0)
    assert sorted(set(batch.residue.tolist())) == list(range(R))
    key_pos = batch.key_pos.float()
    means = [key_pos[batch.residue == r].mean().item() for r in range(R)]
    assert max(means) - min(means) < R  # position matched: the needle's mean position does not track r
    assert not tcfg.mixture.sparse_start and tcfg.mixture.curriculum_steps == 500  # dense from the start


def test_the_larger_zoo_changes_width_and_kv_heads_only():
    small, small_t = zoo_recipe("w8s8", seed=1)
    big, big_t = zoo_recipe("w8s8", seed=1, width=256, kv_heads=8)
    assert (big.d_model, big.d_mlp, big.n_heads, big.n_kv_heads, big.d_head) == (256, 768, 8, 8, small.d_head)
    assert big.layers == small.layers and big_t == small_t  # same compressor, data, steps and schedule
    assert zoo_recipe("w8s8-kv4", kv_heads=2)[0].n_kv_heads == 2 and zoo_recipe("w8s8-kv4")[0].n_kv_heads == 4
    assert zoo_name("w8s8", 1, width=256, kv_heads=8) == "zoo-w8s8-d256-kv8-s1" and zoo_name("w8s8", 0) == "zoo-w8s8-s0"


def test_zoo_table_reports_a_run_that_did_not_learn_with_its_budget(tmp_path):
    run = zoo_table.run

    out = tmp_path / "run"
    assert main(["train", "--recipe", "rule", "--window", "4", "--stride", "4", "--steps", "2", "--out", str(out),
                 "--no-progress", "--eval-examples", "2", "--ship", str(tmp_path / "zoo"), "--name", "zoo-w4s4-s0"]) == 0
    rows = run(tmp_path / "zoo", tmp_path / "results", n_per_residue=2, n_boot=10, n_perm=10)
    assert [(r["member"], r["protocol"], r["modulus"], r["learned"]) for r in rows] == [
        ("w4s4", "prefix", 8, False), ("w4s4", "insequence", 8, False)]
    for r in rows:  # each curve's per-example correctness is kept, packed: the member table resamples it
        x = unpack_correct(r["correct"]["bits"], r["correct"]["examples"])
        assert x.shape == (2, 8) and x.mean(0).tolist() == r["accuracy"]
    text = (tmp_path / "results" / "zoo.md").read_text()
    assert "| w4s4 | W4/S4 scalar | 1 | 0 | prefix | 8 | 2 " in text and "**no** (final loss" in text
    summary = rows[0]["training_rows"]
    assert rows[1]["training_rows"] == summary and summary["one_rows"] + summary["several_rows"] == 1024
    assert summary["one"] < 0.2 and summary["several"] < 0.2  # two steps: neither exclusion nor retrieval
    assert f"| {summary['one']:.2f} / {summary['several']:.2f} |" in text
    assert sorted(p.name for p in (tmp_path / "results").iterdir()) == ["zoo.csv", "zoo.json", "zoo.md"]
    assert "Not trained yet (23 of 24 runs;" in text and "zoo-w4s4-s1, zoo-w8s8-s0" in text


def test_zoo_table_names_the_runs_its_folder_should_hold_and_its_command(tmp_path):
    zoo = tmp_path / "zoo"
    assert main(["train", "--recipe", "rule", "--window", "4", "--stride", "4", "--steps", "2", "--out", str(tmp_path / "run"),
                 "--no-progress", "--eval-examples", "1", "--ship", str(zoo), "--name", "zoo-w4s4-s2"]) == 0
    sweep = ["--checkpoints", str(zoo), "--n-per-residue", "2", "--n-boot", "10", "--n-perm", "10", "--protocols", "prefix"]
    assert zoo_table.main([*sweep, "--out", str(tmp_path / "a"), "--members", "w4s4", "w8s8", "--seeds", "2", "3"]) == 0
    text = (tmp_path / "a" / "zoo.md").read_text()
    assert ("Not trained yet (3 of 4 runs; `python -m experiments.zoo.train --members w4s4 w8s8 --seeds 2 3 "
            f"--ship {zoo.as_posix()}` trains what is missing): zoo-w4s4-s3, zoo-w8s8-s2, zoo-w8s8-s3.") in text
    assert f"Reproduce: `python -m experiments.zoo.table {' '.join(sweep)} --out {tmp_path / 'a'} --members w4s4 w8s8 --seeds 2 3`." in text
    assert zoo_table.main([*sweep, "--out", str(tmp_path / "a"), "--members", "w4s4", "--seeds", "2", "--only", "zoo-w4s4-s2"]) == 0
    text = (tmp_path / "a" / "zoo.md").read_text()
    assert "Not trained yet" not in text  # one member, one seed: nothing missing
    assert "--members w4s4 --seeds 2`." in text and "--only" not in text
    assert f"Loss curves: `{zoo.as_posix()}/NAME.metrics.jsonl`." in text


def test_zoo_table_only_resweeps_the_named_cards_and_keeps_the_other_rows(tmp_path):
    run = zoo_table.run

    zoo, results = tmp_path / "zoo", tmp_path / "results"
    for name, extra in (("zoo-w4s4-s0", []), ("zoo-w12s12-s0", ["--window", "12", "--stride", "12"])):
        shape = extra or ["--window", "4", "--stride", "4"]
        assert main(["train", "--recipe", "rule", *shape, "--steps", "2", "--out", str(tmp_path / name), "--no-progress",
                     "--eval-examples", "1", "--ship", str(zoo), "--name", name]) == 0
    sweep = {"n_per_residue": 2, "n_boot": 10, "n_perm": 10, "protocols": ("prefix",)}
    first = run(zoo, results, **sweep)
    assert [r["aligned_start"] for r in first] == [{"steps": 2000, "modulus": 24, "phase": rule_recipe(12, 12)[1].mixture.aligned_phase}, None]
    assert ", first 2000 at r = " in (results / "zoo.md").read_text()
    table = json.loads((results / "zoo.json").read_text())
    table["rows"][1]["mean"] = 0.5  # a marker: kept rows are copied, not re-swept
    (results / "zoo.json").write_text(json.dumps(table))
    again = run(zoo, results, **sweep, only=["zoo-w12s12-s0"])
    assert again[1]["mean"] == 0.5 and again[0]["accuracy"] == first[0]["accuracy"]
    assert again[1]["training_rows"] == first[1]["training_rows"]  # kept rows get the per-card column too
    with pytest.raises(ValueError, match=re.escape("--only zoo-w9s9-s0: no such card; allowed ['zoo-w12s12-s0', 'zoo-w4s4-s0']")):
        run(zoo, results, **sweep, only=["zoo-w9s9-s0"])
    with pytest.raises(ValueError, match="this sweep uses"):
        run(zoo, results, **{**sweep, "n_per_residue": 3}, only=["zoo-w4s4-s0"])
    with pytest.raises(FileNotFoundError, match="run the whole table"):
        run(zoo, tmp_path / "nowhere", **sweep, only=["zoo-w4s4-s0"])


def test_shipped_zoo_checkpoints_are_the_rule_configs_their_cards_name():
    import phaseinterp
    from phaseinterp.train import TrainConfig

    folder = ROOT / "assets" / "checkpoints" / "zoo"
    cards = sorted(folder.glob("*.json"))
    if not cards:
        pytest.skip("no zoo checkpoints shipped")
    for path in cards:
        card = json.loads(path.read_text())
        member, seed = card["name"].removeprefix("zoo-").rsplit("-s", 1)
        model_cfg, tcfg = zoo_recipe(member, seed=int(seed))
        meta = phaseinterp.checkpoint.read_metadata(path.with_suffix(".safetensors"))
        assert meta["config"] == card["model_config"] == json.loads(json.dumps(model_cfg.to_dict()))
        trained = TrainConfig.from_dict(card["train_config"])
        # compile=True (experiments/zoo/train.py --compile) changes how the forward runs, not the recipe
        assert json.loads(json.dumps(trained.replace(compile=tcfg.compile).to_dict())) == json.loads(json.dumps(tcfg.to_dict()))
        assert card["steps"] == tcfg.steps and card["phase_curve"]["task"]["modulus"] == period(model_cfg.residue_modulus)
        assert (path.parent / f"{path.stem}.metrics.jsonl").is_file()  # the loss curve


def test_report_names_the_aligned_start_of_exactly_the_members_the_rule_aligns():
    from experiments.zoo.section import RESULTS, zoo_section

    if not RESULTS.is_file():
        pytest.skip("no zoo table shipped")
    table = next(t for t in zoo_section().tables if "model" in t)  # the first table of runs (one seed each)
    for model, text in zip(table["model"], table["aligned start"]):
        member, seed = model.removeprefix("zoo-").rsplit("-s", 1)
        mix = zoo_recipe(member, seed=int(seed))[1].mixture
        expected = f"r = {mix.aligned_phase} mod {mix.aligned_modulus}, first 2000 steps" if mix.aligned_steps else ""
        assert text == expected, model
    assert (table["aligned start"] != "").sum() == 2 * 8  # W12/S12, W16/S16, W16/S8, uniform: 2 seeds x 2 protocols


@pytest.mark.parametrize("name", ["w8s8-kv4", "full-kv4", "csa", "w8s8-norope", "w8s8-uniform", *EXTRA])
def test_the_training_queue_asks_the_verb_for_exactly_the_members_configs(name, tmp_path):
    from phaseinterp.commands.train import register, resolve

    sub = argparse.ArgumentParser().add_subparsers()
    register(sub)
    parser = sub.choices["train"]
    for kv_heads in (None, 8):
        argv = ["--recipe", "rule", *rule_options(name, kv_heads), "--seed", "1", "--name", zoo_name(name, 1),
                "--out", str(tmp_path)]
        run_name, model_cfg, tcfg = resolve(parser.parse_args(argv))
        assert (run_name, model_cfg, tcfg) == (zoo_name(name, 1), *zoo_recipe(name, seed=1, kv_heads=kv_heads))
    with pytest.raises(ValueError, match=re.escape("unknown zoo member 'w9s9': allowed [")):
        member("w9s9")


def test_the_training_queue_trains_ships_and_skips_what_is_shipped(tmp_path, monkeypatch, capsys):
    from experiments.zoo.train import main as queue

    # each run is a `phaseinterp train` process: it must import this checkout's package
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    argv = ["--members", "w4s4", "--seeds", "0", "--jobs", "1", "--steps", "2", "--eval-examples", "1", "--device", "cpu",
            "--runs", str(tmp_path / "runs"), "--ship", str(tmp_path / "zoo")]
    assert queue(argv) == 0, (tmp_path / "runs" / "zoo-w4s4-s0.log").read_text()
    out = capsys.readouterr().out
    assert "1 runs: zoo-w4s4-s0" in out and "done: zoo-w4s4-s0" in out
    card = json.loads((tmp_path / "zoo" / "zoo-w4s4-s0.json").read_text())
    model_cfg, tcfg = zoo_recipe("w4s4")
    assert card["name"] == "zoo-w4s4-s0" and card["model_config"] == json.loads(json.dumps(model_cfg.to_dict()))
    assert card["steps"] == 2 and card["train_config"]["mixture"] == json.loads(json.dumps(tcfg.mixture.to_dict()))
    assert queue(argv) == 0 and "0 runs: " in capsys.readouterr().out  # shipped: skipped


def test_the_heads_study_maps_each_seed_and_names_owners_and_weak_residues(tmp_path):
    from experiments.zoo.heads import main as heads

    argv = ["--member", "w8s8-kv4", "--seeds", "0", "--n-per-residue", "2", "--checkpoints",
            str(ROOT / "assets" / "checkpoints" / "zoo"), "--out", str(tmp_path)]
    assert heads(argv) == 0
    data = json.loads((tmp_path / "zoo_heads_w8s8-kv4.json").read_text())
    seed = data["seeds"]["0"]
    assert seed["modulus"] == 16 and len(seed["clean"]) == 16 and len(seed["values"]) == 2 and len(seed["values"][0]) == 4
    assert set(seed["weak_unowned"]) | set(seed["weak_owned"]) == set(seed["weak"])
    assert "Reproduce: `python -m experiments.zoo.heads --member w8s8-kv4`" in (tmp_path / "zoo_heads_w8s8-kv4.md").read_text()
    assert sorted(p.name for p in (tmp_path / "zoo_heads").iterdir()) == [
        "zoo-w8s8-kv4-s0.csv", "zoo-w8s8-kv4-s0.html", "zoo-w8s8-kv4-s0.json"]
    assert heads([*argv[:3], "7", *argv[4:]]) == 1  # no shipped seed 7: nothing to do


def test_the_zoo_section_summarizes_members_across_seeds_from_the_member_table(tmp_path):
    from experiments.zoo.section import MEMBERS, SEEDS, zoo_section

    if not (SEEDS.is_file() and MEMBERS.is_file()):
        pytest.skip("no table of further seeds or member table shipped")
    members = json.loads(MEMBERS.read_text())["members"]
    section = zoo_section()
    assert len(section.tables) == 3 and "Seeds that learned in either padding protocol" in section.text
    first = section.tables[0]
    assert list(zip(first["member"], first["padding"])) == [(m["member"], m["protocol"]) for m in members]
    assert (first["seeds"] == [m["n_seeds"] for m in members]).all()
    for m in members:  # the shares in the sentence are the member table's, once per member
        s = m["learned_any_protocol"]
        assert section.text.count(f"{m['member']} {s['learned']} of {s['seeds']} [") == 1
    assert section.tables[2]["model"].str.endswith(("-s2", "-s3")).all()
    assert len(zoo_section(seeds=tmp_path / "none.json", members=tmp_path / "none.json").tables) == 1
