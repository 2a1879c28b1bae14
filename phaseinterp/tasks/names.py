"""Names the tasks and the CLI share, importable without numpy or torch: the padding protocols,
the library's registered task names, the evaluation splits and the task variants of `RecordLookup` (each a set of field overrides)."""

PROTOCOLS = ("prefix", "insequence")

#: The library's registered tasks (`phaseinterp.tasks.TASK_KINDS`; listed here for `--help`).
BUILTIN_TASKS = ("record_lookup", "induction", "text_record_lookup", "prose")

SPLITS = ("eval", "calibration")

VARIANTS: dict[str, dict[str, int]] = {
    "lookup": {},
    "multitoken": {"key_len": 2, "value_len": 2},
    "multikey": {"key_len": 2, "value_len": 2, "n_distractors": 8},
    "multivalue": {"n_values": 2},
    "multiquery": {"n_queries": 4},
}
