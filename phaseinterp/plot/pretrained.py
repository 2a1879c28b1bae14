"""Figures of the training-free compression experiments on pretrained models (SmolLM2) and of the
prose needle test (accuracy by depth and phase)."""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go


def phase_rows_figure(rows: Sequence[Mapping], *, grid: str, title: str | None = None) -> go.Figure:
    """Accuracy (%) by phase (target position mod S) of every row of one grid of a
    training-free compression sweep (rows as `smollm2.json` holds them), with the uncompressed model at the
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


def depth_phase_figure(grid, *, title: str | None = None) -> go.Figure:
    """Heatmap of accuracy (%) by depth (rows: share of the context before the needle) and phase
    (columns: residue mod R) of a `measure.DepthPhaseGrid`; hover shows the Wilson interval and the
    rows behind each cell.

    Example:
        >>> from types import SimpleNamespace
        >>> g = SimpleNamespace(accuracy=np.array([[1.0, 0.5]]), lo=np.array([[0.6, 0.1]]), hi=np.array([[1.0, 0.9]]),
        ...                     n=np.array([[4, 4]]), centers=np.array([0.5]), modulus=2, meta={"label": "m"})
        >>> depth_phase_figure(g).data[0].z.tolist()
        [[100.0, 50.0]]
    """
    acc = 100 * np.asarray(grid.accuracy, dtype=float)
    depth = [f"{100 * c:.0f}%" for c in grid.centers]
    text = [[f"{a:.0f}% [{100 * lo:.0f}, {100 * hi:.0f}], n={n}" if n else "no rows"
             for a, lo, hi, n in zip(ra, rl, rh, rn)] for ra, rl, rh, rn in zip(acc, grid.lo, grid.hi, grid.n)]
    fig = go.Figure(go.Heatmap(z=acc, x=list(range(grid.modulus)), y=depth, zmin=0, zmax=100, colorscale="Viridis",
                               text=text, hovertemplate="residue %{x}, depth %{y}: %{text}<extra></extra>",
                               colorbar={"title": "accuracy %"}))
    label = grid.meta.get("label") or ""
    fig.update_layout(title=title or f"accuracy by depth and phase {label}".strip(),
                      xaxis_title=f"phase (anchor position mod {grid.modulus})", yaxis_title="needle depth",
                      template="plotly_white")
    return fig
