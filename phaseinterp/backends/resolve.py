"""Deprecated alias: `resolve_model` lives in `phaseinterp.families.resolve`, the one place that
decides what a model runs on. Import it from there (or from `phaseinterp.backends`)."""

from phaseinterp.families.resolve import resolve_model

__all__ = ["resolve_model"]
