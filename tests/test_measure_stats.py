"""Statistics: Wilson, cluster bootstrap coverage, periodicity, spectral share, permutation tests."""

import numpy as np
import pytest
from scipy.stats import binomtest, norm

from phaseinterp.measure import (cluster_bootstrap, percentile_interval, period_baseline, period_share,
                                 periodicity_gap, permutation_test, power_spectrum, wilson_interval)


@pytest.mark.parametrize("confidence", [0.9, 0.95, 0.99])
def test_wilson_matches_scipy_and_closed_forms(confidence):
    k = np.array([0, 1, 3, 5, 17, 50, 99, 100, 7])
    n = np.array([10, 10, 10, 10, 40, 100, 100, 100, 7])
    lo, hi = wilson_interval(k, n, confidence)
    for i in range(len(k)):
        ref = binomtest(int(k[i]), int(n[i])).proportion_ci(confidence_level=confidence, method="wilson")
        assert lo[i] == pytest.approx(ref.low, abs=1e-12) and hi[i] == pytest.approx(ref.high, abs=1e-12)
    z2 = norm.ppf((1 + confidence) / 2) ** 2
    assert lo[0] == 0 and hi[0] == pytest.approx(z2 / (10 + z2))  # k = 0: [0, z^2 / (n + z^2)]
    assert hi[-1] == 1 and lo[-1] == pytest.approx(7 / (7 + z2))  # k = n: [n / (n + z^2), 1]


def test_wilson_edge_cases_and_errors():
    lo, hi = wilson_interval(np.array([0]), np.array([0]))
    assert (lo[0], hi[0]) == (0.0, 1.0)
    with pytest.raises(ValueError, match=r"successes k=11 out of range \[0, n=10\]"):
        wilson_interval(np.array([11]), np.array([10]))
    with pytest.raises(ValueError, match=r"trials n=-1 out of range"):
        wilson_interval(np.array([0]), np.array([-1]))
    with pytest.raises(ValueError, match=r"confidence=1.5 out of range \(0, 1\)"):
        wilson_interval(np.array([1]), np.array([2]), 1.5)


def simulate(rng, groups, clusters, rows_per_cell, rate, icc_beta=None):
    """Bernoulli outcomes; with icc_beta=(a, b) each cluster-group cell has its own rate ~ Beta(a, b)."""
    shape = (clusters, groups)
    p = np.full(shape, rate) if icc_beta is None else rng.beta(*icc_beta, size=shape)
    y = rng.random((rows_per_cell, *shape)) < p
    cluster = np.broadcast_to(np.arange(clusters)[None, :, None], y.shape)
    group = np.broadcast_to(np.arange(groups)[None, None, :], y.shape)
    return y.ravel(), group.ravel().astype(np.int64), cluster.ravel().astype(np.int64)


def test_bootstrap_covers_a_known_rate():
    rng = np.random.default_rng(0)
    hits = []
    for seed in range(5):  # 5 x 60 independent intervals, each from 80 Bernoulli(0.3) rows
        y, g, c = simulate(rng, 60, 80, 1, 0.3)
        lo, hi = percentile_interval(cluster_bootstrap(y, g, c, 60, n_boot=200, seed=seed))
        hits.append((lo <= 0.3) & (0.3 <= hi))
    coverage = np.concatenate(hits).mean()
    assert 0.90 <= coverage <= 0.98, coverage


def test_cluster_bootstrap_keeps_coverage_where_wilson_fails():
    """Eight correlated rows per cluster: rows are not independent, clusters are."""
    rng = np.random.default_rng(1)
    y, g, c = simulate(rng, 150, 40, 8, None, icc_beta=(1.0, 1.0))  # true rate 0.5
    lo, hi = percentile_interval(cluster_bootstrap(y, g, c, 150, n_boot=200, seed=0))
    boot = ((lo <= 0.5) & (0.5 <= hi)).mean()
    k = np.bincount(g, weights=y).astype(np.int64)
    wlo, whi = wilson_interval(k, np.bincount(g))
    wilson = ((wlo <= 0.5) & (0.5 <= whi)).mean()
    assert boot >= 0.88, boot
    assert wilson <= 0.85 and boot - wilson >= 0.1, (boot, wilson)


