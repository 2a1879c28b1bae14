"""Figures of the training-free compression experiments on pretrained models (SmolLM2)."""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go


def phase_rows_figure(rows: Sequence[Mapping], *, grid: str, title: str | None = None) -> go.Figure:
    """Accuracy (%) by phase (target position mod S) of every row of one grid of
    `experiments/smollm2` (rows of `smollm2.json`), with the uncompressed model at the
    same S dashed.

    Example:
        >>> rows = [{"grid": "g", "setting": "a", "stride": 2, "phase_accuracy": [0.5, 0.1]},
        ...         {"grid": "baseline", "setting": "none", "stride": 2, "phase_accuracy": [0.7, 0.7]}]
        >>> len(phase_rows_figure(rows, grid="g").data)
        2
    """
    chosen = [r for r in rows if r["grid"] == grid]
    if not chosen:
        raise ValueError(f"grid={grid!r} is invalid: allowed {sorted({r['grid'] for r in rows})}")
    strides = {r["stride"] for r in chosen}
    base = [r for r in rows if r["grid"] == "baseline" and r["stride"] in strides]
    fig = go.Figure()
    for r in base + chosen:
        acc = 100 * np.asarray(r["phase_accuracy"], dtype=float)
        fig.add_trace(go.Scatter(x=np.arange(len(acc)), y=acc, mode="lines+markers", name=r["setting"],
                                 line=dict(dash="dash" if r["grid"] == "baseline" else None),
                                 hovertemplate="phase %{x}<br>accuracy=%{y:.1f}%<extra>" + r["setting"] + "</extra>"))
    fig.update_layout(title=title or f"SmolLM2 induction accuracy by phase: {grid} (dashed: uncompressed)",
                      xaxis_title="phase = copied token's position mod S", yaxis_title="accuracy (%)",
                      yaxis=dict(range=[-2, 102]), template="plotly_white")
    return fig
