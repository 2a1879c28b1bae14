"""Is a residue curve periodic with period P (the lcm of the strides)? Lag-P differences and spectral power."""

from __future__ import annotations

from typing import Any

import numpy as np
from beartype import beartype
from jaxtyping import Float, jaxtyped

from phaseinterp.config import renamed_keyword


def _check_period(modulus: int, period: int) -> None:
    if not 1 <= period <= modulus or modulus % period:
        raise ValueError(f"period={period} must divide the modulus R={modulus} (1 <= period <= R)")


@jaxtyped(typechecker=beartype)
def periodicity_gap(accuracy: Float[np.ndarray, " residue"], period: int | None = None, **deprecated: Any) -> float:
    """Mean absolute lag-P difference of the residue curve (the paper's periodicity check).

        G(P) = (1/R) sum_{r=0}^{R-1} |A(r) - A((r + P) mod R)|

    G(P) = 0 for a curve of period P; a periodic curve has G(P) small while the gap
    max A - min A is large. Needs P | R; uninformative when P = R (returns nan), and nan if
    any A(r) is nan (an empty residue).

    Args:
        accuracy: A(r) for r = 0..R-1, as fractions.
        period: P, a divisor of R (the old name `stride=` still works, with a DeprecationWarning).

    Example:
        >>> periodicity_gap(np.array([0.9, 0.1, 0.9, 0.1]), 2), periodicity_gap(np.array([0.9, 0.1, 0.9, 0.5]), 2)
        (0.0, 0.2)
    """
    period = renamed_keyword("periodicity_gap", deprecated, "stride", "period", period)
    if period is None:
        raise TypeError("periodicity_gap() missing required argument: 'period'")
    R = accuracy.shape[0]
    _check_period(R, period)
    if period == R or np.isnan(accuracy).any():
        return float("nan")
    return float(np.mean(np.abs(accuracy - np.roll(accuracy, -period))))


@jaxtyped(typechecker=beartype)
def power_spectrum(accuracy: Float[np.ndarray, " residue"]) -> Float[np.ndarray, " residue"]:
    """Power |a_k|^2 of the centred residue curve at frequencies k = 0..R-1 (period R/k).

        a_k = sum_{r=0}^{R-1} (A(r) - mean A) exp(-2 pi i k r / R)

    a_0 = 0; |a_k| = |a_{R-k}|; by Parseval sum_k |a_k|^2 = R sum_r (A(r) - mean A)^2.
    """
    return np.abs(np.fft.fft(accuracy - accuracy.mean())) ** 2


@jaxtyped(typechecker=beartype)
def period_share(accuracy: Float[np.ndarray, " residue"], period: int) -> float:
    """Share of the curve's spectral power at period `period` (d) and its harmonics.

        share(d) = sum_{k in H} |a_k|^2 / sum_{k=1}^{R-1} |a_k|^2,   H = {k : 0 < k < R, (R/d) | k}

    the frequencies of all period-d patterns. Equivalently (Parseval) the share of variance
    explained by folding the curve at period d: with F(s) the mean of A(r) over r = s mod d,
    share(d) = sum_r (F(r mod d) - mean A)^2 / sum_r (A(r) - mean A)^2. 1 for a period-d
    curve; (d - 1)/(R - 1) expected for a structureless one (see `period_baseline`). nan when
    d = R (trivially 1), when the curve is flat, or when any A(r) is nan.

    Example:
        >>> round(period_share(np.array([0.9, 0.2, 0.9, 0.2, 0.9, 0.2]), 2), 6)
        1.0
    """
    R = accuracy.shape[0]
    _check_period(R, period)
    if period == R or np.isnan(accuracy).any():
        return float("nan")
    power = power_spectrum(accuracy)
    total = power[1:].sum()
    if total <= 1e-24 * R:
        return float("nan")
    k = np.arange(1, R)
    return float(power[1:][k % (R // period) == 0].sum() / total)


def period_baseline(modulus: int, period: int) -> float:
    """Expected `period_share` of a curve with no structure (i.i.d. noise): (d - 1)/(R - 1)."""
    _check_period(modulus, period)
    return (period - 1) / (modulus - 1) if modulus > 1 else float("nan")


#: share of the residue curve's variance that period-d patterns must explain for d to be its period
PERIOD_SHARE = 0.9


def dominant_period(accuracy: np.ndarray) -> int | None:
    """The smallest divisor d < R of R whose period-d harmonics carry at least `PERIOD_SHARE` of
    the centred curve's spectral power (`period_share`; equivalently, folding the curve at d
    keeps 90% of its variance). None when the curve is flat or no d < R explains it.

    Example:
        >>> dominant_period(np.array([0.1, 0.9, 0.9, 0.1] * 4)), dominant_period(np.array([0.5, 0.2, 0.9, 0.1]))
        (4, None)
    """
    acc = np.asarray(accuracy, dtype=float)
    R = len(acc)
    if R < 2 or np.isnan(acc).any() or np.ptp(acc) == 0:
        return None
    return next((d for d in range(1, R) if R % d == 0 and period_share(acc, d) >= PERIOD_SHARE), None)
