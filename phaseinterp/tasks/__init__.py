"""Phase-stratified needle-in-a-haystack tasks, built at the token level (see docs/tasks.md)."""

from phaseinterp._lazy import lazy_exports

_EXPORTS = {
    **dict.fromkeys(('PhaseBatch',), "batch"),
    **dict.fromkeys(('induction_batch', 'induction_final_batch'), "induction"),
    **dict.fromkeys(('Geometry', 'MatchedTargets', 'default_modulus'), "layout"),
    **dict.fromkeys(('TokenPools',), "pools"),
    **dict.fromkeys(('PROTOCOLS', 'SPLITS', 'VARIANTS'), "names"),
    **dict.fromkeys(('RecordLookup',), "record_lookup"),
    **dict.fromkeys(('TextRecordLookup', 'TASKS'), "text"),
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
