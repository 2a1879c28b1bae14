"""`phase_sweep` for long contexts: score only each row's query position (`Backend.final_logits`).

`phaseinterp.measure.phase_sweep(backend, batch)` works on every backend, but it asks for logits at
every position ([batch, pos, vocab]: 64 GB per 128K-token row of DeepSeek-V4's 129K vocabulary).
This version computes the next-token logits at `query_pos` only (HF: `logits_to_keep`, and chunked
prefill when the backend has `prefill_chunk`), then hands the per-row outcomes to
`measure.phase_sweep`, so the curve, intervals and provenance are the same.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from jaxtyping import Bool
from torch import Tensor
from tqdm.auto import tqdm

from phaseinterp.backends.load import backend_for
from phaseinterp.measure import PhaseCurve
from phaseinterp.measure import phase_sweep as measure_phase_sweep
from phaseinterp.measure.provenance import model_config
from phaseinterp.tasks import PhaseBatch


def final_correct(model: Any, batch: PhaseBatch, *, batch_size: int = 8, progress: bool = True) -> Bool[Tensor, " batch"]:
    """Top-1 correctness per row from the logits at each row's query position only."""
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size} is out of range: allowed >= 1")
    backend = backend_for(model)
    out = []
    bar = tqdm(batch.minibatches(batch_size), total=math.ceil(len(batch) / batch_size), disable=not progress,
               desc="phase sweep", unit="batch")
    for mb in bar:
        logits = backend.final_logits(mb.tokens, mb.query_pos)
        out.append((logits.argmax(-1).cpu()[:, None] == mb.answers).any(1))
    return torch.cat(out)


def phase_sweep(model: Any, batch: PhaseBatch, *, batch_size: int = 8, stride: int | None = None,
                progress: bool = True, **kwargs: Any) -> PhaseCurve:
    """`measure.phase_sweep` computing logits at the query positions only.

    Args:
        model: a backend, or a model `backend_for` wraps.
        batch: the prompts. batch_size: rows per forward.
        stride: S for the periodicity statistics (default: lcm of the backend's strides when it
            divides the modulus).
        progress: progress bar.
        **kwargs: label, n_boot, n_perm, confidence, seed, config (see `measure.phase_sweep`).

    Example:
        >>> backend = DeepseekV4Backend(model, prefill_chunk=8192)  # doctest: +SKIP
        >>> curve = phase_sweep(backend, deepseek_niah(tok, 131072).sample(256, 8), stride=4)  # doctest: +SKIP
    """
    backend = backend_for(model)
    correct = final_correct(backend, batch, batch_size=batch_size, progress=progress)
    if stride is None and backend.cfg.residue_modulus and batch.modulus % backend.cfg.residue_modulus == 0:
        stride = backend.cfg.residue_modulus
    config = {"model": model_config(backend), "sweep_logits": "final positions only",
              "prefill_chunk": getattr(backend, "prefill_chunk", None), **kwargs.pop("config", {})}
    return measure_phase_sweep(correct, batch, stride=stride, batch_size=batch_size, config=config, **kwargs)
