"""Kept for old imports: `phaseinterp.measure.phase_sweep` is the one phase sweep.

It takes our model, any backend or a raw HuggingFace model, and on a backend computes the
next-token logits at the query positions only (`Backend.final_logits`: HF `logits_to_keep`, and
chunked prefill with `prefill_chunk`), so long contexts never materialize [batch, pos, vocab].
Prefer importing it from `phaseinterp.measure`.
"""

from phaseinterp.measure.sweep import evaluate_correct as final_correct
from phaseinterp.measure.sweep import phase_sweep

__all__ = ["final_correct", "phase_sweep"]
