"""Interventions are never silent and never leave anything behind: hooks are removed and
parameters restored after errors, no-op interventions warn or raise, bad input raises a
ValueError naming the value and the allowed range."""

import numpy as np
import pytest
import torch

from phaseinterp import CompressionConfig
from phaseinterp.interventions import (Pairing, activation_patching, calibrate, cycled_gates,
                                       gate_attribution, gate_cycling, gate_override, knockout_map, mapping_swap,
                                       phase_swap, planted_model, run_units)
from phaseinterp.backends.incremental import FinalPositionRun
from phaseinterp.backends.tl_hooks import has_hooks
from phaseinterp.tasks import RecordLookup
from tests.helpers import noisy_model, tiny_cfg


@pytest.fixture(scope="module")
def planted():
    model = planted_model(32)
    task = RecordLookup(vocab_size=32, n_records=6, n_demos=1)
    return model, task.sample(4, 4, seed=0), task.sample(4, 4, seed=0, split="calibration")


def test_hooks_are_removed_after_an_error_inside_a_hook(planted):
    model, batch, _ = planted

    def boom(x):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        run_units(model, batch.tokens, batch.query_pos, [{}, {"blocks.0.attn.hook_z": boom}])
    assert not has_hooks(model)
    with pytest.raises(RuntimeError, match="inside"):
        with gate_override(model, "uniform"):
            assert has_hooks(model)
            raise RuntimeError("inside the block")
    assert not has_hooks(model)


def test_hooks_are_removed_after_an_error_in_the_forward(planted):
    model, batch, calib = planted
    bad = calib.__class__(**{**calib.__dict__, "tokens": calib.tokens.clone().fill_(10_000)})
    with pytest.raises(ValueError, match="token id 10000 out of range"):
        calibrate(model, bad)
    assert not has_hooks(model)
    with pytest.raises(ValueError, match="out of range"):
        gate_attribution(model, bad, override="uniform")
    assert not has_hooks(model)


def test_cycled_parameters_are_restored_after_an_error():
    model = noisy_model(tiny_cfg([CompressionConfig(window=4, stride=4, local_window=3)]))
    comp = model.blocks[0].attn.compress_k
    index, bias = comp.gate_index.clone(), comp.b_Z.detach().clone()
    with pytest.raises(RuntimeError, match="stop"):
        with cycled_gates(model, 1):
            assert torch.equal(comp.gate_index, torch.roll(index, 1))
            assert torch.equal(comp.b_Z, torch.roll(bias, 1, dims=0))
            raise RuntimeError("stop")
    assert torch.equal(comp.gate_index, index) and torch.equal(comp.b_Z, bias)


def test_a_knockout_that_changes_nothing_warns(planted):
    model, batch, calib = planted
    with torch.no_grad():
        saved = model.blocks[0].attn.W_O[2:].clone()
        model.blocks[0].attn.W_O[2:] = 0  # the query heads of KV head 1 write nothing
    try:
        with pytest.warns(UserWarning, match=r"changed no output.*: L0\.KV1$"):
            m = knockout_map(model, batch, calib, n_boot=20)
        assert np.nan_to_num(m.sel(layer=0, kv_head=1)).tolist() == [0.0, 0.0, 0.0, 0.0]
    finally:
        with torch.no_grad():
            model.blocks[0].attn.W_O[2:] = saved


def test_no_op_overrides_and_cycles_warn_or_raise(planted):
    model, batch, _ = planted
    with pytest.warns(UserWarning, match="changed no gate value"):
        with gate_override(model, "uniform"):
            pass  # no forward ran
    uniform = noisy_model(tiny_cfg([CompressionConfig(window=4, stride=4, gate="uniform")]))
    with pytest.raises(ValueError, match="uniform gates.*have no offset-specific"):
        with cycled_gates(uniform, 1):
            pass
    shared = noisy_model(tiny_cfg([CompressionConfig(window=4, stride=4, gate_maps="shared", offset_bias=False)]))
    with pytest.raises(ValueError, match="shared gate maps without"):
        with cycled_gates(shared, 1):
            pass
    with pytest.raises(ValueError, match=r"delta=4 is invalid .*W=4"):
        with cycled_gates(model, 4):
            pass


def test_patching_a_unit_that_does_not_differ_warns(planted):
    model, batch, _ = planted
    with pytest.warns(UserWarning, match=r"patching resid changed no output.*0\.key"):
        activation_patching(model, mapping_swap(batch), unit="resid", positions=["key", "final"])


@pytest.mark.parametrize("call, match", [
    (lambda m, b, c: knockout_map(m, b, c, level="neuron"), r"level='neuron' is invalid: allowed"),
    (lambda m, b, c: knockout_map(m, b, c, replacement="noise"), r"replacement='noise' is invalid: allowed"),
    (lambda m, b, c: knockout_map(m, b, None), r"replacement='mean' needs a calibration"),
    (lambda m, b, c: knockout_map(m, b, c, positions=[500]), r"position 500 is invalid: allowed 0\.\.26"),
    (lambda m, b, c: knockout_map(m, b, c, layers=[3]), r"layer=3 is invalid: allowed 0\.\.0"),
    (lambda m, b, c: knockout_map(m, b, c, n_boot=0), r"n_boot=0 out of range"),
    (lambda m, b, c: knockout_map(m, b, c, positions="all", method="incremental"), r"method='incremental' needs"),
    (lambda m, b, c: phase_swap(b, 4), r"delta=4 is invalid: allowed 1 <= \|delta\| < R=4"),
    (lambda m, b, c: activation_patching(m, mapping_swap(b), unit="mlp"), r"unit='mlp' is invalid: allowed"),
    (lambda m, b, c: gate_cycling(m, b, layers=[2]), r"layer=2 is invalid: allowed 0\.\.0"),
    (lambda m, b, c: gate_attribution(m, b, override="one_hot", offset=9), r"offset=9 is invalid: allowed 0\.\.3"),
    (lambda m, b, c: gate_attribution(m, b, override="uniform", target="scores"), r"target='scores' is invalid"),
])
def test_bad_input_raises_value_error_with_the_allowed_range(planted, call, match):
    model, batch, calib = planted
    with pytest.raises(ValueError, match=match):
        call(model, batch, calib)
    assert not has_hooks(model)


def test_clean_and_corrupt_must_have_equal_length(planted):
    _, batch, _ = planted
    longer = RecordLookup(vocab_size=32, n_records=6, n_demos=2).sample(4, 4, seed=0)
    with pytest.raises(ValueError, match=r"equal length: clean has 27 positions, corrupt 29"):
        Pairing.custom(batch, longer)


def test_incremental_path_refuses_a_model_with_hooks(planted):
    model, batch, _ = planted
    with model.hooks(fwd_hooks=[("blocks.0.attn.hook_z", lambda x, hook: x)]):
        with pytest.raises(ValueError, match="without hooks"):
            FinalPositionRun(model, batch.tokens, batch.query_pos)
        m = knockout_map(model, batch, None, replacement="zero", n_boot=10)  # auto falls back to hooks
        assert m.meta["intervention"]["method"] == "hooks"
    assert not has_hooks(model)
