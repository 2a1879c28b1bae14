"""calibration="self": each row's replacement is the mean over the evaluated batch's other logical
examples, checked against explicit calibrations built from those examples' rows."""

import pytest
import torch

from phaseinterp import HookedCompressedTransformer
from phaseinterp.config import CompressionConfig
from phaseinterp.interventions import calibrate, clear_calibrations, knockout_map
from phaseinterp.interventions.knockout import knockout_logits
from phaseinterp.tasks import RecordLookup
from phaseinterp.units import head_units
from tests.helpers import tiny_cfg
from tests.test_calibration_cache import count_forwards

torch.set_num_threads(1)


def _setup(n_per_residue: int = 3):
    cfg = tiny_cfg([CompressionConfig(window=4, stride=4, local_window=4)] * 2)
    model = HookedCompressedTransformer(cfg, seed=0).eval()
    task = RecordLookup(vocab_size=cfg.vocab_size, n_records=8, n_demos=2)
    return model, task.sample(n_per_residue, 4, seed=0)


@pytest.mark.parametrize("method", ["incremental", "hooks"])
@pytest.mark.parametrize("per_residue", [False, True])
def test_self_calibration_is_the_mean_over_the_other_examples(method, per_residue):
    model, batch = _setup()
    units = head_units(model.cfg, "kv_head")
    clean, own, used = knockout_logits(model, batch, units, "self", per_residue=per_residue, method=method)
    assert used == method
    for e in batch.example_id.unique().tolist():
        rows = (batch.example_id == e).nonzero()[:, 0]
        others = calibrate(model, batch[(batch.example_id != e).nonzero()[:, 0]])
        sub = batch[rows]
        _, explicit, _ = knockout_logits(model, sub, units, others, per_residue=per_residue, method=method)
        torch.testing.assert_close(own[:, rows], explicit, rtol=1e-4, atol=1e-4)
    # a different replacement would have moved the logits: the comparison is not vacuous
    assert not torch.allclose(own, clean.expand_as(own), atol=1e-3)


def test_self_calibration_costs_no_forward_on_the_incremental_path():
    clear_calibrations()
    model, batch = _setup()
    calls, handle = count_forwards(model)
    knockout_map(model, batch, "self", n_boot=20)
    handle.remove()
    assert len(calls) == 1  # the clean run only


def test_self_calibration_needs_two_examples_and_the_mean():
    model, batch = _setup(n_per_residue=1)
    with pytest.raises(ValueError, match="at least two logical examples.*found 1"):
        knockout_map(model, batch, "self", n_boot=20)
    model, batch = _setup()
    with pytest.raises(ValueError, match="replacement='resample'"):
        knockout_map(model, batch, "self", replacement="resample", n_boot=20)
    with pytest.raises(ValueError, match="calibration='selff' is invalid"):
        knockout_map(model, batch, "selff", n_boot=20)
    smap = knockout_map(model, batch, "self", n_boot=20)
    assert smap.meta["calibration"]["kind"] == "self"
