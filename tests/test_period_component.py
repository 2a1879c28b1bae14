"""`measure.period_component`: the period-P component of a curve, debiased, with a logical-example bootstrap
(docs/statistics.md, "The period-P component")."""

from __future__ import annotations

import numpy as np
import pytest

from phaseinterp.measure import period_component, power_spectrum

RATES = np.where(np.arange(16) % 8 < 6, 0.9, 0.2)  # period 8 at R = 16: two weak phases in eight
TRUE_PP = 100 * np.sqrt(np.mean((RATES - RATES.mean()) ** 2))  # the whole pattern is period 8: 30.3 pp


def _flat(rng, n=256, R=16):
    """A flat curve whose examples differ in difficulty (rows correlated across residues)."""
    return rng.random((n, R)) < rng.beta(2, 1.5, size=(n, 1))


def test_amplitude_is_the_fourier_norm_at_the_harmonics():
    rng = np.random.default_rng(0)
    x = rng.random((128, 24)) < rng.random(24)
    acc = x.mean(0)
    power = power_spectrum(acc)
    for period in (4, 8, 12):
        k = np.arange(24)
        want = 100 * np.sqrt(power[(k > 0) & (k % (24 // period) == 0)].sum()) / 24
        assert period_component(x, period, n_boot=10).observed_pp == pytest.approx(want)
    assert period_component(x, 24, n_boot=10).observed_pp == pytest.approx(100 * acc.std())  # P = R: all variation
    assert period_component(x, 1, n_boot=10).observed_pp == 0.0


def test_planted_period_is_detected_and_covered():
    rng = np.random.default_rng(1)
    covered = 0
    for i in range(60):
        c = period_component(rng.random((256, 16)) < RATES, 8, n_boot=300, seed=i)
        covered += c.interval_pp[0] <= TRUE_PP <= c.interval_pp[1]
        assert c.above(20.0) and c.lower_pp <= c.amplitude_pp <= c.upper_pp
    assert covered >= 51  # >= 85% at nominal 95%


def test_flat_curves_pass_an_equivalence_margin_and_show_no_effect():
    rng = np.random.default_rng(2)
    zero_lower, below = 0, 0
    for i in range(60):
        c = period_component(_flat(rng), 8, n_boot=300, seed=i)
        zero_lower += c.lower_pp == 0.0
        below += c.below(5.0)
        assert c.noise_pp > 0 and c.observed_pp > c.amplitude_pp  # the plug-in value carries the noise
    assert zero_lower >= 54 and below == 60


def test_reproducible_and_checked():
    x = np.random.default_rng(3).random((64, 8)) < 0.5
    assert period_component(x, 4, seed=5) == period_component(x, 4, seed=5)
    with pytest.raises(ValueError, match="must divide the number of residues R=8"):
        period_component(x, 3)
    with pytest.raises(ValueError, match="0/1 or booleans"):
        period_component(np.full((4, 8), 0.5), 4)
    with pytest.raises(ValueError, match="examples >= 2"):
        period_component(x[:1], 4)
    with pytest.raises(ValueError, match="n_boot=0"):
        period_component(x, 4, n_boot=0)
    with pytest.raises(ValueError, match="confidence=1.0"):
        period_component(x, 4, confidence=1.0)
