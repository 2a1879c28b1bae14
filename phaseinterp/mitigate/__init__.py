"""Mitigations of phase sensitivity, measured: variants, the equal-budget experiment, its outputs."""

from phaseinterp._lazy import lazy_exports

_EXPORTS = {
    **dict.fromkeys(('VARIANTS', 'Variant', 'entries_per_token', 'variant'), "variants"),
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
