"""Per-cell bootstrap p-values and Benjamini-Hochberg control across a map's cells: the p-values
agree with the intervals they share replicates with, BH matches a hand computation, null cells
that pass the uncorrected interval mostly fail BH, p round-trips through files (old files without
it still load), and figures, tables and coverage say which rule they apply."""

import json
import math

import numpy as np
import pytest
import torch

from phaseinterp.analysis import SpecializationMap, stack_maps
from phaseinterp.interventions import stats
from phaseinterp.measure.intervals import percentile_interval
from phaseinterp.measure.pvalues import bh_adjust, bootstrap_p_value, min_n_boot
from phaseinterp.plot import map_figure

torch.set_num_threads(1)
NAN = np.nan
DIMS, COORDS = ("layer", "kv_head", "residue"), {"layer": [0], "kv_head": [0, 1], "residue": [0, 1, 2, 3]}


def test_p_value_by_hand():
    reps = np.array([[1.0, -1.0, 0.0, NAN, 3.0], [2.0, 1.0, 0.0, NAN, NAN], [3.0, 0.5, 0.0, NAN, NAN],
                     [4.0, 2.0, 0.0, NAN, NAN]])
    # cell 0: no replicate <= 0 -> 2 (0 + 1) / 5; cell 1: one -> 2 (1 + 1) / 5; cell 2: all ties at 0 -> 1;
    # cell 3: no finite replicate -> nan; cell 4: one finite replicate (n = 1) -> 2 (0 + 1) / 2 = 1
    np.testing.assert_allclose(bootstrap_p_value(reps), [0.4, 0.8, 1.0, NAN, 1.0])
    assert bootstrap_p_value(np.ones((99, 1)))[0] == pytest.approx(2 / 100)  # the floor: never 0


def test_p_values_agree_with_the_percentile_interval_from_the_same_replicates():
    rng = np.random.default_rng(1)
    C, R, units, n_boot = 60, 4, 40, 2000
    residue, cluster = np.tile(np.arange(R), C), np.repeat(np.arange(C), R)
    base = rng.random(C * R) < 0.6
    # units from no effect to a strong one, so that cells fall on both sides of the boundary and near it
    edited = np.stack([np.where(rng.random(C * R) < s, ~base & (rng.random(C * R) < 0.5) | base, base)
                       ^ (rng.random(C * R) < 0.04) for s in np.linspace(0, 0.5, units)])
    reps = stats.paired_cluster_replicates(base, edited, residue, cluster, R, n_boot=n_boot, seed=2, change="absolute")
    lo, hi = percentile_interval(reps, 0.95)
    p = bootstrap_p_value(reps)
    excludes = (lo > 0) | (hi < 0)
    # the sorted replicates the 2.5% and 97.5% bounds interpolate between (docstring of bootstrap_p_value)
    j, j2 = math.floor(0.025 * (n_boot - 1)), math.floor(0.975 * (n_boot - 1))
    upper = 2 * (max(j + 1, n_boot - 1 - j2) + 1) / (n_boot + 1)
    lower = 2 * (min(j + 1, n_boot - 1 - j2) + 1) / (n_boot + 1)
    assert upper == lower == pytest.approx(0.051, abs=1e-3)  # "p < 0.05 up to the +1 correction"
    assert excludes.sum() >= 10 and (~excludes).sum() >= 10
    assert ((p > 0.01) & (p < 0.2)).sum() >= 5  # cells near the boundary, where a mismatch would show
    assert (p[excludes] <= upper).all() and (p[~excludes] >= lower).all()
    assert ((p < 0.05) <= excludes).all()  # a cell with p < 0.05 always has an interval excluding 0


def test_accuracy_change_and_paired_bootstrap_share_the_replicates():
    rng = np.random.default_rng(0)
    residue, cluster = np.arange(80) % 4, np.arange(80) // 4
    base, edited = rng.random(80) < 0.5, rng.random((3, 80)) < 0.5
    cells = stats.accuracy_change(base, edited, residue, cluster, 4, n_boot=300, seed=4)
    reps = stats.paired_cluster_replicates(base, edited, residue, cluster, 4, n_boot=300, seed=4, change="absolute")
    np.testing.assert_array_equal(cells.p, bootstrap_p_value(reps))
    lo, hi = stats.paired_cluster_bootstrap(base, edited, residue, cluster, 4, n_boot=300, seed=4, change="absolute")
    np.testing.assert_array_equal(cells.lo, lo)
    np.testing.assert_array_equal(cells.hi, hi)


def _map(p, values=None, masked=None, **kw):
    values = -np.ones((1, 2, 4)) if values is None else values
    return SpecializationMap(values, DIMS, COORDS, lo=values - 0.5, hi=values + 0.5, p=np.asarray(p, dtype=float),
                             extras={} if masked is None else {"masked": masked}, **kw)


