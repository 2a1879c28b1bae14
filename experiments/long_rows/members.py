"""The controlled experiment on long rows: its arms, the rule-generalization sweep, and the one recipe
they all train by (`phaseinterp.train.rule.rule_recipe` on `ROW_TOKENS`-token rows, one learning rate).

The task (records per row) and the learning rate are chosen once, before the table, by the
calibration rule of `calibration.py`; every arm then gets the same values.

Example:
    >>> model_cfg, tcfg = recipe("w24s12", seed=1, records=48, lr=1e-3)
    >>> tcfg.mixture.seq_len, tcfg.mixture.max_records, tcfg.lr, tcfg.steps
    (256, 48, 0.001, 11000)
"""

from __future__ import annotations

from typing import Any

from phaseinterp.config import ModelConfig
from phaseinterp.train.config import TrainConfig
from phaseinterp.train.rule import rule_recipe

#: Shortest rows: 8 windows of the largest W in the table (24) need 192 tokens; the rows hold 256 or more.
ROW_TOKENS = 256
#: The arms of the table (issue 41), each trained with `SEEDS`; full attention has the compressed
#: arms' head size (d_head 64).
ARMS: dict[str, dict[str, Any]] = {
    "full": {"layout": "full", "d_head": 64},
    "full-kv4": {"layout": "full", "d_head": 64, "kv_heads": 4},
    "w8s8": {"window": 8, "stride": 8},
    "w8s8-kv4": {"window": 8, "stride": 8, "kv_heads": 4},
    "w8s8-kv8": {"window": 8, "stride": 8, "kv_heads": 8},
    "w8s4": {"window": 8, "stride": 4},
    "w12s12": {"window": 12, "stride": 12},
    "w16s16": {"window": 16, "stride": 16},
    "w24s12": {"window": 24, "stride": 12},
    "w8s8-uniform": {"window": 8, "stride": 8, "gate": "uniform"},
}
SEEDS = (0, 1, 2, 3)
#: The rule's generalization sweep of issue 32, redone on long rows (2 seeds; W24/S12 is also an arm).
SWEEP: dict[str, dict[str, Any]] = {f"w{w}s{s}": {"window": w, "stride": s}
                                    for w, s in ((3, 3), (6, 6), (10, 10), (20, 20), (6, 3), (10, 5), (14, 7), (24, 12))}
SWEEP_SEEDS = (0, 1)
MEMBERS: dict[str, dict[str, Any]] = {**ARMS, **SWEEP}


def recipe(member: str, seed: int, *, records: int, lr: float, seq_len: int = ROW_TOKENS, vocab_size: int = 256
           ) -> tuple[ModelConfig, TrainConfig]:
    """The configs of one run: `member`'s architecture, the shared long-row recipe."""
    if member not in MEMBERS:
        raise ValueError(f"unknown long-row member {member!r}: allowed {sorted(MEMBERS)}")
    if seq_len < ROW_TOKENS:
        raise ValueError(f"seq_len={seq_len} is invalid: allowed >= {ROW_TOKENS} (8 windows of W24)")
    return rule_recipe(**MEMBERS[member], seed=seed, seq_len=seq_len, max_records=records, lr=lr, vocab_size=vocab_size)


def run_name(member: str, seed: int) -> str:
    """The run and card name: `long-MEMBER-sSEED`."""
    return f"long-{member}-s{seed}"


def table_runs() -> list[tuple[str, int]]:
    """(member, seed) of every run of the table and the sweep, each once."""
    runs = [(m, s) for m in ARMS for s in SEEDS]
    return runs + [(m, s) for m in SWEEP for s in SWEEP_SEEDS if (m, s) not in runs]


__all__ = ["ARMS", "MEMBERS", "ROW_TOKENS", "SEEDS", "SWEEP", "SWEEP_SEEDS", "recipe", "run_name", "table_runs"]
