"""Phase-stratified needle-in-a-haystack tasks, built at the token level (see docs/tasks.md)."""

from typing import TYPE_CHECKING

from phaseinterp._lazy import lazy_exports

if TYPE_CHECKING:  # what a type checker reads; at run time each name is imported on first use
    from phaseinterp.tasks.batch import PhaseBatch as PhaseBatch
    from phaseinterp.tasks.induction import (
        Induction as Induction, induction_batch as induction_batch, induction_final_batch as induction_final_batch)
    from phaseinterp.tasks.layout import (
        Geometry as Geometry, MatchedTargets as MatchedTargets, default_modulus as default_modulus)
    from phaseinterp.tasks.names import PROTOCOLS as PROTOCOLS, SPLITS as SPLITS, VARIANTS as VARIANTS
    from phaseinterp.tasks.pools import TokenPools as TokenPools, to_str_tokens as to_str_tokens
    from phaseinterp.tasks.prose import ProseNeedle as ProseNeedle
    from phaseinterp.tasks.protocol import (
        TASK_KINDS as TASK_KINDS, Task as Task, TaskKind as TaskKind, make_task as make_task,
        register_task as register_task, task_from_card as task_from_card, task_kinds as task_kinds)
    from phaseinterp.tasks.record_lookup import RecordLookup as RecordLookup
    from phaseinterp.tasks.text import TASKS as TASKS, TextRecordLookup as TextRecordLookup

_EXPORTS = {
    **dict.fromkeys(('PhaseBatch',), "batch"),
    **dict.fromkeys(('Induction', 'induction_batch', 'induction_final_batch'), "induction"),
    **dict.fromkeys(('TASK_KINDS', 'Task', 'TaskKind', 'make_task', 'register_task', 'task_from_card', 'task_kinds'),
                    "protocol"),
    **dict.fromkeys(('Geometry', 'MatchedTargets', 'default_modulus'), "layout"),
    **dict.fromkeys(('TokenPools', 'to_str_tokens'), "pools"),
    **dict.fromkeys(('PROTOCOLS', 'SPLITS', 'VARIANTS'), "names"),
    **dict.fromkeys(('RecordLookup',), "record_lookup"),
    **dict.fromkeys(('ProseNeedle',), "prose"),
    **dict.fromkeys(('TextRecordLookup', 'TASKS'), "text"),
}
__all__ = sorted(_EXPORTS)
if not TYPE_CHECKING:  # a type checker reads the imports above: an unknown name is an error there too
    __getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