def test_a_residue_seen_in_one_example_has_no_interval_and_no_p_value():
    """One example at a residue: its bootstrap redraws the same rows every time (a zero-width
    interval, p = 2/(n+1) for any nonzero change), so the cell is not estimable and stays out of BH;
    the point change is still reported."""
    base = np.ones(12, bool)
    edited = np.zeros((1, 12), bool)
    residue = np.array([0] * 4 + [1] * 4 + [2] * 4)
    example = np.array([0] * 4 + [1, 1, 2, 2] + [3, 4, 5, 6])  # residue 0: one example; 1: two; 2: four
    cells = stats.accuracy_change(base, edited, residue, example, 3, change="absolute", n_boot=400)
    assert cells.change.tolist() == [[-100.0, -100.0, -100.0]]
    assert np.isnan([cells.lo[0, 0], cells.hi[0, 0], cells.p[0, 0]]).all()
    assert np.isfinite(cells.p[0, 1:]).all() and (cells.hi[0, 1:] == -100.0).all()
    smap = SpecializationMap(cells.change, ("layer", "residue"), {"layer": [0], "residue": [0, 1, 2]},
                             lo=cells.lo, hi=cells.hi, p=cells.p)
    assert smap.significant_fdr(0.05).tolist() == [[False, True, True]]


def test_bh_matches_a_hand_computation_and_leaves_nan_and_masked_cells_out():
    # family: the 6 finite, unmasked cells. Sorted p 0.001 0.008 0.01 0.03 0.04 0.5, m = 6:
    # m p / rank = 0.006 0.024 0.02 0.045 0.048 0.5 -> running minimum from the top: 0.006 0.02 0.02 0.045 0.048 0.5
    p = np.array([[[0.01, 0.04, 0.001, NAN], [0.03, 0.5, 0.008, 0.0001]]])
    masked = np.zeros((1, 2, 4), dtype=bool)
    masked[0, 1, 3] = True  # the smallest p, but masked: out of the family and never significant
    values = np.where(masked | np.isnan(p), NAN, -1.0)
    m = _map(p, values, masked)
    want = np.array([[[0.02, 0.048, 0.006, NAN], [0.045, 0.5, 0.02, NAN]]])
    np.testing.assert_allclose(m.p_fdr, want)
    np.testing.assert_allclose(bh_adjust(p, m.fdr_family), want)
    assert m.fdr_family.sum() == 6
    assert m.significant_fdr(0.03).tolist() == [[[True, False, True, False], [False, False, True, False]]]
    assert m.significant_fdr(0.05).tolist() == [[[True, True, True, False], [True, False, True, False]]]
    assert m.significant_fdr(0.01).sum() == 1 and not m.significant_fdr(0.9)[0, 1, 3]
    # step-up: p_(k) <= k q / m for the largest such k, every smaller rank with it
    q, ranked = 0.03, np.sort(p[np.isfinite(p) & ~masked])
    k = max(i + 1 for i, v in enumerate(ranked) if v <= (i + 1) * q / 6)
    assert m.significant_fdr(q).sum() == k == 3


def _planted_and_null_map(seed: int) -> tuple[SpecializationMap, np.ndarray]:
    """128 cells: 8 planted (+45 pp: units 0 and 1 at every residue) and 120 null (edited rows drawn
    independently of the base at the same rate), with their planted truth."""
    rng = np.random.default_rng(seed)
    C, R, units = 200, 4, 32
    residue, cluster = np.tile(np.arange(R), C), np.repeat(np.arange(C), R)
    base = rng.random(C * R) < 0.5
    planted = [base | (rng.random(C * R) < 0.9) for _ in range(2)]
    null = [rng.random(C * R) < 0.5 for _ in range(units - 2)]
    change, lo, hi, _, _, p = stats.accuracy_change(base, np.stack(planted + null), residue, cluster, R, n_boot=1000)
    m = SpecializationMap(change[None], DIMS, {"layer": [0], "kv_head": list(range(units)), "residue": list(range(R))},
                          lo=lo[None], hi=hi[None], p=p[None], direction=1)
    truth = np.zeros(m.shape, dtype=bool)
    truth[0, :2] = True
    return m, truth


def test_many_null_cells_give_fewer_fdr_calls_than_uncorrected_ones():
    false_unc = false_fdr = 0
    for seed in range(4):  # four maps, pooled: ~5% of 480 null cells pass the uncorrected interval
        m, truth = _planted_and_null_map(seed)
        fdr, unc = m.significant_fdr(0.05), m.significant
        assert unc[truth].all() and fdr[truth].all()  # every planted cell found both ways
        assert fdr.sum() < unc.sum() and not (fdr & ~unc).any()
        false_unc, false_fdr = false_unc + int((unc & ~truth).sum()), false_fdr + int((fdr & ~truth).sum())
    assert false_unc >= 15 and false_fdr <= false_unc / 3
    # eight strong cells clear BH with 1000 replicates (p floor 2/1001 <= 8 q / 128); a lone one would need 5119
    assert 2 / 1001 <= 8 * 0.05 / 128 and min_n_boot(128) == 5119


