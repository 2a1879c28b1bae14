"""What Jupyter shows for a PhaseCurve or a SpecializationMap (their `_repr_html_` call these):
the figure (`phase_figure`, `map_figure`) that works offline, the repr line, and the numbers
folded under it.

Offline: the first figure a Python process shows carries plotly.js inline (4.8 MB, the copy
that ships with plotly, as `assets/results/plotly.min.js`); the later ones use that copy, which
the page already holds. A notebook saved with its outputs keeps that first output: clear it and
the later figures have no plotly.js on reopening; rerun the notebook (or `reset_embedding()`
then display again) to put one back."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import plotly.graph_objects as go

#: The objects drawn here call this module from their `_repr_html_`, so it reads them by their
#: attributes and never imports them (no import cycle): a PhaseCurve, a SpecializationMap.
PhaseCurve = SpecializationMap = Any

_state = {"embedded": False}


def reset_embedding() -> None:
    """Make the next figure shown carry plotly.js again (e.g. after clearing a notebook's outputs)."""
    _state["embedded"] = False


def notebook_html(fig: go.Figure) -> str:
    """The figure as an HTML fragment for a notebook output: a plotly div, plotly.js inline in the
    first one of the process (never the CDN)."""
    out = fig.to_html(full_html=False, include_plotlyjs=not _state["embedded"])
    _state["embedded"] = True
    return out


def curve_html(curve: PhaseCurve) -> str:
    """`phase_figure(curve)`, then the repr line and the per-residue table (folded)."""
    from phaseinterp.plot.curves import phase_figure

    table = curve.to_pandas().to_html(index=False, float_format=lambda x: f"{x:.3f}")
    return _page(notebook_html(phase_figure(curve)), repr(curve), "per-residue table", table)


def map_html(smap: SpecializationMap) -> str:
    """`map_figure(smap)`, then the repr line and the top cells (folded)."""
    import numpy as np

    from phaseinterp.plot.maps import map_figure

    top = smap.top(min(8, int(np.isfinite(smap.values).sum()) or 1)).to_html(
        index=False, float_format=lambda x: f"{x:.3g}")
    return _page(notebook_html(map_figure(smap)), repr(smap), "top cells", top)


def _page(figure: str, line: str, what: str, table: str) -> str:
    return (f"<div>{figure}<p><code>{html.escape(line)}</code></p>"
            f"<details><summary>{what}</summary>{table}</details></div>")
