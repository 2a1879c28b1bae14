"""The recipe rule: model and training config for any compressor, by one rule.

`rule_recipe(window, stride, ...)` builds a `(ModelConfig, TrainConfig)` by one documented rule
(docs/training.md, "The recipe rule"), so a stride nobody has trained yet trains the same way as
those that were:

- model: Qwen3-style, 2 layers, d_model `WIDTH`, 4 query heads of `D_HEAD` (full attention:
  `D_HEAD_FULL`), SwiGLU 3 x d_model,
  `kv_heads` KV heads, both layers compressed alike (or full attention), exact local window 16;
- data: the shared lookup + language mixture (`recipes.MIXTURE`: 64-token rows, haystack cap
  growing from 2 to 10 records over the first 500 steps, half the rows contiguous); evaluation
  (cards, phase tables) lengthens the rows where residues mod lcm(S, 8) need it;
- init: gate offset biases drawn from Normal(0, `GATE_BIAS_INIT_STD`) (random, seed-dependent
  symmetry breaking among offsets);
- windows of `ALIGNED_FROM_WINDOW` tokens or more, and uniform gates, start phase-aligned: for the first
  `ALIGNED_STEPS` steps every final query's key sits at one phase mod `table_period(S)` (two
  periods), drawn from the seed (`aligned_phase`); the other phases come in after that;
- optimizer: the shared AdamW schedule (`recipes.TRAIN`), `steps_for(window)` steps.
- long rows (`seq_len` above 64, e.g. 256): `long_mixture(seq_len, max_records)`, the same mixture
  with up to `max_records` records, 3-15 demonstrations and a records curriculum over
  `LONG_CURRICULUM_STEPS` steps, at least `LONG_MIN_STEPS` steps; every arm of a table gets the same
  `lr` (never one per arm).

"Learned" = the best residue reaches `LEARNED_BEST` on the matched task (a compressed model may
still fail most residues: that is the effect).

Example:
    >>> model_cfg, tcfg = rule_recipe(6, 6)
    >>> model_cfg.strides, model_cfg.d_model, tcfg.mixture.seq_len, period(6)
    ((6,), 64, 64, 24)
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from phaseinterp.config import CompressionConfig, ModelConfig, renamed_keyword, uniform_schedule
from phaseinterp.presets import DEEPSEEK_CSA
from phaseinterp.train.config import TrainConfig
from phaseinterp.train.data import Mixture
from phaseinterp.train.evaluate import LEARNED_BEST
from phaseinterp.train.recipes import MIXTURE, TRAIN, VOCAB

WIDTH = 64
D_HEAD = 64
#: Full attention keeps the small heads of the shipped `full` model: at d_head 64 one of two seeds
#: stayed at 29% lookup accuracy for 5000 steps, at 16 the same seed passed 97% by step 650.
D_HEAD_FULL = 16
GATE_BIAS_INIT_STD = 2.0
#: No W12/S12 or W16/S16 run (nor uniform averaging) learned without the phase-aligned start (docs/training.md).
#: Aligning windows 9-11 too was tried in the rule's generalization sweep: no aligned W10 run learned, and
#: W10/S5 learned without it (docs/training.md, "The rule's generalization sweep").
ALIGNED_FROM_WINDOW = 12
ALIGNED_STEPS = 2000
#: Records the rule's rows leave undemonstrated (`Mixture.min_undemonstrated`). 3 removes the
#: exclusion shortcut every unlearned run took, but W8/S8 then learned in 2 of 6 seeds against
#: 4 of 6 with 1 (docs/training.md, "The exclusion shortcut"), so the rule keeps 1.
MIN_UNDEMONSTRATED = 1
N_HEADS = 4
LOCAL_WINDOW = 16
#: Long rows: demonstrations per row (each one an answer the loss reads) and the records curriculum.
LONG_MAX_DEMOS = 15
LONG_CURRICULUM_STEPS = 1000
LONG_MIN_STEPS = 8000
LAYOUTS = ("generic", "deepseek-csa", "full")


def period(model_period: int | None = None, **deprecated: Any) -> int:
    """Residue modulus R of phase tables for a model of period P (`model_period`, the lcm of its
    strides): lcm(P, 8) (full attention, None: 8). The old name `stride=` still works, with a
    DeprecationWarning."""
    model_period = renamed_keyword("period", deprecated, "stride", "model_period", model_period)
    return _lcm_with_8(model_period)


def _lcm_with_8(model_period: int | None) -> int:
    return 8 if model_period is None else math.lcm(model_period, 8)


def table_period(period: int | None = None, **deprecated: Any) -> int:
    """Residue modulus of a phase table for a model of period P (the lcm of its strides; None for full
    attention): lcm(P, 8), doubled until it spans two periods, so that "A(r) = A(r + P)" can be
    tested (P = 2, 4 -> 8; 6, 12 -> 24; 8 -> 16; 16 -> 32; full: 8). The old name `stride=` of
    `period` still works, with a DeprecationWarning."""
    period = renamed_keyword("table_period", deprecated, "stride", "period", period)
    R = _lcm_with_8(period)
    while period is not None and R < 2 * period:
        R *= 2
    return R


def aligned_phase(seed: int, modulus: int) -> int:
    """The phase of a phase-aligned start: drawn from the run seed (not chosen by looking at runs)."""
    return int(np.random.default_rng([0xA1, seed]).integers(modulus))


def aligned_by_rule(comp: CompressionConfig | None) -> bool:
    """Whether the rule starts this compressor phase-aligned (None: full attention): windows of
    `ALIGNED_FROM_WINDOW` or more, and uniform gates (no offset bias to break the tie among offsets)."""
    return comp is not None and (comp.window >= ALIGNED_FROM_WINDOW or comp.gate == "uniform")


def steps_for(window: int | None, seq_len: int = 64) -> int:
    """Training steps of the rule: 2000 + 375 W (W4: 3500, W8: 5000, W16: 8000); full attention
    5000 (at 2000 steps it was still climbing: 65% mean on the matched task). Rows longer than 64
    tokens take at least `LONG_MIN_STEPS` (W8/S8 with 56 records in 256-token rows was at 2% training
    accuracy after 3,544 steps and learned by 8,000: assets/results/long_rows/)."""
    steps = 5000 if window is None else 2000 + 375 * window
    return steps if seq_len <= 64 else max(steps, LONG_MIN_STEPS)


def long_mixture(seq_len: int, max_records: int, vocab_size: int = VOCAB) -> Mixture:
    """The rule's mixture on rows of `seq_len` tokens with 2..`max_records` records over a vocabulary of
    `vocab_size` (`MIXTURE` otherwise: 3-`LONG_MAX_DEMOS` demonstrations, at most records - 1; the
    records cap grows over `LONG_CURRICULUM_STEPS` steps). 64-token rows with 10 records are `MIXTURE`."""
    _check("seq_len", seq_len, 16)
    _check("max_records", max_records, 2)
    _check("vocab_size", vocab_size, 8)
    if (seq_len, max_records, vocab_size) == (MIXTURE.seq_len, MIXTURE.max_records, MIXTURE.vocab_size):
        return MIXTURE
    demos = min(LONG_MAX_DEMOS, max_records - 1)
    need = 2 + 2 * max_records + 2 * demos
    if seq_len < need:
        raise ValueError(f"seq_len={seq_len} is invalid with max_records={max_records}: allowed >= {need} (BOS, "
                         f"{max_records} records, {demos} demonstrations and the query)")
    return dataclasses.replace(MIXTURE, vocab_size=vocab_size, seq_len=seq_len, max_records=max_records,
                               min_demos=min(MIXTURE.min_demos, demos), max_demos=demos, curriculum_steps=LONG_CURRICULUM_STEPS)


def _check(name: str, value: Any, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name}={value!r} is invalid: allowed an integer >= {low}")


def rule_recipe(window: int | None = None, stride: int | None = None, *, gate: str | None = None, kv_heads: int = 1,
                rope: bool = True, layout: str = "generic", width: int = WIDTH, seed: int = 0,
                aligned: bool | None = None, min_undemonstrated: int | None = None, d_head: int | None = None,
                offset_bias: bool = True, payload: str = "per_offset", rope_dims: int | None = None,
                qk_norm: bool = True, aligned_modulus: int | None = None, seq_len: int = 64, max_records: int = 10,
                lr: float | None = None, vocab_size: int = VOCAB) -> tuple[ModelConfig, TrainConfig]:
    """(ModelConfig, TrainConfig) of the recipe rule.

    Args:
        window, stride: W and S of the compressor (layout "generic"); both None for
            layout="full" or "deepseek-csa" (CSA is W8/S4 by construction).
        gate: "scalar" (default), "vector" or "uniform" for the generic layout; deepseek-csa has
            vector gates.
        kv_heads: KV heads per layer: a divisor of the 4 query heads, or a multiple of 4 (then the
            model has as many query heads, one per KV head).
        rope: False drops RoPE from the compressed layers (queries, local keys and entries).
        layout: "generic", "deepseek-csa" (DeepSeek-V4's CSA compressor) or "full" attention.
        width: d_model (MLP 3 x width); 64 on CPU (256 fits a GPU's time). Head size,
            data, steps and schedule do not change with it.
        seed: model and data seed.
        aligned: phase-aligned start (None: the rule's choice, `aligned_by_rule`).
        aligned_modulus: the modulus of the aligned start (None: the rule's, `table_period`).
        min_undemonstrated: `Mixture.min_undemonstrated` (None: the rule's, `MIN_UNDEMONSTRATED`).
        d_head: head size (None: the rule's, `D_HEAD`; full attention `D_HEAD_FULL`); a
            control can give full attention the compressed models' 64.
        offset_bias, payload, rope_dims: the paper's controlled variants of the generic layout: no
            offset bias b_i, one "shared" payload map instead of "per_offset" maps, partial RoPE on
            `rope_dims` trailing channels (None: RoPE on all, or none with rope=False).
        qk_norm: False drops QK-norm (the paper's "no QK-norm" variant).
        seq_len, max_records, vocab_size: the training rows and vocabulary (`long_mixture`; 64, 10 and
            256: `MIXTURE`).
        lr: peak learning rate (None: `recipes.TRAIN`'s 3e-3); a table gives all its arms one.

    Raises:
        ValueError: naming the bad argument and what is allowed.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout={layout!r} is invalid: allowed one of {list(LAYOUTS)}")
    _check("kv_heads", kv_heads, 1)
    if N_HEADS % kv_heads and kv_heads % N_HEADS:
        raise ValueError(f"kv_heads={kv_heads} is invalid: allowed a divisor of the {N_HEADS} query heads (1, 2, 4) "
                         f"or a multiple of {N_HEADS}")
    _check("width", width, 8)
    _check("seed", seed, 0)
    if d_head is not None:
        _check("d_head", d_head, 1)
    if layout == "deepseek-csa" and gate not in (None, "vector"):
        raise ValueError(f"gate={gate!r} is invalid for layout='deepseek-csa': allowed 'vector' (DeepSeek-V4's CSA gates)")
    gate = gate or ("vector" if layout == "deepseek-csa" else "scalar")
    if layout == "generic":
        if window is None or stride is None:
            raise ValueError("layout='generic' needs window and stride (e.g. window=8, stride=8)")
        _check("window", window, 1)
        _check("stride", stride, 1)
        if rope_dims is not None and not rope:
            raise ValueError(f"rope_dims={rope_dims} is invalid with rope=False: partial RoPE needs RoPE")
        spec = CompressionConfig(window=window, stride=stride, gate=gate, offset_bias=offset_bias, payload=payload,
                                 rope="none" if not rope else "full" if rope_dims is None else "partial",
                                 rope_dims=rope_dims, local_window=LOCAL_WINDOW)
    else:
        if not offset_bias or payload != "per_offset" or rope_dims is not None:
            raise ValueError(f"layout={layout!r}: offset_bias, payload and rope_dims apply to layout='generic' only")
        if window is not None or stride is not None:
            raise ValueError(f"layout={layout!r} fixes the window and stride: pass neither (got window={window!r}, "
                             f"stride={stride!r})")
        if layout == "full":
            if not rope or gate != "scalar":  # the default
                raise ValueError("layout='full' has no compressor: --no-rope and --gate apply to compressed layouts only")
            spec = "full"
        else:
            spec = dataclasses.replace(DEEPSEEK_CSA, rope="partial" if rope else "none",
                                       rope_dims=DEEPSEEK_CSA.rope_dims if rope else None, local_window=LOCAL_WINDOW)
    comp = None if spec == "full" else spec
    model_cfg = ModelConfig(vocab_size=vocab_size, d_model=width, n_layers=2, n_heads=max(N_HEADS, kv_heads),
                            n_kv_heads=kv_heads, d_head=d_head or (D_HEAD_FULL if comp is None else D_HEAD), d_mlp=3 * width,
                            n_ctx=max(512, 2 * seq_len), layers=uniform_schedule(2, spec), gate_bias_init_std=GATE_BIAS_INIT_STD,
                            qk_norm=qk_norm)
    steps = steps_for(None if comp is None else comp.window, seq_len)
    if aligned is None:
        aligned = aligned_by_rule(comp)
    if aligned and comp is None:
        raise ValueError("aligned=True is invalid for layout='full': a phase-aligned start needs a compressor")
    if aligned_modulus is not None:
        _check("aligned_modulus", aligned_modulus, 1)
        if not aligned:
            raise ValueError(f"aligned_modulus={aligned_modulus} applies only with the aligned start (aligned=True, or a "
                             f"window of {ALIGNED_FROM_WINDOW} or more, or uniform gates)")
    mixture = dataclasses.replace(long_mixture(seq_len, max_records, vocab_size), min_undemonstrated=MIN_UNDEMONSTRATED if min_undemonstrated is None
                                  else min_undemonstrated)
    if aligned:
        modulus = aligned_modulus or table_period(model_cfg.residue_modulus)
        mixture = dataclasses.replace(mixture, aligned_steps=ALIGNED_STEPS, aligned_modulus=modulus,
                                      aligned_phase=aligned_phase(seed, modulus))
    tcfg = TRAIN.replace(steps=steps, seed=seed, mixture=mixture, checkpoint_every=steps, log_every=50,
                         lr=TRAIN.lr if lr is None else lr)
    return model_cfg, tcfg


__all__ = ["ALIGNED_FROM_WINDOW", "ALIGNED_STEPS", "D_HEAD", "D_HEAD_FULL", "LAYOUTS", "LEARNED_BEST", "LOCAL_WINDOW",
           "LONG_CURRICULUM_STEPS", "LONG_MAX_DEMOS", "LONG_MIN_STEPS", "MIN_UNDEMONSTRATED", "N_HEADS", "WIDTH", "aligned_by_rule",
           "aligned_phase", "long_mixture", "period",
           "rule_recipe", "steps_for", "table_period"]
