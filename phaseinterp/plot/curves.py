"""Plotly figures of phase curves and of tables of models (never calls `show()`)."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import plotly.graph_objects as go

from phaseinterp.config import renamed_keyword

#: A `phaseinterp.measure.PhaseCurve`, read by its attributes: measure's objects draw themselves with
#: these figures (`_repr_html_`), so this floor never imports them.
PhaseCurve = Any

INTERVALS = ("bootstrap", "wilson", None)
_DASHES = ("dot", "dash", "dashdot", "longdash")


def _as_list(curves: PhaseCurve | Sequence[PhaseCurve] | Mapping[str, PhaseCurve]) -> list[tuple[str, PhaseCurve]]:
    if hasattr(curves, "accuracy") and hasattr(curves, "modulus"):  # one curve
        curves = [curves]
    items = list(curves.items()) if isinstance(curves, Mapping) else [(c.label, c) for c in curves]
    if not items:
        raise ValueError("no curves to plot")
    return [(name or f"curve {i}", c) for i, (name, c) in enumerate(items)]


def phase_figure(curves: PhaseCurve | Sequence[PhaseCurve] | Mapping[str, PhaseCurve], *,
                 interval: str | None = "bootstrap", periods: Sequence[int] | None = None,
                 title: str | None = None, **deprecated: Any) -> go.Figure:
    """Accuracy (%) against residue, one trace per curve, with error bars and period marks.

    Args:
        curves: a PhaseCurve, a list of them (named by their labels), or a {name: curve} dict.
        interval: "bootstrap" (cluster bootstrap, default), "wilson" or None (no error bars).
        periods: draw a dashed line between residues kP - 1 and kP for each P (window
            boundaries when P is a stride; the last phase of a window, P - 1, is the boundary
            phase). Default: the curves' periods. The old name `strides=` still works, with a
            DeprecationWarning.
        title: figure title (default: the curves' verdicts for one curve, else none).

    Returns:
        A plotly Figure; trace i has x = residues, y = 100 * accuracy, and asymmetric error
        bars to the chosen interval.

    Example:
        >>> from phaseinterp.measure import phase_sweep
        >>> from phaseinterp.plot import save_html
        >>> curve = phase_sweep(model, batch, progress=False, label="tiny W4/S4")
        >>> fig = phase_figure([curve], periods=[4])  # or {"full": full_curve, "W4/S4": curve}
        >>> save_html(fig, "phase.html")  # and plotly.min.js next to it, once per folder
        PosixPath('phase.html')
    """
    periods = renamed_keyword("phase_figure", deprecated, "strides", "periods", periods)
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
    periods = sorted({c.period for _, c in items if c.period}) if periods is None else list(periods)
    R = max(c.modulus for _, c in items)
    for i, P in enumerate(periods):
        if P < 1:
            raise ValueError(f"period={P} out of range [1, inf)")
        for k in range(1, (R - 1) // P + 1):
            fig.add_vline(x=k * P - 0.5, line=dict(dash=_DASHES[i % len(_DASHES)], width=1, color="gray"),
                          annotation_text=f"P={P}" if k == 1 else None, annotation_position="top")
    if title is None and len(items) == 1:
        title = f"{items[0][0]}: {items[0][1].verdict()}"
    fig.update_layout(title=title, xaxis_title="residue r = key position mod R", yaxis_title="accuracy (%)",
                      xaxis=dict(tickmode="linear", dtick=1), yaxis=dict(range=[-2, 102]), template="plotly_white")
    return fig


def table_figure(rows: Sequence[Mapping], *, protocol: str = "prefix", title: str | None = None) -> go.Figure:
    """Accuracy (%) against residue for every row of a results table (rows with `model`, `protocol`,
    `accuracy` by residue and `learned`, as a study's table writes them)
    of one padding protocol; runs that did not learn are dotted."""
    fig = go.Figure()
    for r in rows:
        if r["protocol"] != protocol:
            continue
        acc = 100 * np.asarray(r["accuracy"], dtype=float)
        fig.add_trace(go.Scatter(x=np.arange(len(acc)), y=acc, mode="lines+markers", name=r["model"],
                                 line=dict(dash=None if r["learned"] else "dot"),
                                 hovertemplate="r=%{x}<br>accuracy=%{y:.1f}%<extra>" + r["model"] + "</extra>"))
    if not fig.data:
        raise ValueError(f"no rows with protocol={protocol!r}: allowed {sorted({r['protocol'] for r in rows})}")
    fig.update_layout(title=title or f"Accuracy by residue ({protocol} padding; dotted: did not learn)",
                      xaxis_title="residue r = key position mod R", yaxis_title="accuracy (%)",
                      yaxis=dict(range=[-2, 102]), template="plotly_white")
    return fig


def zoo_figure(*args: Any, **kwargs: Any) -> go.Figure:
    """Deprecated name of `table_figure` (kept so that old notebooks run; it warns)."""
    import warnings

    warnings.warn("phaseinterp.plot.zoo_figure is deprecated: use phaseinterp.plot.table_figure (same arguments)",
                  DeprecationWarning, stacklevel=2)
    return table_figure(*args, **kwargs)
