"""Kept for old imports: the knockout map now has one implementation, `phaseinterp.interventions`.

`phaseinterp.interventions.knockout_map(x, batch, calib, ...)` takes our model, any backend or a
raw HuggingFace model (see `measure.sweep.resolve_model`) and gives the same numbers through
TransformerLens hooks and through nnsight (tested). Prefer importing it from there.
"""

from phaseinterp.interventions.calibration import calibrate
from phaseinterp.interventions.knockout import knockout_logits, knockout_map

__all__ = ["calibrate", "knockout_logits", "knockout_map"]
