"""Deprecated alias: `resolve_model` lives in `phaseinterp.families.resolve`, the one place that
decides what a model runs on. Import it from there (or from `phaseinterp.backends`)."""

import warnings

from phaseinterp.families.resolve import resolve_model

warnings.warn(f"{__name__} is deprecated: import resolve_model from phaseinterp.families.resolve", DeprecationWarning,
              stacklevel=2)

__all__ = ["resolve_model"]
