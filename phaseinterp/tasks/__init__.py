"""Phase-stratified needle-in-a-haystack tasks, built at the token level (see docs/tasks.md)."""

from phaseinterp.tasks.batch import PhaseBatch
from phaseinterp.tasks.layout import PROTOCOLS, Geometry, MatchedTargets, default_modulus
from phaseinterp.tasks.pools import TokenPools
from phaseinterp.tasks.record_lookup import SPLITS, VARIANTS, RecordLookup
from phaseinterp.tasks.text import TextRecordLookup

TASKS = {"record_lookup": RecordLookup, "text_record_lookup": TextRecordLookup}

__all__ = ["PROTOCOLS", "SPLITS", "TASKS", "VARIANTS", "Geometry", "MatchedTargets", "PhaseBatch",
           "RecordLookup", "TextRecordLookup", "TokenPools", "default_modulus"]
