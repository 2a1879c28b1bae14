"""The fleet trainer (`phaseinterp.train.fleet`): the same runs as `train()`, resumable both ways."""

import dataclasses

import numpy as np
import pytest
import torch

from phaseinterp.train.data import make_batch
from phaseinterp.train.fleet import FleetRun, decode_batch, encode_batch, resume_step, train_fleet
from phaseinterp.train.loop import train
from phaseinterp.train.rule import long_mixture, rule_recipe


def _small(seed: int = 0, **kw):
    model_cfg, tcfg = rule_recipe(**kw, seed=seed)
    mix = dataclasses.replace(long_mixture(96, 12), curriculum_steps=2)
    return model_cfg, tcfg.replace(steps=6, batch_size=4, warmup_steps=2, log_every=2, checkpoint_every=6,
                                   mixture=mix, device="cpu")


def _max_diff(a, b) -> float:
    """Largest logit difference of two models on a batch neither trained on. Not the weights: Adam
    turns float-rounding noise in a near-zero gradient (an embedding row of a token the batches
    barely use) into an update of order lr, so weights differ where every output agrees."""
    batch = make_batch(long_mixture(96, 12), seed=99, step=1000, batch_size=8)
    with torch.no_grad():
        return float((a(batch.tokens) - b(batch.tokens)).abs().max())


def test_encoded_batches_decode_to_the_trainers_batch():
    mix = long_mixture(96, 12)
    batch = make_batch(mix, seed=3, step=40, batch_size=16)
    back = decode_batch(*(torch.from_numpy(a) for a in encode_batch(batch)), mix.lm_weight)
    for field in dataclasses.fields(batch):
        assert torch.equal(getattr(back, field.name), getattr(batch, field.name)), field.name


@pytest.mark.parametrize("arm", [{"layout": "full", "d_head": 16}, {"window": 4, "stride": 4}, {"window": 6, "stride": 3}])
def test_a_fleet_trains_what_train_trains(tmp_path, arm):
    model_cfg, tcfg = _small(seed=2, **arm)
    ref = train(model_cfg, tcfg, tmp_path / "ref", progress=False)
    [got] = train_fleet([FleetRun("x", model_cfg, tcfg, tmp_path / "fleet")], workers=0, report=None)
    assert got.step == ref.step == 6
    assert _max_diff(got.model, ref.model) < 1e-3  # float rounding only (one step fewer: 0.3)
    assert [m["step"] for m in got.metrics] == [m["step"] for m in ref.metrics]
    np.testing.assert_allclose([m["loss"] for m in got.metrics], [m["loss"] for m in ref.metrics], rtol=1e-5)
    np.testing.assert_allclose([m["acc"] for m in got.metrics], [m["acc"] for m in ref.metrics], atol=1e-9)


def test_a_fleet_of_several_runs_with_workers_equals_each_run_alone(tmp_path):
    specs = [(f"r{i}", *_small(seed=i, window=4, stride=4)) for i in range(2)]
    together = train_fleet([FleetRun(n, m, t, tmp_path / "together" / n) for n, m, t in specs], workers=1, report=None)
    for (n, m, t), res in zip(specs, together):
        [alone] = train_fleet([FleetRun(n, m, t, tmp_path / "alone" / n)], workers=0, report=None)
        assert _max_diff(res.model, alone.model) == 0.0


def test_a_stopped_fleet_run_resumes_in_train_and_in_a_fleet(tmp_path):
    model_cfg, tcfg = _small(seed=1, window=4, stride=4)
    ref = train(model_cfg, tcfg, tmp_path / "ref", progress=False)
    [half] = train_fleet([FleetRun("x", model_cfg, tcfg, tmp_path / "a")], workers=0, until=3, report=None)
    assert half.step == 3 and resume_step(tmp_path / "a") == 3
    done = train(model_cfg, tcfg, tmp_path / "a", resume="latest", progress=False)
    assert done.step == 6 and _max_diff(done.model, ref.model) < 1e-3
    train_fleet([FleetRun("x", model_cfg, tcfg, tmp_path / "b")], workers=0, until=3, report=None)
    [again] = train_fleet([FleetRun("x", model_cfg, tcfg, tmp_path / "b")], workers=0, resume=True, report=None)
    assert again.step == 6 and _max_diff(again.model, ref.model) < 1e-3
    steps = [line["step"] for line in map(__import__("json").loads, (tmp_path / "b" / "metrics.jsonl").read_text().splitlines())]
    assert steps == [2, 3, 4, 6]


def test_bad_fleets_are_refused_with_the_reason(tmp_path):
    model_cfg, tcfg = _small(window=4, stride=4)
    with pytest.raises(ValueError, match="runs=\\[\\] is invalid"):
        train_fleet([])
    run = FleetRun("x", model_cfg, tcfg, tmp_path / "x")
    with pytest.raises(ValueError, match="share a run folder"):
        train_fleet([run, run])
    with pytest.raises(ValueError, match="graphs=True is invalid on device 'cpu'"):
        train_fleet([run], device="cpu", graphs=True)
    with pytest.raises(ValueError, match="until=0 is invalid"):
        train_fleet([run], until=0)
    train_fleet([run], workers=0, until=2, report=None)
    with pytest.raises(ValueError, match="already holds checkpoints: resume it"):
        train_fleet([run], workers=0, report=None)
    with pytest.raises(ValueError, match="trains our model"):
        FleetRun("hf", {"not": "a ModelConfig"}, tcfg, tmp_path / "hf")
