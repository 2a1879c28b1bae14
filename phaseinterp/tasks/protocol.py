"""The `Task` protocol: what every sweep, map, the trainer's evaluation, the report and the CLI ask
of a task, and the registry that names tasks (docs/tasks.md, "Your own task").

A task is any object with

- `name`: the registry name its card carries;
- `sample(n_per_residue, modulus, *, seed=0, split="eval", residues=None) -> PhaseBatch`: prompts
  stratified by residue (`split="calibration"` disjoint from "eval", for knockout means);
- `card() -> dict`: JSON-ready options, `{"task": name, **options}`, from which `task_from_card`
  rebuilds an equal task.

Scoring travels with the batch (`phaseinterp.tasks.scoring`): one answer token scored at
`query_pos` against `answers`, or, with `answer_pos`, a teacher-forced multi-token answer scored by
exact match of every token. So a function that takes a `PhaseBatch` takes any task's batch.

`TASK_KINDS` registers a `TaskKind` (name + `build(**options) -> Task`) like the other registries
(`phaseinterp.registry.Registry`); `make_task(spec, **options)` builds one from a registered name
or an import path "module:Attr" (a Task class, a factory, or a Task instance), which is how the
CLI's `--task` reaches a task defined outside the library.
"""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence, runtime_checkable

from phaseinterp.registry import Registry
from phaseinterp.tasks.batch import PhaseBatch


@runtime_checkable
class Task(Protocol):
    """A phase-stratified task (see the module docstring)."""

    name: str

    def sample(self, n_per_residue: int, modulus: int, *, seed: int = 0, split: str = "eval",
               residues: Sequence[int] | None = None) -> PhaseBatch: ...

    def card(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class TaskKind:
    """A registered task: `build(**options)` returns a `Task` whose card is `{"task": name, **options}`."""

    name: str
    build: Callable[..., Task]
    doc: str = ""


TASK_KINDS: Registry[TaskKind] = Registry(TaskKind, noun="task", arg="kind", field="task")
_BUILTIN_LOADED = []  # non-empty once the library's kinds are registered


def register_task(kind: TaskKind) -> TaskKind:
    """Add a task kind to `TASK_KINDS` (a name already taken raises ValueError); returns it."""
    _builtin()
    return TASK_KINDS.register(kind)


def _builtin() -> None:
    """The library's tasks, registered on first use (their modules import numpy and torch)."""
    if _BUILTIN_LOADED:
        return
    _BUILTIN_LOADED.append(True)
    from phaseinterp.tasks.induction import Induction
    from phaseinterp.tasks.record_lookup import RecordLookup
    from phaseinterp.tasks.niah import text_record_lookup
    from phaseinterp.tasks.prose import ProseNeedle

    for kind in (TaskKind("record_lookup", RecordLookup.from_options, "key-value record lookup (the paper's)"),
                 TaskKind("induction", Induction, "random-token induction, one query at the final position"),
                 TaskKind("text_record_lookup", text_record_lookup, "record lookup from word lists on a HF tokenizer"),
                 TaskKind("prose", ProseNeedle, "needle in a prose haystack, multi-token answer (teacher forced)")):
        TASK_KINDS.register(kind)


def task_kinds() -> list[TaskKind]:
    """Every registered task kind, the library's first."""
    _builtin()
    return list(TASK_KINDS)


def check_task(task: Any) -> Task:
    """`task` if it follows the protocol; ValueError naming what it lacks otherwise."""
    missing = [m for m in ("name", "sample", "card") if not hasattr(task, m)]
    if missing or not callable(task.sample) or not callable(task.card):
        raise ValueError(f"task={task!r} is invalid: allowed an object with name, sample(n_per_residue, modulus, "
                         f"*, seed, split, residues) and card() (phaseinterp.tasks.Task); it lacks {missing or ['callables']}")
    return task


def _imported(spec: str) -> Any:
    module, _, attr = spec.partition(":")
    try:
        obj = importlib.import_module(module)
    except ImportError as err:
        raise ValueError(f"task {spec!r} is invalid: cannot import module {module!r} ({err})") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"task {spec!r} is invalid: module {module!r} has no {attr!r}")
        obj = getattr(obj, part)
    return obj


def make_task(spec: str | Task, **options: Any) -> Task:
    """A task from a registered name ("record_lookup", "induction", ...), an import path
    "module:Attr" (a class or factory called with `options`, or a Task instance when `options` is
    empty), or a Task (returned as is).

    Raises:
        ValueError: an unknown name (listing the registered ones), an import that fails, options the
            task does not take, or an object that is not a Task.

    Example:
        >>> task = make_task("record_lookup", vocab_size=64, n_records=8, n_demos=2)
        >>> task.name, task_from_card(task.card()).card() == task.card()
        ('record_lookup', True)
    """
    if not isinstance(spec, str):
        if options:
            raise ValueError(f"options {sorted(options)} given with a Task instance: allowed none (build it with them)")
        return check_task(spec)
    if ":" in spec:
        obj = _imported(spec)
    else:
        _builtin()
        obj = TASK_KINDS.get(spec).build
    if callable(obj) and not hasattr(obj, "sample") or isinstance(obj, type):
        try:
            obj = obj(**options)
        except TypeError as err:
            raise ValueError(f"task {spec!r}: options {sorted(options)} are invalid ({err})") from None
    elif options:
        raise ValueError(f"task {spec!r} is a Task instance: options {sorted(options)} are invalid (allowed none)")
    return check_task(obj)


def task_from_card(card: dict[str, Any]) -> Task:
    """The task a card describes: `card["task"]` (default "record_lookup": the cards of trained
    checkpoints hold record-lookup options only) built with the other entries."""
    if not isinstance(card, dict):
        raise ValueError(f"card={card!r} is invalid: allowed a dict {{'task': NAME, **options}}")
    options = dict(card)
    return make_task(options.pop("task", "record_lookup"), **options)


def roundtrip(task: Task) -> Task:
    """`task_from_card` of the task's card after a trip through JSON text (what a result file keeps)."""
    return task_from_card(json.loads(json.dumps(check_task(task).card())))


__all__ = ["TASK_KINDS", "Task", "TaskKind", "check_task", "make_task", "register_task", "roundtrip", "task_from_card",
           "task_kinds"]
