"""Figure of a completion-flip sweep (plotly; never calls `show()`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

if TYPE_CHECKING:
    from phaseinterp.flip.sweep import FlipResult



def flip_figure(result: FlipResult, *, title: str | None = None) -> go.Figure:
    """Top: probability of each candidate against the filler length L. Bottom: log-odds of
    candidate 0 over candidate 1 per L, bars colored by which one wins. Dotted lines mark
    L = 0 mod P; the title states the rule and its agreement (`FlipResult.describe`).

    Example:
        >>> fig = flip_figure(result)  # doctest: +SKIP
        >>> fig.write_html("flip.html")  # doctest: +SKIP
    """
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.6, 0.4], vertical_spacing=0.06)
    L = result.lengths
    order = np.argsort(L)
    for j, name in enumerate(result.labels):
        fig.add_trace(go.Scatter(x=L[order], y=result.probs[order, j], name=f"p({name})", mode="lines+markers",
                                 customdata=result.residues[order],
                                 hovertemplate="L=%{x} (L mod P=%{customdata})<br>p=%{y:.3f}<extra></extra>"),
                      row=1, col=1)
    x = result.log_odds
    colors = np.where(x[order] > 0, "#2b8cbe", "#e34a33")
    fig.add_trace(go.Bar(x=L[order], y=x[order], marker_color=colors, showlegend=False,
                         hovertemplate="L=%{x}<br>log-odds=%{y:.2f}<extra></extra>"), row=2, col=1)
    lo, hi = int(L.min()), int(L.max())
    for k in range(-(-lo // result.period) * result.period, hi + 1, result.period):
        fig.add_vline(x=k - 0.5, line=dict(dash="dot", width=1, color="gray"))
    fig.update_yaxes(title_text="probability", row=1, col=1)
    fig.update_yaxes(title_text=f"log p({result.labels[0]}) - log p({result.labels[1]})", row=2, col=1)
    fig.update_xaxes(title_text=f"filler length L ({result.family}); dotted: L = 0 mod {result.period}", row=2, col=1)
    fig.update_layout(title=title if title is not None else result.describe(), template="plotly_white",
                      bargap=0.1, title_font_size=13)
    return fig
