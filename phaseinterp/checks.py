"""Argument checks shared across layers (the backends' final-position paths and the interventions), written
once: each raises ValueError naming the bad value and the allowed range (docs/errors.md)."""

from __future__ import annotations

from typing import Any


def check_at_least_one(name: str, value: Any) -> int:
    """Row and token budgets and replicate counts (`max_rows`, `base_tokens`, `n_boot`): integers >= 1.

    Example:
        >>> check_at_least_one("max_rows", 0)
        Traceback (most recent call last):
        ...
        ValueError: max_rows=0 out of range: must be an integer >= 1
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}={value!r} out of range: must be an integer >= 1")
    return value


__all__ = ["check_at_least_one"]
