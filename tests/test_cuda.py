"""On a CUDA device: the library's paths against CPU (skipped without CUDA; `scripts/gpu_check.sh` runs
them with `-m cuda`). The CPU-side dtype probe of every backend is tests/test_gpu_check.py."""

import numpy as np
import pytest
import torch

import phaseinterp
from phaseinterp.interventions import knockout_map
from phaseinterp.measure import phase_sweep
from phaseinterp.tasks import RecordLookup

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


@pytest.fixture(scope="module")
def batches():
    task = RecordLookup(vocab_size=256, n_records=10, n_demos=6, seq_len=64)
    return task.sample(16, 8, seed=0), task.sample(16, 8, seed=0, split="calibration")


def test_a_sweep_and_a_knockout_map_on_cuda_equal_cpu(batches):
    batch, calib = batches
    model = phaseinterp.load("w4s4")
    cpu_curve, cpu_map = phase_sweep(model, batch, progress=False), knockout_map(model, batch, calib, progress=False)
    model.cuda()
    curve, kmap = phase_sweep(model, batch, progress=False), knockout_map(model, batch, calib, progress=False)
    assert np.array_equal(curve.correct, cpu_curve.correct)
    np.testing.assert_allclose(kmap.values, cpu_map.values, atol=1e-6)  # the same flips: percentage points
    assert next(model.parameters()).is_cuda  # nothing moved the model back


def test_fleet_graphs_equal_eager_steps_on_cuda(tmp_path):
    from phaseinterp.train.fleet import FleetRun, train_fleet
    from phaseinterp.train.rule import rule_recipe

    model_cfg, tcfg = rule_recipe(8, 8, seq_len=256, max_records=24, lr=1e-3)
    tcfg = tcfg.replace(steps=8, batch_size=8, warmup_steps=2, log_every=2)
    got = {g: train_fleet([FleetRun("x", model_cfg, tcfg, tmp_path / str(g))], graphs=g, workers=1, report=None)[0]
           for g in (True, False)}
    for a, b in zip(got[True].model.state_dict().values(), got[False].model.state_dict().values()):
        torch.testing.assert_close(a, b, atol=0, rtol=0)


def test_the_kv_cache_path_on_cuda_equals_a_full_forward():
    from phaseinterp.backends.tiny import tiny_qwen3

    model = tiny_qwen3().cuda().eval()
    task = RecordLookup(vocab_size=model.config.vocab_size, n_records=6, n_demos=1)
    batch, calib = task.sample(2, 4, seed=0), task.sample(2, 4, seed=0, split="calibration")
    fast = knockout_map(model, batch, calib, progress=False, n_boot=50)
    slow = knockout_map(model, batch, calib, progress=False, n_boot=50, method="hooks")
    assert fast.meta["intervention"]["path"] == "kv_cache"
    np.testing.assert_allclose(fast.values, slow.values, atol=1e-6, equal_nan=True)
