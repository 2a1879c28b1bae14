"""One path for a model source: a training-run folder, a checkpoint inside it, a shipped-style
checkpoint with its card beside it, resolved once into (model, family, card), and every verb on it."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

import phaseinterp
from phaseinterp.cli import main
from phaseinterp.config import CompressionConfig
from phaseinterp.sources import resolve_source
from phaseinterp.train import Mixture, TrainConfig
from tests.helpers import tiny_cfg

SWEEP = ["--n-per-residue", "2", "--n-boot", "20", "--n-perm", "20", "--no-progress"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A real (tiny, 4-step) run of `phaseinterp train --out RUN`: vocabulary 64, at most 5 records."""
    folder = tmp_path_factory.mktemp("sources")
    cfg = tiny_cfg([CompressionConfig(window=4, stride=4, local_window=4), "full"], vocab_size=64, d_model=32, d_mlp=48)
    mix = Mixture(vocab_size=64, seq_len=40, min_records=2, max_records=5, min_demos=0, max_demos=2, lm_fraction=0.25,
                  curriculum_steps=0)
    tcfg = TrainConfig(steps=4, batch_size=4, lr=1e-2, warmup_steps=1, mixture=mix, checkpoint_every=2, log_every=2,
                       device="cpu")
    (folder / "mini.json").write_text(json.dumps({"model": cfg.to_dict(), "train": tcfg.to_dict()}))
    assert main(["train", "--config", str(folder / "mini.json"), "--out", str(folder / "run"), "--no-progress",
                 "--eval-examples", "2"]) == 0
    return folder / "run"


def test_a_run_folder_resolves_to_its_cards_checkpoint_and_card(run):
    card = json.loads((run / "card.json").read_text())
    loaded = resolve_source(run)
    assert loaded.path == run / "checkpoints" / "step_000004.safetensors" and card["steps"] == 4
    assert loaded.family.name == "hooked" and loaded.card == card and loaded.card_path == run / "card.json"
    assert loaded.eval_task == card["data"]["eval_task"] and loaded.eval_task["vocab_size"] == 64
    inside = resolve_source(run / "checkpoints" / "step_000002.safetensors")  # an earlier step: the run's card too
    assert inside.card == card and inside.path.name == "step_000002.safetensors"
    same = phaseinterp.load(run)
    direct = phaseinterp.checkpoint.load(run / "checkpoints" / "step_000004.safetensors")
    assert all(torch.equal(a, b) for a, b in zip(same.state_dict().values(), direct.state_dict().values()))


@pytest.mark.parametrize("source", ["", "checkpoints/step_000002.safetensors"])
def test_sweep_and_knockout_on_a_run_use_the_runs_matched_task(run, source, tmp_path):
    path = run / source if source else run
    assert main(["sweep", str(path), *SWEEP, "--out", str(tmp_path / "sweep")]) == 0
    saved = json.loads((tmp_path / "sweep" / "curve.json").read_text())
    task = saved["config"]["source"]["task"]
    eval_task = json.loads((run / "card.json").read_text())["data"]["eval_task"]
    assert task["from_card"] and task["vocab_size"] == 64 and task["n_records"] == eval_task["n_records"]
    assert main(["knockout", str(path), *SWEEP[:4], "--out", str(tmp_path / "knockout")]) == 0
    assert (tmp_path / "knockout" / "knockout_map.json").is_file()


def test_without_the_card_the_default_task_does_not_fit_the_model(run, tmp_path, capsys):
    lone = tmp_path / "lone.safetensors"  # the same weights outside the run: no card to read
    shutil.copy(run / "checkpoints" / "step_000004.safetensors", lone)
    assert resolve_source(lone).card is None
    assert main(["sweep", str(lone), *SWEEP, "--out", str(tmp_path / "x")]) == 2
    assert "n_records=64 is too many: 64 distinct keys need a key pool of at least 64" in capsys.readouterr().err  # the default task


def test_bad_sources_name_what_is_allowed(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint at .*allowed a checkpoint file, a training-run folder"):
        resolve_source(tmp_path / "missing")
    with pytest.raises(ValueError, match="model folder .* is invalid: allowed a training run"):
        resolve_source(tmp_path)
    (tmp_path / "checkpoints").mkdir()
    with pytest.raises(ValueError, match=r"holds no checkpoints/step_N.safetensors"):
        resolve_source(tmp_path)
