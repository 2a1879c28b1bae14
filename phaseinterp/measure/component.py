"""How much of a residue curve varies with period P: the period-P component, with an interval from the
logical examples (docs/statistics.md, "The period-P component").

The phase gap (best minus worst residue) asks whether accuracy depends on the phase at all; the
period-P component asks how large the part of that dependence is that repeats every P residues. With
X[e, r] the correctness of logical example e at residue r (`correct_matrix`), A(r) its column means
and F(s) the mean of A(r) over r = s mod P, the component is c(r) = F(r mod P) - mean A, the curve
folded at period P. Its size is the root mean square over residues,

    amplitude = sqrt(mean_r c(r)^2) = sqrt(sum_{k in H} |a_k|^2) / R,   H = {0 < k < R : (R/P) | k}

(Parseval; a_k the curve's Fourier coefficients, `power_spectrum`): the curve's Fourier components at
the harmonics of period P, in percentage points. A period-P square wave between a and b, half its
phases at each, has amplitude (b - a) / 2; a curve whose best and worst residue differ by g pp has an
amplitude of at most g / 2.

Sampling noise alone gives a flat curve a positive amplitude, so the plug-in value is biased upwards
(as the observed gap is). The estimate here removes that bias exactly: with Z_e the period-P component
of example e's row and Z its mean over examples,

    D = |Z|^2 / R - noise^2,   noise^2 = sum_e |Z_e - Z|^2 / ((E - 1) E R)

is an unbiased estimate of the true mean square (noise^2 estimates what the noise adds), and
`amplitude_pp` = 100 sqrt(max(D, 0)). The interval resamples logical examples (E draws with
replacement, numpy PCG64 seeded by `seed`): each replicate's D_b is unbiased for the sample's own
plug-in mean square, so the replicates are shifted back by noise^2 (the bootstrap's bias), and the
bounds are percentiles of D_b - noise^2, turned into amplitudes by sqrt(max(., 0)).

Example:
    >>> rng = np.random.default_rng(0)
    >>> rates = np.where(np.arange(16) % 8 < 6, 0.9, 0.2)  # period 8: two weak phases in eight
    >>> c = period_component(rng.random((256, 16)) < rates, 8, n_boot=500)
    >>> round(c.amplitude_pp), c.lower_pp > 25  # true amplitude 30.3 pp
    (30, True)
    >>> flat = period_component(rng.random((256, 16)) < 0.6, 8, n_boot=500)
    >>> flat.upper_pp < 3.0, flat.below(5.0)
    (True, True)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from beartype import beartype
from jaxtyping import Shaped, jaxtyped


@dataclass(frozen=True)
class PeriodComponent:
    """The period-P component of one curve (all values in percentage points).

    `amplitude_pp` is the debiased root mean square of the folded curve; `observed_pp` the plug-in
    value (noise included); `noise_pp` what sampling noise adds to it (the observed value of a truly
    flat curve is about this); `interval_pp` the two-sided bootstrap interval at `confidence`;
    `lower_pp` and `upper_pp` the one-sided bounds at `confidence` (an equivalence test uses
    `upper_pp`, a test for an effect `lower_pp`)."""

    period: int
    modulus: int
    n_examples: int
    amplitude_pp: float
    observed_pp: float
    noise_pp: float
    interval_pp: tuple[float, float]
    lower_pp: float
    upper_pp: float
    confidence: float
    n_boot: int
    seed: int

    def below(self, margin_pp: float) -> bool:
        """Equivalence: the one-sided upper bound lies below `margin_pp`."""
        return self.upper_pp < margin_pp

    def above(self, margin_pp: float) -> bool:
        """An effect beyond `margin_pp`: the one-sided lower bound lies above it."""
        return self.lower_pp > margin_pp

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _fold(x: np.ndarray, period: int) -> np.ndarray:
    """Rows of x [n, R] projected on the period-`period` patterns minus their mean (the component)."""
    n, R = x.shape
    folded = x.reshape(n, R // period, period).mean(1)
    return np.tile(folded, R // period) - x.mean(1, keepdims=True)


@jaxtyped(typechecker=beartype)
def period_component(correct: Shaped[np.ndarray, "example residue"], period: int, *, n_boot: int = 2000,  # noqa: F821
                     seed: int = 0, confidence: float = 0.95) -> PeriodComponent:
    """The period-`period` component of the curve of a correctness matrix, with a logical-example
    bootstrap (module docstring; docs/statistics.md, "The period-P component").

    Args:
        correct: X[e, r], 0/1 or booleans, one row per logical example and one column per residue
            (`correct_matrix`, or `unpack_correct` of a stored table).
        period: P, a divisor of the number of residues R. P = R measures all of the curve's variation
            (nothing to fold); P = 1 gives 0.
        n_boot: bootstrap replicates, >= 1.
        seed: numpy PCG64 seed of the resampling.
        confidence: of the interval and of each one-sided bound, in (0, 1).

    Returns:
        A `PeriodComponent`.
    """
    x = np.asarray(correct)
    if x.shape[0] < 2 or x.shape[1] < 1:
        raise ValueError(f"period_component: correct must be [examples >= 2, residues >= 1], got shape {x.shape}")
    if x.dtype != bool and not np.isin(x, (0, 1)).all():
        raise ValueError("period_component: correct must hold 0/1 or booleans")
    E, R = x.shape
    if isinstance(period, bool) or not 1 <= period <= R or R % period:
        raise ValueError(f"period_component: period={period!r} must divide the number of residues R={R}")
    if n_boot < 1:
        raise ValueError(f"n_boot={n_boot} out of range [1, inf)")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence={confidence} out of range (0, 1)")
    z = _fold(x.astype(np.float64), period)  # Z_e, [E, R]
    sq = (z * z).sum(1)  # |Z_e|^2

    def mean_square(weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(unbiased mean square D, plug-in mean square) for example weights [B, E] summing to E."""
        zbar = weights @ z / E
        plug = (zbar * zbar).sum(1)
        noise = (weights @ sq - E * plug) / ((E - 1) * E)
        return (plug - noise) / R, plug / R

    d_obs, plug_obs = (v[0] for v in mean_square(np.ones((1, E))))
    noise_obs = plug_obs - d_obs
    w = np.random.default_rng(seed).multinomial(E, np.full(E, 1.0 / E), size=n_boot).astype(np.float64)
    reps = mean_square(w)[0] - noise_obs
    a = 1 - confidence
    lo2, hi2, lo1, hi1 = np.quantile(reps, [a / 2, 1 - a / 2, a, 1 - a])

    def pp(v: float) -> float:
        return float(100 * np.sqrt(max(v, 0.0)))

    return PeriodComponent(period=int(period), modulus=R, n_examples=E, amplitude_pp=pp(d_obs),
                           observed_pp=pp(plug_obs), noise_pp=pp(noise_obs), interval_pp=(pp(lo2), pp(hi2)),
                           lower_pp=pp(lo1), upper_pp=pp(hi1), confidence=float(confidence), n_boot=int(n_boot),
                           seed=int(seed))


__all__ = ["PeriodComponent", "period_component"]
