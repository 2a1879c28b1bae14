"""Planted ground truth: a hand-set model whose KV head 0 stores exactly the records whose key
sits at phase 0 and KV head 1 those at phase 2 (W = S = 4). Knockout, patching, gate
attribution, gate cycling and gate statistics must each recover exactly that."""

import numpy as np
import pytest
import torch

from phaseinterp.analysis import gate_profiles, gate_statistics
from phaseinterp.interventions import (activation_patching, gate_attribution, gate_cycling, knockout, knockout_map,
                                       mapping_swap, phase_swap, planted_model)
from phaseinterp.measure import phase_sweep
from phaseinterp.tasks import RecordLookup

OWNED = {0: 0, 1: 2}  # KV head -> the phase it owns (key offset); its value offset is phase + 1
NAN = np.nan


@pytest.fixture(scope="module")
def setup():
    model = planted_model(32, stride=4, key_offsets=(0, 2))
    task = RecordLookup(vocab_size=32, n_records=6, n_demos=1)
    batch = task.sample(8, 4, seed=0)
    calib = task.sample(8, 4, seed=0, split="calibration")
    return model, batch, calib


def test_planted_model_is_right_exactly_at_the_owned_phases(setup):
    model, batch, _ = setup
    assert bool((batch.query_pos == batch.tokens.shape[1] - 1).all())  # final position = last token here
    curve = phase_sweep(model, batch, progress=False, n_boot=50, n_perm=50)
    assert curve.accuracy.tolist() == [1.0, 0.0, 1.0, 0.0]


@pytest.mark.parametrize("replacement", ["mean", "zero", "resample"])
def test_knockout_map_recovers_head_and_phases(setup, replacement):
    model, batch, calib = setup
    m = knockout_map(model, batch, calib, replacement=replacement, n_boot=100)  # absolute change, pp
    expected = np.array([[[-100.0, 0.0, 0.0, 0.0], [0.0, 0.0, -100.0, 0.0]]])  # weak phases keep a value: 0
    if replacement == "resample":  # a resampled row may itself carry a retrieved value equal to the answer
        assert np.max(np.abs(m.values - expected)) <= 25
    else:
        np.testing.assert_array_equal(m.values, expected)
        assert m.significant.tolist() == [[[True, False, False, False], [False, False, True, False]]]
    assert not m.masked.any() and m.meta["masked"] is None
    assert m.dims == ("layer", "kv_head", "residue")
    assert m.coverage(threshold=50) == {"L0.KV0": [0], "L0.KV1": [2]}
    assert m.uncovered(50) == [1, 3]  # the weak phases: no head stores them
    assert m.hi[0, 0, 0] < -50 and m.lo[0, 0, 2] <= 0 <= m.hi[0, 0, 2]
    assert m.meta["intervention"]["method"] == "incremental"
    assert m.clean["accuracy"] == [1.0, 0.0, 1.0, 0.0]


def test_relative_change_is_masked_where_clean_accuracy_is_not_reliably_above_chance(setup):
    model, batch, calib = setup
    m = knockout_map(model, batch, calib, change="relative", n_boot=100)
    np.testing.assert_array_equal(m.values, [[[-100.0, NAN, 0.0, NAN], [0.0, NAN, -100.0, NAN]]])
    assert m.masked[0, :, [1, 3]].all()
    assert not m.masked[0, :, [0, 2]].any() and m.meta["masked"]["residues"] == [1, 3]
    assert "interval lower bound is below 0.25" in m.meta["masked"]["reason"]
    assert np.isnan(m.p[0][:, [1, 3]]).all() and m.fdr_family.tolist() == [[[True, False, True, False]] * 2]
    assert (m.p[0, 0, 0], m.p[0, 1, 2]) == (2 / 101, 2 / 101)  # every replicate -100: the floor 2 / (n_boot + 1)
    assert np.isnan(m.lo[0, 0, 1]) and np.isnan(m.hi[0, 1, 3])  # masked cells carry no interval either
    strict = knockout_map(model, batch, calib, change="relative", floor=1.0, n_boot=100)
    assert strict.meta["masked"]["residues"] == [1, 3]  # clean accuracy 1.0 at residues 0 and 2: lower bound 1.0
    with pytest.raises(ValueError, match=r"floor=1.5 out of range \[0, 1\]"):
        knockout_map(model, batch, calib, change="relative", floor=1.5)


def test_knockout_levels_group_query_heads_by_kv_head(setup):
    model, batch, calib = setup
    heads = knockout_map(model, batch, calib, level="head", n_boot=50)
    np.testing.assert_array_equal(np.nan_to_num(heads.values), 0.0)  # one of two redundant query heads: no effect
    layer = knockout_map(model, batch, calib, level="layer", n_boot=50)
    np.testing.assert_array_equal(layer.values, [[[-100.0, 0.0, -100.0, 0.0]]])
    curve = knockout(model, batch, calib, layer=0, kv_head=1, n_boot=50)
    assert curve.accuracy.tolist() == [1.0, 0.0, 0.0, 0.0]


def test_fast_and_naive_knockout_maps_are_identical(setup):
    model, batch, calib = setup
    fast = knockout_map(model, batch, calib, method="incremental", n_boot=100, level="head")
    naive = knockout_map(model, batch, calib, method="hooks", n_boot=100, level="head")
    for a, b in [(fast.values, naive.values), (fast.lo, naive.lo), (fast.hi, naive.hi)]:
        np.testing.assert_array_equal(a, b)


