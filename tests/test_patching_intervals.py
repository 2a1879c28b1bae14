"""Patching maps carry, per cell, the accuracy restored in percentage points with the knockout maps'
paired cluster-bootstrap interval and a significance flag: a planted owner is significant, a unit
that changes nothing is not, and every interval covers its point estimate."""

import numpy as np
import pytest

from phaseinterp.interventions import activation_patching, knockout_map, mapping_swap, phase_swap, planted_model
from phaseinterp.interventions import stats
from phaseinterp.interventions.knockout import is_correct
from phaseinterp.interventions.runner import final_logits
from phaseinterp.tasks import RecordLookup

OWNED = {0: 0, 1: 2}  # planted: KV head -> the phase it owns


@pytest.fixture(scope="module")
def setup():
    model = planted_model(32, stride=4, key_offsets=(0, 2))
    batch = RecordLookup(vocab_size=32, n_records=6, n_demos=1).sample(8, 4, seed=0)
    return model, batch


def test_a_planted_owner_is_significant_and_a_null_unit_is_not(setup):
    model, batch = setup
    m = activation_patching(model, mapping_swap(batch, seed=0), unit="z", level="kv_head", n_boot=300)
    assert m.quantity == "absolute accuracy change (pp)" and m.clip == 100.0 and m.direction == 1
    v, sig = m.values[0], m.significant[0]
    for h, r in OWNED.items():
        assert v[h, r] == 100.0 and sig[h, r]  # the corrupt run is wrong on the clean answer; the owner fixes it
        assert v[1 - h, r] == 0.0 and not sig[1 - h, r]  # the other head restores nothing there
        assert m.lo[0, h, r] > 50.0
    assert not sig[:, [1, 3]].any() and (v[:, [1, 3]] == 0).all()  # weak phases: defined (0 pp), not significant
    assert not m.masked.any() and m.meta["masked"] is None  # pp changes need no mask
    finite = np.isfinite(m.values)
    assert finite.all() and (m.lo[finite] <= m.values[finite]).all() and (m.values[finite] <= m.hi[finite]).all()
    df = m.to_pandas()
    assert {"lo", "hi", "significant", "normalized", "acc_patched"} <= set(df.columns)
    assert df.loc[(df.unit == "L0.KV0") & (df.residue == 0), "significant"].item()


def test_the_normalized_metric_and_the_pp_change_are_both_carried(setup):
    model, batch = setup
    pair = phase_swap(batch, 1, residues=[0, 2])
    pp = activation_patching(model, pair, unit="z", level="kv_head", n_boot=200, seed=3)
    norm = activation_patching(model, pair, unit="z", level="kv_head", n_boot=200, seed=3, change="normalized")
    assert norm.lo is None and norm.quantity == "normalized logit difference restored" and norm.clip == 1.0
    np.testing.assert_array_equal(pp.extras["normalized"], norm.values)
    assert norm.p is None and pp.p.shape == pp.shape  # no interval on normalized values, so no p
    for ext, arr in (("change_pp", pp.values), ("change_pp_lo", pp.lo), ("change_pp_hi", pp.hi), ("change_pp_p", pp.p)):
        np.testing.assert_array_equal(norm.extras[ext], arr)
    assert norm.masked[0][:, [1, 3]].all() and pp.meta["intervention"]["change"] == "absolute"
    for h, r in OWNED.items():
        assert norm.values[0, h, r] > 0.8 and pp.values[0, h, r] > 50 and pp.significant[0, h, r]