def test_p_round_trips_and_the_table_carries_the_adjusted_values(tmp_path):
    m = _map([[[0.001, 0.2, NAN, 0.04], [0.5, 0.002, 0.9, 1.0]]], meta={"confidence": 0.95})
    back = SpecializationMap.load(m.save(tmp_path / "m.json"))
    np.testing.assert_array_equal(back.p, m.p)
    np.testing.assert_array_equal(back.significant_fdr(), m.significant_fdr())
    df = m.to_pandas()
    assert {"p", "p_fdr", "significant", "significant_fdr"} <= set(df.columns)
    row = df[(df.kv_head == 0) & (df.residue == 0)].iloc[0]
    assert row.p == 0.001 and row.p_fdr == pytest.approx(0.001 * 7) and row.significant_fdr
    assert df.significant_fdr.sum() == 2 and df.significant.sum() == 8  # the uncorrected call is kept as it was
    assert "p_fdr" in m.save(tmp_path / "m.csv").read_text().splitlines()[0]
    stacked = stack_maps([m, m], "step", [1, 2])
    assert stacked.p.shape == (2, 1, 2, 4) and stacked.fdr_family.sum() == 14  # one family over both maps


def test_an_old_map_file_without_p_loads_and_says_it_has_no_fdr_call(tmp_path):
    old = _map(np.zeros((1, 2, 4))).to_dict()
    del old["p"]  # written before p-values existed
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    m = SpecializationMap.load(path)
    assert m.p is None and m.p_fdr is None and m.significant_fdr() is None and m.significant.all()
    assert "p" not in m.to_pandas().columns and "BH-FDR" not in repr(m)
    with pytest.raises(ValueError, match="significant='fdr' needs the map's p-values"):
        m.coverage(0.5, significant="fdr")
    assert m.coverage(0.5, significant=True) == m.coverage(0.5, significant="uncorrected") == m.coverage(0.5)
    sig, rule = m.significance("fdr")
    assert sig.all() and rule == "uncorrected 95% interval (no p-values in this map for BH-FDR)"
    assert rule in map_figure(m).layout.title.text


def test_figures_repr_and_coverage_name_the_rule():
    values = np.array([[[-90.0, -80.0, -70.0, 0.0], [-60.0, 0.0, 0.0, 0.0]]])
    p = np.array([[[0.001, 0.04, 0.03, 1.0], [0.045, 1.0, 1.0, 1.0]]])
    m = SpecializationMap(values, DIMS, COORDS, lo=values - 5, hi=np.where(values < 0, values + 5, 5.0), p=p,
                          meta={"intervention": {"kind": "knockout"}, "confidence": 0.95})
    # uncorrected: the four negative cells; BH over 8 cells: only p = 0.001 (adjusted 0.008; the next, 0.08)
    assert m.coverage(50, significant="uncorrected") == {"L0.KV0": [0, 1, 2], "L0.KV1": [0]}
    assert m.coverage(50, significant="fdr") == {"L0.KV0": [0], "L0.KV1": []}
    assert m.coverage(50, significant="fdr", q=0.5)["L0.KV0"] == [0, 1, 2]
    assert m.uncovered(50, significant="fdr") == [1, 2, 3]
    assert m.coverage(50, dim="kv_head", significant="fdr")["L0.residue=0"] == [0]
    fig = map_figure(m)  # default: the FDR call
    assert "(value): not significant, BH-FDR q=0.05" in fig.layout.title.text
    text = np.array(fig.data[-1].text)
    assert text[0, 0] == "-90" and text[0, 1] == "(-80)"
    assert "bootstrap p=0.001" in np.array(fig.data[-1].customdata)[0, 0, 1]
    fig = map_figure(m, significance="uncorrected")
    assert "(value): not significant, uncorrected 95% interval" in fig.layout.title.text
    assert np.array(fig.data[-1].text)[0, 1] == "-80"
    assert "significant: 4 of 8 uncorrected, 1 at BH-FDR q=0.05" in repr(m)
    assert "1 at BH-FDR q=0.05" in m._repr_html_()
    with pytest.raises(ValueError, match=r"significant='bh' is invalid: allowed False, True"):
        m.coverage(50, significant="bh")
    with pytest.raises(ValueError, match=r"which='bh' is invalid: allowed one of \['fdr', 'uncorrected'\]"):
        map_figure(m, significance="bh")


@pytest.mark.parametrize("q", [0.0, 1.0, 1.5, -0.1, float("nan")])
def test_q_outside_the_open_unit_interval_names_the_value_and_the_range(q):
    m = _map(np.full((1, 2, 4), 0.01))
    pattern = rf"q={q!r} out of range \(0, 1\)"
    for call in (lambda: m.significant_fdr(q), lambda: m.coverage(0.5, significant="fdr", q=q),
                 lambda: map_figure(m, q=q), lambda: min_n_boot(10, q)):
        with pytest.raises(ValueError, match=pattern):
            call()
