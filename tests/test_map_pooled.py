"""Each unit tested once with its residues pooled (`SpecializationMap.pooled`): a unit that lowers accuracy
a little at every residue passes BH over units while no cell of it passes BH over the map; knockout and
patching maps carry the pooled test, equal to the accuracy change over all rows, through their files."""

import numpy as np
import pytest
import torch

from phaseinterp.analysis import SpecializationMap
from phaseinterp.interventions import activation_patching, knockout_map, mapping_swap, stats
from phaseinterp.interventions.planted import planted_model
from phaseinterp.measure.specialization import POOLED
from phaseinterp.tasks import RecordLookup

torch.set_num_threads(1)


def _synthetic_map(seed: int = 0, n_boot: int = 4000) -> SpecializationMap:
    """16 units over 64 examples x 8 residues (one row each): unit 0 flips right answers to wrong a
    quarter of the time and wrong to right a twentieth (-10 pp on average, everywhere); the other 15
    flip a tenth of rows either way (no effect)."""
    rng = np.random.default_rng(seed)
    C, R = 64, 8
    residue, cluster = np.tile(np.arange(R), C), np.repeat(np.arange(C), R)
    base = rng.random(C * R) < 0.5
    flip = lambda down, up: np.where(base, rng.random(C * R) >= down, rng.random(C * R) < up)  # noqa: E731
    edited = np.stack([flip(0.25, 0.05)] + [flip(0.1, 0.1) for _ in range(15)])
    cells = stats.accuracy_change(base, edited, residue, cluster, R, n_boot=n_boot, seed=1)
    shape = (16, 1, R)
    pooled = stats.pooled_change(base, edited, cluster, n_boot=n_boot, seed=1, shape=shape[:-1])
    return SpecializationMap(cells.change.reshape(shape), ("layer", "kv_head", "residue"),
                             {"layer": list(range(16)), "kv_head": [0], "residue": list(range(R))},
                             lo=cells.lo.reshape(shape), hi=cells.hi.reshape(shape), p=cells.p.reshape(shape),
                             extras=pooled,
                             quantity="absolute accuracy change (pp)")


def test_a_unit_a_little_worse_at_every_residue_passes_pooled_and_no_cell_of_it_passes_the_map():
    m = _synthetic_map()
    assert m.significant_fdr(0.05)[0].sum() == 0  # 128 cells: -10 pp at 64 rows per cell is within noise
    table = m.pooled()
    assert table["unit"].tolist()[:2] == ["L0.KV0", "L1.KV0"]
    assert table["significant_fdr"].tolist() == [True] + [False] * 15  # 16 tests: it passes, no null unit does
    assert table["value"][0] < -5 and table["hi"][0] < 0
    # by hand: BH over the 16 pooled p-values
    p = np.sort(table["p"].to_numpy())
    assert table["p_fdr"].min() == pytest.approx(min(np.minimum.accumulate((p * 16 / np.arange(1, 17))[::-1])))
    assert "pooled over residues (BH-FDR q=0.05 over 16 units):\n    L0.KV0: -" in str(m)


def test_the_pooled_change_is_the_change_over_all_rows_and_its_interval_brackets_it():
    rng = np.random.default_rng(3)
    base, edited = rng.random(60) < 0.6, rng.random((2, 60)) < 0.4
    out = stats.pooled_change(base, edited, np.arange(60) // 3, n_boot=500, seed=0)
    np.testing.assert_allclose(out["pooled"], 100 * (edited.mean(1) - base.mean()))
    assert (out["pooled_lo"] <= out["pooled"]).all() and (out["pooled"] <= out["pooled_hi"]).all()
    rel = stats.pooled_change(base, edited, np.arange(60) // 3, change="relative", n_boot=500, seed=0)
    np.testing.assert_allclose(rel["pooled"], 100 * (edited.mean(1) - base.mean()) / base.mean())


def test_knockout_and_patching_maps_carry_the_pooled_test_through_their_files(tmp_path):
    model = planted_model(64, stride=4, key_offsets=(0, 2))  # KV head h owns phase 2h
    task = RecordLookup(vocab_size=64, n_records=8, n_demos=2)
    batch, calib = task.sample(6, 4, seed=1), task.sample(6, 4, seed=1, split="calibration")
    m = knockout_map(model, batch, calib, n_boot=200, progress=False)
    table = m.pooled()
    # rows are balanced over residues, so the pooled change is the mean of the unit's cells
    np.testing.assert_allclose(table["value"], m.values.mean(-1).reshape(-1))
    assert table["value"].tolist() == [-25.0, -25.0] and table["significant_fdr"].all()
    again = SpecializationMap.load(m.save(tmp_path / "map.json"))
    for k in POOLED:
        np.testing.assert_array_equal(again.extras[k], m.extras[k])
    assert "pooled" not in m.to_pandas().columns  # the long table keeps one row per cell
    patched = activation_patching(model, mapping_swap(batch), unit="z", level="kv_head", rel_min=0,
                                  change="normalized", n_boot=200)
    pooled = patched.pooled()
    assert pooled.attrs["quantity"] == "absolute accuracy change (pp)"  # normalized values, pp test
    np.testing.assert_allclose(pooled["value"], np.nanmean(patched.extras["change_pp"], -1).reshape(-1))


def test_a_map_without_the_pooled_test_says_so():
    m = SpecializationMap(np.zeros((1, 1, 2)), ("layer", "kv_head", "residue"),
                          {"layer": [0], "kv_head": [0], "residue": [0, 1]})
    with pytest.raises(ValueError, match="no pooled test"):
        m.pooled()
    assert "pooled" not in str(m)
