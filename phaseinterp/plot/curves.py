"""Plotly figures of phase curves and of the zoo (never calls `show()`)."""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go

from phaseinterp.measure.curve import PhaseCurve

INTERVALS = ("bootstrap", "wilson", None)
_DASHES = ("dot", "dash", "dashdot", "longdash")


def _as_list(curves: PhaseCurve | Sequence[PhaseCurve] | Mapping[str, PhaseCurve]) -> list[tuple[str, PhaseCurve]]:
    if isinstance(curves, PhaseCurve):
        curves = [curves]
    items = list(curves.items()) if isinstance(curves, Mapping) else [(c.label, c) for c in curves]
    if not items:
        raise ValueError("no curves to plot")
    return [(name or f"curve {i}", c) for i, (name, c) in enumerate(items)]


def phase_figure(curves: PhaseCurve | Sequence[PhaseCurve] | Mapping[str, PhaseCurve], *,
                 interval: str | None = "bootstrap", strides: Sequence[int] | None = None,
                 title: str | None = None) -> go.Figure:
    """Accuracy (%) against residue, one trace per curve, with error bars and stride marks.

    Args:
        curves: a PhaseCurve, a list of them (named by their labels), or a {name: curve} dict.
        interval: "bootstrap" (cluster bootstrap, default), "wilson" or None (no error bars).
        strides: draw a dashed line between residues kS - 1 and kS for each S (window
            boundaries; the last phase of a window, S - 1, is the boundary phase). Default:
            the curves' strides.
        title: figure title (default: the curves' verdicts for one curve, else none).

    Returns:
        A plotly Figure; trace i has x = residues, y = 100 * accuracy, and asymmetric error
        bars to the chosen interval.

    Example:
        >>> from phaseinterp.measure import phase_sweep
        >>> from phaseinterp.plot import save_html
        >>> curve = phase_sweep(model, batch, progress=False, label="tiny W4/S4")
        >>> fig = phase_figure([curve], strides=[4])  # or {"full": full_curve, "W4/S4": curve}
        >>> save_html(fig, "phase.html")  # and plotly.min.js next to it, once per folder
        PosixPath('phase.html')
    """
    if interval not in INTERVALS:
        raise ValueError(f"unknown interval {interval!r}; choose one of: {', '.join(map(str, INTERVALS))}")
    items = _as_list(curves)
    fig = go.Figure()
    offsets = np.linspace(-0.12, 0.12, len(items)) if len(items) > 1 else [0.0]
    for (name, c), dx in zip(items, offsets):
        y = 100 * c.accuracy
        error = None
        if interval is not None:
            lo, hi = (c.boot_lo, c.boot_hi) if interval == "bootstrap" else (c.wilson_lo, c.wilson_hi)
            error = dict(type="data", symmetric=False, array=100 * hi - y, arrayminus=y - 100 * lo)
        fig.add_trace(go.Scatter(
            x=c.residues + dx, y=y, name=name, mode="lines+markers", error_y=error,
            customdata=np.stack([c.residues, c.n], 1),
            hovertemplate="r=%{customdata[0]}<br>accuracy=%{y:.1f}%<br>n=%{customdata[1]}<extra>" + name + "</extra>"))
    strides = sorted({c.stride for _, c in items if c.stride}) if strides is None else list(strides)
    R = max(c.modulus for _, c in items)
    for i, S in enumerate(strides):
        if S < 1:
            raise ValueError(f"stride={S} out of range [1, inf)")
        for k in range(1, (R - 1) // S + 1):
            fig.add_vline(x=k * S - 0.5, line=dict(dash=_DASHES[i % len(_DASHES)], width=1, color="gray"),
                          annotation_text=f"S={S}" if k == 1 else None, annotation_position="top")
    if title is None and len(items) == 1:
        title = f"{items[0][0]}: {items[0][1].verdict()}"
    fig.update_layout(title=title, xaxis_title="residue r = key position mod R", yaxis_title="accuracy (%)",
                      xaxis=dict(tickmode="linear", dtick=1), yaxis=dict(range=[-2, 102]), template="plotly_white")
    return fig


def zoo_figure(rows: Sequence[Mapping], *, protocol: str = "prefix", title: str | None = None) -> go.Figure:
    """Accuracy (%) against residue for every zoo row (`phaseinterp.train.zoo_table`) of one padding
    protocol; runs that did not learn are dashed."""
    fig = go.Figure()
    for r in rows:
        if r["protocol"] != protocol:
            continue
        acc = 100 * np.asarray(r["accuracy"], dtype=float)
        fig.add_trace(go.Scatter(x=np.arange(len(acc)), y=acc, mode="lines+markers", name=r["model"],
                                 line=dict(dash=None if r["learned"] else "dot"),
                                 hovertemplate="r=%{x}<br>accuracy=%{y:.1f}%<extra>" + r["model"] + "</extra>"))
    if not fig.data:
        raise ValueError(f"no zoo rows with protocol={protocol!r}")
    fig.update_layout(title=title or f"The zoo: accuracy by residue ({protocol} padding; dotted: did not learn)",
                      xaxis_title="residue r = key position mod R", yaxis_title="accuracy (%)",
                      yaxis=dict(range=[-2, 102]), template="plotly_white")
    return fig
