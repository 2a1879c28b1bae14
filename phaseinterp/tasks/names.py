"""Names the tasks and the CLI share, importable without numpy or torch: the padding protocols,
the evaluation splits and the task variants of `RecordLookup` (each a set of field overrides)."""

PROTOCOLS = ("prefix", "insequence")

SPLITS = ("eval", "calibration")

VARIANTS: dict[str, dict[str, int]] = {
    "lookup": {},
    "multitoken": {"key_len": 2, "value_len": 2},
    "multikey": {"key_len": 2, "value_len": 2, "n_distractors": 8},
    "multivalue": {"n_values": 2},
    "multiquery": {"n_queries": 4},
}
