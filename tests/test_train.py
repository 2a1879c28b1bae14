"""Trainer: data mixture, schedule, loss goes down, exact resume, clear errors, CLI."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch

import phaseinterp
from phaseinterp.cli import main
from phaseinterp.config import CompressionConfig
from phaseinterp.tasks import RecordLookup
from phaseinterp.train import Mixture, TrainConfig, list_checkpoints, make_batch, train
from phaseinterp.train.data import IGNORE, bigram_table
from phaseinterp.train.state import state_path
from tests.helpers import tiny_cfg

MIX = Mixture(vocab_size=64, seq_len=40, min_records=2, max_records=5, min_demos=0, max_demos=2, lm_fraction=0.25,
              curriculum_steps=0)


def small_run(steps: int = 12, **kw) -> tuple:
    cfg = tiny_cfg([CompressionConfig(window=4, stride=4, local_window=4), "full"], vocab_size=64, d_model=32, d_mlp=48)
    base = dict(steps=steps, batch_size=8, lr=1e-2, warmup_steps=2, mixture=MIX, checkpoint_every=4, log_every=1,
                device="cpu", keep_states=2)
    base.update(kw)
    return cfg, TrainConfig(**base)


def losses(metrics: list[dict]) -> list[tuple[int, float, float]]:
    return [(m["step"], m["loss"], m["acc"]) for m in metrics]


# ---- data ----------------------------------------------------------------------------------------

def test_batch_is_a_pure_function_of_seed_and_step():
    a, b = make_batch(MIX, seed=3, step=7, batch_size=16), make_batch(MIX, seed=3, step=7, batch_size=16)
    for name in ("tokens", "targets", "weights", "query", "lookup"):
        assert torch.equal(getattr(a, name), getattr(b, name))
    assert not torch.equal(a.tokens, make_batch(MIX, seed=3, step=8, batch_size=16).tokens)
    assert not torch.equal(a.tokens, make_batch(MIX, seed=4, step=7, batch_size=16).tokens)


def test_lookup_rows_answer_the_value_after_the_queried_key_and_language_rows_follow_the_bigrams():
    batch = make_batch(MIX, seed=0, step=0, batch_size=64)
    pools = MIX.pools
    succ, _ = bigram_table(MIX)
    filler_index = {int(t): i for i, t in enumerate(pools.filler)}
    n_lookup = n_lm = 0
    for r in range(64):
        tok, tgt = batch.tokens[r], batch.targets[r]
        assert tok[0] == pools.head[0]
        if batch.lookup[r].any():
            n_lookup += 1
            assert batch.query[r].nonzero().flatten().tolist() == [MIX.seq_len - 1]
            for t in (tgt != IGNORE).nonzero().flatten().tolist():
                assert int(tok[t]) in set(pools.keys.tolist())
                first = (tok[:t] == tok[t]).nonzero().flatten()
                assert len(first) == 1 and tok[first[0] + 1] == tgt[t]  # the key's one record
        else:
            n_lm += 1
            assert not batch.query[r].any() and (batch.weights[r, :-1] == MIX.lm_weight).all()
            idx = [filler_index[int(t)] for t in tok[1:]]
            assert all(b in succ[a] for a, b in zip(idx[:-1], idx[1:]))
            assert torch.equal(tgt[:-1], tok[1:])
    assert n_lookup > 30 and n_lm > 5


def test_target_phase_is_uniform_and_depth_varies():
    pos = []
    for step in range(40):
        b = make_batch(MIX, seed=1, step=step, batch_size=64)
        for r in b.query[:, -1].nonzero().flatten().tolist():
            pos.append(int((b.tokens[r, :-1] == b.tokens[r, -1]).nonzero()[0, 0]))
    pos = np.array(pos)
    counts = np.bincount(pos % 8, minlength=8)
    expected = len(pos) / 8
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 24.3, counts  # p ~ 0.001 for 7 degrees of freedom
    assert pos.min() <= 3 and pos.max() >= MIX.seq_len - 8


def test_mixture_matches_the_evaluation_task_vocabulary_split():
    mix = Mixture(vocab_size=256)
    task = RecordLookup(**mix.eval_task_kwargs())
    for name in ("keys", "values", "filler"):
        assert np.array_equal(getattr(mix.pools, name), getattr(task.pools, name))
    assert mix.token_ranges()["bos"] == [0, 0]
    batch = task.sample(2, modulus=8)
    assert batch.tokens.shape[1] == mix.seq_len


@pytest.mark.parametrize("field, value, allowed", [
    ("seq_len", 10, "seq_len=10 is invalid: allowed >= 40 (BOS + 10 records + 9 demos + query)"),
    ("max_records", 200, "max_records=200 is invalid: allowed <= 112"),
    ("lm_fraction", 1.5, "lm_fraction=1.5 is invalid: allowed a number in [0, 1]"),
    ("min_records", 0, "min_records=0 is invalid: allowed an integer >= 1"),
    ("min_demos", 12, "min_demos=12 is invalid: allowed an integer >= 0 and <= 9"),
    ("max_demos", 10, "max_demos=10 is invalid: allowed an integer >= 3 and <= 9"),
])
def test_bad_mixture_raises_naming_value_and_range(field, value, allowed):
    with pytest.raises(ValueError, match=re.escape(allowed)):
        Mixture(**{field: value, **({"seq_len": 512} if field == "max_records" else {})})


@pytest.mark.parametrize("field, value, allowed", [
    ("steps", 0, "steps=0 is invalid: allowed an integer >= 1"),
    ("lr", -1.0, "lr=-1.0 is invalid: allowed a finite number > 0"),
    ("warmup_steps", 5000, "warmup_steps=5000 is invalid: allowed an integer >= 0 and <= 2000"),
    ("device", "tpu", "device='tpu' is invalid"),
])
def test_bad_train_config_raises_naming_value_and_range(field, value, allowed):
    with pytest.raises(ValueError, match=re.escape(allowed)):
        TrainConfig(**{field: value})


def test_lr_warms_up_linearly_then_decays_by_cosine_to_the_floor():
    tc = TrainConfig(steps=100, lr=1.0, warmup_steps=10, min_lr_ratio=0.1)
    assert tc.lr_at(0) == pytest.approx(0.1) and tc.lr_at(4) == pytest.approx(0.5) and tc.lr_at(9) == pytest.approx(1.0)
    assert tc.lr_at(10) == pytest.approx(1.0)
    assert tc.lr_at(55) == pytest.approx(0.55)  # half-way down the cosine: floor + (1 - floor) / 2
    assert tc.lr_at(100) == pytest.approx(0.1)
    lrs = [tc.lr_at(s) for s in range(10, 101)]
    assert all(a >= b for a, b in zip(lrs, lrs[1:]))


# ---- training ------------------------------------------------------------------------------------

def test_a_few_dozen_steps_lower_the_loss(tmp_path):
    cfg, tc = small_run(steps=40, checkpoint_every=40, log_every=5)
    result = train(cfg, tc, tmp_path / "run", progress=False)
    first, last = result.metrics[0]["loss"], result.metrics[-1]["loss"]
    assert last < 0.8 * first, (first, last)
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == list(range(5, 41, 5))
    assert {"loss", "lookup_loss", "lm_loss", "acc", "lr", "grad_norm", "tokens_per_s", "elapsed_s"} <= set(lines[0])
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["train_config"]["seed"] == 0 and "torch" in run["versions"]
    loaded = phaseinterp.load(result.checkpoint)
    tokens = make_batch(MIX, 0, 0, 2).tokens
    torch.testing.assert_close(loaded(tokens), result.model(tokens), atol=0, rtol=0)
    meta = phaseinterp.checkpoint.read_metadata(result.checkpoint)["extra"]
    assert meta["step"] == 40 and meta["seed"] == 0 and meta["train_config"]["mixture"]["vocab_size"] == 64


def test_checkpoints_follow_the_schedule_and_only_the_newest_keep_state(tmp_path):
    cfg, tc = small_run(steps=10, checkpoint_every=3, keep_states=2)
    train(cfg, tc, tmp_path, progress=False)
    assert [s for s, _ in list_checkpoints(tmp_path)] == [3, 6, 9, 10]
    assert sorted(p.name for p in (tmp_path / "checkpoints").glob("*.state.pt")) == ["step_000009.state.pt", "step_000010.state.pt"]


def test_resume_continues_exactly_where_the_checkpoint_stopped(tmp_path):
    cfg, tc = small_run(steps=12)
    whole = train(cfg, tc, tmp_path / "whole", progress=False)
    part = train(cfg, tc, tmp_path / "part", until=5, progress=False)
    assert part.step == 5 and part.checkpoint.name == "step_000005.safetensors"  # off-schedule stop is checkpointed
    rest = train(cfg, tc, tmp_path / "part", resume="latest", progress=False)
    assert losses(part.metrics) + losses(rest.metrics) == losses(whole.metrics)
    for (name, a), b in zip(whole.model.state_dict().items(), rest.model.state_dict().values()):
        assert torch.equal(a, b), name
    log = [json.loads(x)["step"] for x in (tmp_path / "part" / "metrics.jsonl").read_text().splitlines()]
    assert log == list(range(1, 13))
    # resuming from an earlier checkpoint truncates the log and replays the same steps
    again = train(cfg, tc, tmp_path / "part", resume=tmp_path / "part" / "checkpoints" / "step_000008.safetensors", progress=False)
    assert losses(again.metrics) == losses(whole.metrics)[8:]
    log = [json.loads(x)["step"] for x in (tmp_path / "part" / "metrics.jsonl").read_text().splitlines()]
    assert log == list(range(1, 13))


def test_resume_tolerates_a_torn_last_line_in_the_metrics_log(tmp_path):
    cfg, tc = small_run(steps=6)
    train(cfg, tc, tmp_path, until=3, progress=False)
    log = tmp_path / "metrics.jsonl"
    log.write_text(log.read_text() + '{"step": 4, "loss": 2.3')  # a crash mid-write
    with pytest.warns(UserWarning, match="dropped a torn last line"):
        rest = train(cfg, tc, tmp_path, resume="latest", progress=False)
    assert rest.step == 6 and [json.loads(x)["step"] for x in log.read_text().splitlines()] == list(range(1, 7))
    log.write_text('not json\n' + log.read_text())  # damage before the end is not a torn write
    with pytest.raises(ValueError, match="line 1 is not a metrics record"):
        train(cfg, tc, tmp_path, resume="latest", progress=False)


def test_corrupt_truncated_missing_and_mismatched_resume_files_raise_clear_errors(tmp_path):
    cfg, tc = small_run(steps=4, checkpoint_every=2)
    result = train(cfg, tc, tmp_path, progress=False)
    ckpt = result.checkpoint
    with pytest.raises(ValueError, match="already holds checkpoints"):
        train(cfg, tc, tmp_path, progress=False)
    with pytest.raises(ValueError, match=r"train config field 'lr' is 0.01 in the checkpoint but 0.02"):
        train(cfg, tc.replace(lr=0.02), tmp_path, resume=ckpt, progress=False)
    with pytest.raises(ValueError, match=r"train config field 'mixture.lm_fraction'"):
        train(cfg, tc.replace(mixture=Mixture(**{**MIX.to_dict(), "lm_fraction": 0.5})), tmp_path, resume=ckpt, progress=False)
    with pytest.raises(ValueError, match=r"model config field 'd_mlp' is 48 in the checkpoint but 64"):
        train(cfg.replace(d_mlp=64), tc, tmp_path, resume=ckpt, progress=False)
    with pytest.raises(FileNotFoundError, match="step_000002.state.pt.*missing"):
        (tmp_path / "checkpoints" / "step_000002.state.pt").unlink(missing_ok=True)
        train(cfg, tc, tmp_path, resume=tmp_path / "checkpoints" / "step_000002.safetensors", progress=False)
    plain = tmp_path / "plain.safetensors"
    result.model.save(plain)
    with pytest.raises(ValueError, match="without training state"):
        train(cfg, tc, tmp_path, resume=plain, progress=False)
    state = state_path(ckpt)
    good = state.read_bytes()
    flipped = bytearray(good)
    flipped[len(flipped) // 2] ^= 0xFF
    state.write_bytes(bytes(flipped))
    with pytest.raises(ValueError, match="corrupt or belongs to another checkpoint"):
        train(cfg, tc, tmp_path, resume=ckpt, progress=False)
    state.write_bytes(good[: len(good) // 2])
    with pytest.raises(ValueError, match="corrupt or belongs to another checkpoint"):
        train(cfg, tc, tmp_path, resume=ckpt, progress=False)
    state.write_bytes(good)
    weights = ckpt.read_bytes()
    ckpt.write_bytes(weights[: len(weights) // 2])
    with pytest.raises(ValueError, match="truncated or corrupt"):
        train(cfg, tc, tmp_path, resume=ckpt, progress=False)
    ckpt.write_bytes(weights)
    assert train(cfg, tc, tmp_path, resume=ckpt, progress=False).step == 4  # intact files resume fine


def test_bad_arguments_raise_naming_value_and_range(tmp_path):
    cfg, tc = small_run()
    with pytest.raises(ValueError, match=r"until=13 is invalid: allowed an integer in \[1, steps=12\]"):
        train(cfg, tc, tmp_path, until=13, progress=False)
    with pytest.raises(ValueError, match=r"mixture.vocab_size=64 is invalid: allowed <= the model's vocab_size \(32\)"):
        train(cfg.replace(vocab_size=32), tc, tmp_path, progress=False)


# ---- CLI -----------------------------------------------------------------------------------------

def test_cli_trains_from_a_config_file_writes_a_card_and_ships(tmp_path):
    cfg, tc = small_run()
    spec = {"model": cfg.to_dict(), "train": tc.to_dict()}
    path = tmp_path / "mini.json"
    path.write_text(json.dumps(spec))
    argv = ["train", "--config", str(path), "--steps", "6", "--out", str(tmp_path / "run"), "--no-progress",
            "--eval-examples", "4", "--ship", str(tmp_path / "assets"), "--ship-intermediate"]
    assert main(argv) == 0
    card = json.loads((tmp_path / "run" / "card.json").read_text())
    assert card["name"] == "mini" and card["steps"] == 6 and card["seed"] == 0
    assert card["model_config"] == json.loads(json.dumps(cfg.to_dict()))
    assert card["data"]["mixture"]["vocab_size"] == 64 and card["data"]["token_ranges"]["bos"] == [0, 0]
    assert len(card["phase_curve"]["accuracy"]) == 8 and card["wall_time_s"] > 0
    assert {"loss", "acc"} <= set(card["final_metrics"]) and "torch" in card["versions"]
    shipped = sorted(p.relative_to(tmp_path / "assets").as_posix() for p in (tmp_path / "assets").rglob("*") if p.is_file())
    assert shipped == ["mini.json", "mini.metrics.jsonl", "mini.safetensors", "mini/step_000004.safetensors"]
    model = phaseinterp.load(tmp_path / "assets" / "mini.safetensors")
    assert model.cfg == cfg
    assert phaseinterp.checkpoint.read_metadata(tmp_path / "assets" / "mini.safetensors")["extra"]["step"] == 6
    from phaseinterp.train.result import sweep_checkpoint

    card = json.loads((tmp_path / "assets" / "mini.json").read_text())
    curve, task = sweep_checkpoint(tmp_path / "assets" / "mini.safetensors", card, n_per_residue=2, task_seed=0,
                                   protocol="prefix", n_boot=20, n_perm=20)
    assert curve.period == 4 and len(curve.accuracy) == 8 and task == {**card["data"]["eval_task"], "protocol": "prefix"}


def test_cli_reports_bad_arguments_and_resume_mismatches_as_one_error_line(tmp_path, capsys):
    assert main(["train", "--preset", "nope", "--out", str(tmp_path / "x")]) == 2
    assert "phaseinterp train: error: --preset 'nope' is invalid: allowed a recipe" in capsys.readouterr().err
    cfg, tc = small_run(steps=2)
    path = tmp_path / "mini.json"
    path.write_text(json.dumps({"model": cfg.to_dict(), "train": tc.to_dict()}))
    argv = ["train", "--config", str(path), "--out", str(tmp_path / "run"), "--no-progress", "--eval-examples", "0"]
    assert main(argv) == 0
    assert main(argv) == 2
    assert "already holds checkpoints" in capsys.readouterr().err
    assert main([*argv, "--resume", "--lr", "0.5"]) == 2
    assert "train config field 'lr' is 0.01 in the checkpoint but 0.5" in capsys.readouterr().err
    assert main([*argv, "--resume", "--log-every", "2"]) == 0  # finished run: nothing left to do


# ---- shipped checkpoints -------------------------------------------------------------------------

def test_shipped_checkpoints_load_match_their_cards_and_recipes():
    from pathlib import Path

    from phaseinterp.train import RECIPES, recipe
    from phaseinterp.families import config_from_dict as model_config_from_dict

    folder = Path(__file__).resolve().parents[1] / "assets" / "checkpoints"
    cards = sorted(folder.glob("*.json")) + sorted((folder / "dsa").glob("*.json"))  # DSA: docs/dsa.md
    if not cards:
        pytest.skip("no shipped checkpoints")
    assert {c.stem for c in cards} == set(RECIPES)
    for path in cards:
        card = json.loads(path.read_text())
        model_cfg, tcfg = recipe(card["name"])
        meta = phaseinterp.checkpoint.read_metadata(path.with_suffix(".safetensors"))
        # files written before a field existed read back with its default; HF models (hf-deepseek-v4)
        # store an HFModelSpec ({"architecture", "hf_config"})
        canon_model = lambda d: json.loads(json.dumps(model_config_from_dict(d).to_dict()))  # noqa: E731
        canon_train = lambda d: json.loads(json.dumps(TrainConfig.from_dict(d).to_dict()))  # noqa: E731
        assert meta["config"] == card["model_config"]
        assert canon_model(meta["config"]) == json.loads(json.dumps(model_cfg.to_dict()))
        assert canon_train(card["train_config"]) == json.loads(json.dumps(tcfg.to_dict()))
        assert meta["extra"]["step"] == card["steps"] == tcfg.steps and card["seed"] == tcfg.seed
        assert len(card["phase_curve"]["accuracy"]) == 8 and card["wall_time_s"] > 0
    intermediate = sorted((folder / "w4s4").glob("step_*.safetensors"))
    assert len(intermediate) >= 5
    assert phaseinterp.checkpoint.read_metadata(intermediate[0])["extra"]["step"] == 250