def test_the_interval_is_the_knockout_maps_bootstrap(setup):
    model, batch = setup
    pair = mapping_swap(batch, seed=0)
    with pytest.warns(UserWarning, match="changed no output"):  # key entries are equal in a mapping swap
        m = activation_patching(model, pair, unit="entries", n_boot=150, seed=5)
    assert not m.significant[0, 0].any() and m.significant[0, 1, 0, 0] and m.significant[0, 1, 1, 2]
    assert m.dims == ("layer", "branch", "kv_head", "residue") and m.coords["branch"] == ["key", "value"]
    corrupt = final_logits(model, pair.corrupt.tokens, pair.corrupt.query_pos)
    base = is_correct(corrupt, pair.clean.answers).numpy()
    patched = np.stack([is_correct(final_logits(model, pair.corrupt.tokens, pair.corrupt.query_pos, [(
        f"blocks.0.attn.compress_{b}.hook_out", _copy_head(model, pair, b, h))]), pair.clean.answers).numpy()
        for b in ("k", "v") for h in (0, 1)])
    res, ids = pair.clean.residue.numpy(), pair.clean.example_id.numpy()
    lo, hi = stats.paired_cluster_bootstrap(base, patched, res, ids, 4, n_boot=150, seed=5, change="absolute")
    np.testing.assert_array_equal(m.lo[0].reshape(4, 4), lo)
    np.testing.assert_array_equal(m.hi[0].reshape(4, 4), hi)
    assert stats.paired_bootstrap_relative is stats.paired_cluster_bootstrap  # the former name still works
    calib = RecordLookup(vocab_size=32, n_records=6, n_demos=1).sample(8, 4, seed=0, split="calibration")
    k = knockout_map(model, batch, calib, n_boot=150, seed=5)  # the knockout map's cells: the same helper
    clean = is_correct(final_logits(model, batch.tokens, batch.query_pos), batch.answers).numpy()
    point, klo, khi, _, acc, kp = stats.accuracy_change(clean, _knocked(model, batch, calib), batch.residue.numpy(),
                                                    batch.example_id.numpy(), 4, n_boot=150, seed=5)
    for got, want in ((k.values, point), (k.lo, klo), (k.hi, khi), (k.extras["acc_knockout"], acc), (k.p, kp)):
        np.testing.assert_array_equal(got.reshape(2, 4), want)


def _copy_head(model, pair, branch: str, head: int):
    from phaseinterp.interventions.runner import capture

    name = f"blocks.0.attn.compress_{branch}.hook_out"
    src = capture(model, pair.clean.tokens, [name])[name]

    def hook(x, hook):
        x = x.clone()
        x[:, :, head] = src[:, :, head]
        return x
    return hook


def _knocked(model, batch, calib) -> np.ndarray:
    from phaseinterp.interventions import head_units, knockout_logits

    _, ko, _ = knockout_logits(model, batch, head_units(model.cfg, "kv_head"), calib)
    return is_correct(ko, batch.answers).numpy()


def test_accuracy_change_flags_a_planted_effect_and_not_a_noisy_null():
    rng = np.random.default_rng(0)
    n, R = 400, 4
    residue, cluster = np.arange(n) % R, np.arange(n) // 2  # two rows per logical example
    base = rng.random(n) < 0.5
    effect = base | (rng.random(n) < 0.6)  # fixes ~60% of the wrong rows: +30 pp
    null = rng.random(n) < 0.5  # unrelated to the base, same accuracy in expectation
    point, lo, hi, acc_base, _, p = stats.accuracy_change(base, np.stack([effect, null]), residue, cluster, R, n_boot=1000)
    assert (lo[0] > 0).all() and (point[0] > 15).all()
    assert ((lo[1] < 0) & (hi[1] > 0)).all()  # the null's interval includes 0 at every residue
    assert (p[0] < 0.01).all() and (p[1] > 0.05).all()  # and the p-values from the same replicates agree
    assert ((lo <= point) & (point <= hi)).all()
    np.testing.assert_allclose(acc_base, [base[residue == r].mean() for r in range(R)])


def test_bad_patching_statistics_name_the_value(setup):
    model, batch = setup
    pair = mapping_swap(batch, seed=0)
    with pytest.raises(ValueError, match=r"change='relative' is invalid: allowed one of \['absolute', 'normalized'\]"):
        activation_patching(model, pair, change="relative")
    with pytest.raises(ValueError, match=r"n_boot=0 out of range: must be an integer >= 1"):
        activation_patching(model, pair, n_boot=0)
    with pytest.raises(ValueError, match=r"change='pp' is invalid: allowed one of \['absolute', 'relative'\]"):
        stats.accuracy_change(np.ones(2, bool), np.ones((1, 2), bool), np.zeros(2, int), np.arange(2), 1, change="pp")