def test_bootstrap_is_seeded_and_exact_on_constant_data():
    y = np.array([1, 0, 1, 1, 0, 1], bool)
    g = np.array([0, 0, 1, 1, 2, 2])
    c = np.array([0, 1, 0, 1, 0, 1])
    a = cluster_bootstrap(y, g, c, 3, n_boot=50, seed=3)
    assert np.array_equal(a, cluster_bootstrap(y, g, c, 3, n_boot=50, seed=3))
    assert not np.array_equal(a, cluster_bootstrap(y, g, c, 3, n_boot=50, seed=4))
    assert (a[:, 1] == 1).all()  # both clusters correct at group 1
    assert set(np.unique(a[:, 0])) <= {0.0, 0.5, 1.0}
    # one cluster per group: every replicate would redraw the same rows, a zero-width interval
    # whatever the truth, so the group is not estimable (nan); a second cluster makes it estimable
    one = cluster_bootstrap(np.ones(6, bool), g, np.zeros(6, np.int64), 3, n_boot=20)
    assert np.isnan(one).all()
    mixed = cluster_bootstrap(np.ones(6, bool), g, np.array([0, 0, 0, 1, 0, 0]), 3, n_boot=20)
    assert np.isnan(mixed[:, [0, 2]]).all() and (mixed[:, 1] == 1).all()
    with pytest.raises(ValueError, match=r"n_boot=0 out of range"):
        cluster_bootstrap(y, g, c, 3, n_boot=0)


def test_percentile_interval_values():
    reps = np.arange(1001, dtype=float)[:, None] / 1000
    lo, hi = percentile_interval(reps, 0.9)
    assert lo[0] == pytest.approx(0.05) and hi[0] == pytest.approx(0.95)


