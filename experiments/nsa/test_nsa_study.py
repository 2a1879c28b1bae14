"""The NSA study (experiments/nsa) in quick mode: train a member, ship it, measure a shipped one."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("native_sparse_attention_pytorch")

from experiments.nsa import study  # noqa: E402
from experiments.nsa.members import NSA_ZOO, nsa_name, nsa_recipe  # noqa: E402
from experiments.nsa.train import main as train_main  # noqa: E402

SHIPPED = Path(__file__).resolve().parents[2] / "assets" / "checkpoints" / "nsa"
QUICK = ["--n-per-residue", "2", "--n-interv", "2", "--n-boot", "10", "--n-perm", "10"]


def test_the_study_measures_a_shipped_checkpoint_and_reuses_its_cache(tmp_path):
    name = "nsa-w8s8-k2-s0"
    ckpts = tmp_path / "nsa"
    ckpts.mkdir()
    for suffix in (".json", ".safetensors"):
        shutil.copyfile(SHIPPED / f"{name}{suffix}", ckpts / f"{name}{suffix}")
    argv = ["--checkpoints", str(ckpts), "--out", str(tmp_path / "out"), "--cache", str(tmp_path / "cache"), *QUICK]
    assert study.main(argv) == 0
    data = json.loads((tmp_path / "out" / "nsa.json").read_text())
    (result,) = data["results"]
    assert (result["model"], result["W"], result["S"], result["k"]) == (name, 8, 8, 2)
    assert [c["protocol"] for c in result["curves"]] == ["prefix", "insequence"] and result["curves"][0]["modulus"] == 16
    assert {"branch_all", "branch_final", "kv_head"} <= set(result["interventions"]) and result["selection"]
    assert len(data["not_trained"]) == 2 * len(NSA_ZOO) - 1
    text = (tmp_path / "out" / "nsa.md").read_text()
    assert f"`python -m experiments.nsa.study --checkpoints {ckpts}`" in text and "python -m experiments.nsa.train" in text
    cached = tmp_path / "cache" / f"{name}.json"
    entry = json.loads(cached.read_text())
    entry["result"]["curves"][0]["mean"] = 0.123  # a marker: a second pass reads the cache, it does not measure again
    cached.write_text(json.dumps(entry))
    assert study.main(argv) == 0
    assert json.loads((tmp_path / "out" / "nsa.json").read_text())["results"][0]["curves"][0]["mean"] == 0.123


def test_the_training_queue_trains_cards_ships_and_skips_a_member(tmp_path, capsys):
    argv = ["--members", "w8s8-k0", "--seeds", "0", "--steps", "2", "--eval-examples", "1",
            "--runs", str(tmp_path / "runs"), "--ship", str(tmp_path / "nsa")]
    assert train_main(argv) == 0
    card = json.loads((tmp_path / "nsa" / "nsa-w8s8-k0-s0.json").read_text())
    model_cfg, tcfg = nsa_recipe("w8s8-k0", seed=0, steps=2)
    assert card["name"] == nsa_name("w8s8-k0", 0) and card["steps"] == 2
    assert card["train_config"]["mixture"] == json.loads(json.dumps(tcfg.mixture.to_dict()))
    assert card["train_config"]["warmup_steps"] == 0 and card["train_config"]["lr"] == tcfg.lr
    assert card["model_config"] == json.loads(json.dumps(model_cfg.to_dict()))
    assert (tmp_path / "nsa" / "nsa-w8s8-k0-s0.safetensors").is_file()
    assert train_main(argv) == 0 and "nsa-w8s8-k0-s0: shipped, skipped" in capsys.readouterr().out


def test_the_shipped_nsa_checkpoints_are_the_members_configs_their_cards_name():
    from phaseinterp.train import TrainConfig

    cards = sorted(SHIPPED.glob("*.json"))
    assert len(cards) == 2 * len(NSA_ZOO)
    for path in cards:
        card = json.loads(path.read_text())
        member, seed = card["name"].removeprefix("nsa-").rsplit("-s", 1)
        model_cfg, tcfg = nsa_recipe(member, seed=int(seed))
        assert card["model_config"] == json.loads(json.dumps(model_cfg.to_dict()))
        trained = TrainConfig.from_dict(card["train_config"])  # saved every 3000 steps: when, not what, it trained
        assert trained.replace(checkpoint_every=tcfg.checkpoint_every) == tcfg