def test_mapping_swap_patching_recovers_head_and_phases(setup):
    model, batch, _ = setup
    m = activation_patching(model, mapping_swap(batch, seed=0), unit="z", level="kv_head", change="normalized")
    v = m.values[0]
    for h, r in OWNED.items():
        assert v[h, r] == pytest.approx(1.0, abs=0.1)  # the owner restores its phase fully
        assert abs(v[1 - h, r]) < 0.1  # the other head does nothing there
    assert np.isnan(v[:, [1, 3]]).all()  # weak phases: clean = corrupt, nothing to restore
    assert m.masked[0, :, [1, 3]].all() and not m.masked[0, :, [0, 2]].any()  # ... and said so
    assert m.meta["masked"]["residues"] == [1, 3] and "nothing to restore" in m.meta["masked"]["reason"]
    assert m.row_labels() == ["L0.KV0", "L0.KV1"]
    hooks = activation_patching(model, mapping_swap(batch, seed=0), unit="z", level="kv_head", method="hooks",
                                change="normalized")
    np.testing.assert_allclose(hooks.values, m.values, atol=1e-5)


def test_phase_swap_patching_recovers_head_and_phases(setup):
    model, batch, _ = setup
    pair = phase_swap(batch, delta=1, residues=[0, 2])  # clean at a strong phase, corrupt one phase later
    assert bool((pair.corrupt.residue == pair.clean.residue + 1).all())
    assert bool((pair.corrupt.tokens.gather(1, pair.corrupt.key_pos[:, None]) ==
                 pair.clean.tokens.gather(1, pair.clean.key_pos[:, None])).all())
    rows = torch.arange(len(pair))[:, None]
    assert torch.equal(pair.corrupt.tokens, pair.clean.tokens[rows, pair.align])  # aligned token for token
    m = activation_patching(model, pair, unit="z", level="kv_head", change="normalized")
    v = m.values[0]
    for h, r in OWNED.items():
        assert v[h, r] > 0.8 and abs(v[1 - h, r]) < 0.2


def test_entries_patching_finds_the_value_branch_of_the_owner(setup):
    model, batch, _ = setup
    with pytest.warns(UserWarning, match="changed no output"):  # key entries are equal in the mapping swap
        m = activation_patching(model, mapping_swap(batch), unit="entries", change="normalized")
    assert m.coords["branch"] == ["key", "value"]
    np.testing.assert_allclose(m.sel(branch="key")[0][:, [0, 2]], 0.0, atol=1e-6)
    for h, r in OWNED.items():
        assert m.sel(layer=0, branch="value", kv_head=h)[r] == pytest.approx(1.0, abs=0.1)


def test_gate_attribution_recovers_value_offset_head_and_phase(setup):
    model, batch, _ = setup
    ga = gate_attribution(model, batch, override="uniform")  # restore real gates into a uniform-gate model
    a = ga.attribution
    assert a.dims == ("layer", "branch", "kv_head", "offset", "residue")
    for h, r in OWNED.items():
        cell = np.unravel_index(np.nanargmax(a.values[..., r]), a.values.shape[:-1])
        assert (a.coords["branch"][cell[1]], cell[2], cell[3]) == ("value", h, r + 1)
    top = a.top(2, by="pos")
    assert sorted(zip(top["kv_head"], top["residue"])) == [(0, 0), (1, 2)]
    assert ga.spearman > 0.8 and ga.exact is not None
    assert np.sign(ga.exact.sel(layer=0, branch="value", kv_head=0, offset=1)[0]) == 1


def test_gate_cycling_moves_the_strong_phases_except_the_boundary(setup):
    model, batch, _ = setup
    before = [p.detach().clone() for p in model.parameters()]
    res = gate_cycling(model, batch, deltas=[1, 2], n_boot=50)
    one, two = res
    assert one.cycled.accuracy.tolist() == [0.0, 1.0, 0.0, 0.0]  # head 0 now keys offset 1; head 1 wraps
    assert one.predicted.tolist() == [0.0, 1.0, 0.0, 1.0]
    assert one.r2 == pytest.approx(1.0) and one.boundary == [3]
    assert one.boundary_predicted == [1.0] and one.boundary_actual == [0.0]  # the boundary stays weak
    assert two.cycled.accuracy.tolist() == [1.0, 0.0, 1.0, 0.0]
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))  # restored


def test_gate_statistics_of_one_hot_gates(setup):
    model, batch, _ = setup
    stats = gate_statistics(model, batch.tokens)
    np.testing.assert_allclose(stats[["static", "per_window"]].values, 1.0, atol=1e-6)
    prof = gate_profiles(model, batch.tokens)
    peaks = prof.loc[prof.groupby(["branch", "kv_head"])["g"].idxmax()]
    assert {(b, h): r for b, h, r in zip(peaks.branch, peaks.kv_head, peaks.phase)} == {
        ("key", 0): 0, ("key", 1): 2, ("value", 0): 0, ("value", 1): 2}  # value profiles rolled by -1
    assert prof.g.max() == pytest.approx(4.0)
