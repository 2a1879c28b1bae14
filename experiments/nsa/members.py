"""The NSA zoo: tiny Native Sparse Attention models trained on record lookup with our trainer.

Every member has two layers of NSA (`phaseinterp.model.nsa`), d_model 32, 4 query heads of 16
over 2 KV heads, SwiGLU 96, a compressor MLP of 64 hidden units, and a **sliding window of 8**:
the matched evaluation task (`RecordLookup`, 10 records, 6 demonstrations) puts the target
record at least 13 tokens before the query, so the needle must come through the compressed or
the selected branch. Members differ only in the compressor geometry (W, S) and the number k of
selected blocks (selection block = S). Data, optimizer and schedule are the zoo's
(`recipes.MIXTURE`, `recipes.TRAIN`) with `STEPS` steps (sized to the CPU budget of the session
that trained them, see docs/nsa.md).

Example:
    >>> model_cfg, tcfg = nsa_recipe("w8s8-k2", seed=1)
    >>> model_cfg.describe(), tcfg.seed, nsa_name("w8s8-k2", 1)
    ('NSA W8/S8, select k=2 of 8-token blocks, sliding window 8', 1, 'nsa-w8s8-k2-s1')
"""

from __future__ import annotations

from typing import Any

from phaseinterp.model.nsa.config import NSAConfig
from phaseinterp.train.config import TrainConfig
from phaseinterp.train.recipes import MIXTURE, TRAIN, VOCAB

STEPS = 10000
SLIDING_WINDOW = 8
COMPRESS_HIDDEN = 64
D_HEAD = 16

#: name -> (W, S, k)
NSA_ZOO: dict[str, tuple[int, int, int]] = {
    "w8s8-k0": (8, 8, 0),
    "w8s8-k1": (8, 8, 1),
    "w8s8-k2": (8, 8, 2),
    "w16s8-k2": (16, 8, 2),
}


def nsa_recipe(name: str, seed: int = 0, *, steps: int = STEPS) -> tuple[NSAConfig, TrainConfig]:
    """(NSAConfig, TrainConfig) of NSA zoo member `name` (see `NSA_ZOO`)."""
    if name not in NSA_ZOO:
        raise ValueError(f"unknown NSA zoo member {name!r}: allowed {sorted(NSA_ZOO)}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed={seed!r} is invalid: allowed an integer >= 0")
    W, S, k = NSA_ZOO[name]
    cfg = NSAConfig(vocab_size=VOCAB, compress_block=W, compress_stride=S, num_selected=k,
                    sliding_window=SLIDING_WINDOW, d_head=D_HEAD,
                    compress_mlp_expand_factor=COMPRESS_HIDDEN / (W * D_HEAD))
    # a run shorter than the warm-up (a smoke test) warms up for a tenth of it, as `phaseinterp train --steps`
    warmup = TRAIN.warmup_steps if steps >= TRAIN.warmup_steps else steps // 10
    tcfg = TRAIN.replace(steps=steps, seed=seed, mixture=MIXTURE, checkpoint_every=steps, log_every=50, warmup_steps=warmup)
    return cfg, tcfg


def nsa_name(name: str, seed: int = 0) -> str:
    """Run and card name: `nsa-NAME-sSEED`."""
    return f"nsa-{name}-s{seed}"


def members() -> list[dict[str, Any]]:
    """Every member with its geometry, for tables."""
    return [{"name": n, "window": w, "stride": s, "k": k} for n, (w, s, k) in NSA_ZOO.items()]


__all__ = ["NSA_ZOO", "STEPS", "members", "nsa_name", "nsa_recipe"]
