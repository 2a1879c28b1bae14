"""Same answer at any thread count (issue 34): a phase sweep and a knockout map with 1 and with 2
torch threads give the same per-example correctness, and results record the count."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from phaseinterp.interventions import knockout_map
from phaseinterp.measure import evaluate_correct, phase_sweep
from phaseinterp.sources import resolve_source
from phaseinterp.tasks import RecordLookup


@pytest.fixture
def threads():
    before = torch.get_num_threads()
    yield lambda n: torch.set_num_threads(n)
    torch.set_num_threads(before)


def test_sweep_and_knockout_map_agree_across_thread_counts(threads):
    loaded = resolve_source("w4s4")
    model, task = loaded.model, RecordLookup(**{**loaded.eval_task, "seq_len": 96})
    batch, calib = task.sample(16, 8, seed=3), task.sample(4, 8, seed=4, split="calibration")
    out = {}
    for n in (1, 2):
        threads(n)
        correct = evaluate_correct(model, batch, progress=False)
        curve = phase_sweep(model, batch, progress=False, n_boot=50, n_perm=50)
        km = knockout_map(model, batch, calib, n_boot=20)
        out[n] = (correct, curve, km)
    (c1, curve1, km1), (c2, curve2, km2) = out[1], out[2]
    assert 0.2 < c1.float().mean() < 1.0  # a curve with both outcomes, so a flip would show
    assert torch.equal(c1, c2)
    np.testing.assert_array_equal(curve1.accuracy, curve2.accuracy)
    np.testing.assert_array_equal(km1.values, km2.values)
    assert curve1.versions["torch_threads"] == 1 and curve2.versions["torch_threads"] == 2
    assert km2.meta["versions"]["torch_threads"] == 2
