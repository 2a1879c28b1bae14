"""Mitigations of phase sensitivity, measured: variants, the equal-budget experiment, its outputs."""

from phaseinterp.mitigate.variants import VARIANTS, Variant, entries_per_token, variant

__all__ = ["VARIANTS", "Variant", "entries_per_token", "variant"]