def test_periodicity_statistics_flag_a_planted_period():
    R, S = 24, 4
    planted = np.tile([0.9, 0.8, 0.85, 0.2], R // S)
    assert periodicity_gap(planted, S) == 0.0
    assert period_share(planted, S) == pytest.approx(1.0)
    assert period_share(planted, 8) == pytest.approx(1.0)  # period 4 is also period 8
    assert period_share(planted, 3) == pytest.approx(0.0, abs=1e-12)
    shifted = planted.copy()
    shifted[5] += 0.3  # one residue breaks the period
    assert periodicity_gap(shifted, S) == pytest.approx(2 * 0.3 / R)
    rng = np.random.default_rng(0)
    shares = [period_share(rng.random(R), S) for _ in range(300)]
    assert np.mean(shares) == pytest.approx(period_baseline(R, S), abs=0.03)
    assert period_baseline(R, S) == pytest.approx(3 / 23)


def test_spectral_share_equals_folded_variance_share():
    rng = np.random.default_rng(2)
    for R, d in [(24, 4), (24, 6), (12, 2), (8, 4)]:
        a = rng.random(R)
        fold = np.array([a[r::d].mean() for r in range(d)])[np.arange(R) % d]
        expect = ((fold - a.mean()) ** 2).sum() / ((a - a.mean()) ** 2).sum()
        assert period_share(a, d) == pytest.approx(expect, rel=1e-10)
        assert power_spectrum(a).sum() == pytest.approx(R * ((a - a.mean()) ** 2).sum())


def test_periodicity_edge_cases():
    assert np.isnan(periodicity_gap(np.ones(4) * 0.5, 4))  # S = R: nothing to compare
    assert np.isnan(period_share(np.ones(8) * 0.5, 4))  # flat curve: no power
    assert np.isnan(period_share(np.array([0.1, np.nan, 0.3, 0.4]), 2))
    with pytest.raises(ValueError, match=r"period=5 must divide the modulus R=24"):
        periodicity_gap(np.zeros(24), 5)


def paired(rng, examples, R, rates):
    residue = np.tile(np.arange(R), examples)
    cluster = np.repeat(np.arange(examples), R)
    return rng.random(examples * R) < np.asarray(rates)[residue], residue, cluster


def test_permutation_tests_flag_planted_and_pass_flat():
    rng = np.random.default_rng(3)
    R, S = 12, 4
    y, r, c = paired(rng, 60, R, np.tile([0.9, 0.9, 0.9, 0.4], R // S))
    assert permutation_test(y, r, c, R, n_perm=200) < 0.01
    assert permutation_test(y, r, c, R, fold=S, n_perm=200) > 0.05
    y, r, c = paired(rng, 60, R, [0.9, 0.9, 0.9, 0.4] + [0.9] * 8)  # weak at residue 3 only
    assert permutation_test(y, r, c, R, fold=S, n_perm=200) < 0.01
    y, r, c = paired(rng, 60, R, np.full(R, 0.6))
    assert permutation_test(y, r, c, R, n_perm=200) > 0.05


def test_permutation_test_is_calibrated_under_the_null():
    rng = np.random.default_rng(4)
    ps = []
    for i in range(60):
        y, r, c = paired(rng, 30, 8, np.full(8, 0.5))
        ps.append(permutation_test(y, r, c, 8, n_perm=99, seed=i))
    ps = np.array(ps)
    assert (ps <= 0.05).mean() <= 0.15 and (ps <= 0.5).mean() == pytest.approx(0.5, abs=0.2)
    assert ps.min() >= 0.01  # (1 + #exceed) / (1 + B) >= 1/100


def test_permutation_edge_cases():
    y = np.array([1, 0, 1, 0], bool)
    r = np.array([0, 1, 0, 1])
    assert permutation_test(y, r, np.arange(4), 2, n_perm=50) == 1.0  # singleton clusters: nothing moves
    with pytest.raises(ValueError, match=r"fold=3 must divide the modulus R=2"):
        permutation_test(y, r, np.zeros(4, np.int64), 2, fold=3)
    with pytest.raises(ValueError, match=r"n_perm=0 out of range"):
        permutation_test(y, r, np.zeros(4, np.int64), 2, n_perm=0)
    with pytest.raises(ValueError, match=r"residues must lie in \[0, modulus=2\)"):
        permutation_test(y, r + 1, np.zeros(4, np.int64), 2)



def _curves(true_acc, n_sims, n_per_residue=32, seed=0):
    from phaseinterp.measure import PhaseCurve

    rng = np.random.default_rng(seed)
    R = len(true_acc)
    residue = np.repeat(np.arange(R), n_per_residue)
    example_id = np.tile(np.arange(n_per_residue), R)  # a logical example is placed at every residue
    for _ in range(n_sims):
        correct = rng.random(len(residue)) < np.asarray(true_acc)[residue]
        yield PhaseCurve.from_correct(correct, residue=residue, example_id=example_id, modulus=R, n_boot=400,
                                      n_perm=10, seed=int(rng.integers(1 << 30)))


@pytest.mark.parametrize("true_acc", [[0.5] * 8, [0.3, 0.7] * 4, [0.9, 0.5, 0.2, 0.6, 0.9, 0.5, 0.2, 0.6]])
def test_the_heldout_gap_is_not_inflated_by_noise_and_its_interval_covers_the_true_gap(true_acc):
    true_gap = 100 * (max(true_acc) - min(true_acc))
    curves = list(_curves(true_acc, n_sims=60))
    covered = np.mean([c.gap_interval[0] <= true_gap <= c.gap_interval[1] for c in curves])
    assert covered >= 0.8  # nominal 0.95; percentile intervals over 16 clusters per half run a little short
    assert abs(np.mean([c.gap_heldout for c in curves]) - true_gap) < 5
    observed = np.mean([c.gap_pp for c in curves])
    assert all(c.gap_interval[0] <= c.gap_heldout <= c.gap_interval[1] for c in curves)
    if true_gap == 0:
        assert observed > 15  # the observed gap of a flat curve: pure noise, which the held-out one removes


def test_a_curve_written_before_heldout_gaps_gets_them_on_load():
    from phaseinterp.measure import PhaseCurve

    c = next(_curves([0.3, 0.7] * 4, n_sims=1))
    old = c.to_dict()
    del old["gap_heldout"]
    old["gap_interval"] = [1.0, 2.0]  # what an old file held: the percentile interval of max - min
    back = PhaseCurve.from_dict(old)
    assert back.gap_heldout == c.gap_heldout and back.gap_interval == c.gap_interval
