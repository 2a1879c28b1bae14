"""Argument checks shared by the interventions, written once: each raises ValueError naming the
bad value and the allowed range (docs/errors.md)."""

from __future__ import annotations

from phaseinterp.checks import check_at_least_one


def check_position(p: int, seq_len: int) -> int:
    """An absolute position in [0, seq_len)."""
    if not 0 <= p < seq_len:
        raise ValueError(f"position {p} is invalid: allowed 0..{seq_len - 1}")
    return p


__all__ = ["check_at_least_one", "check_position"]
