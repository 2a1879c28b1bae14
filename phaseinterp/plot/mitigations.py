"""The figure of a mitigation comparison: worst-phase accuracy against KV memory, one marker per run."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go


def memory_figure(rows: pd.DataFrame, title: str = "worst-phase accuracy against KV memory") -> go.Figure:
    """One marker per run (variant, seed) with the bootstrap interval of its worst residue; `rows`
    has columns variant, seed, entries_per_token, worst, worst_lo, worst_hi and gap_pp."""
    fig = go.Figure()
    for name, part in rows.groupby("variant", sort=False):
        jitter = (part.seed - part.seed.mean()) * 0.004
        fig.add_trace(go.Scatter(
            x=part.entries_per_token + jitter, y=100 * part.worst, mode="markers", name=name,
            marker=dict(size=10), text=[f"seed {s}, gap {g:.0f} pp" for s, g in zip(part.seed, part.gap_pp)],
            error_y=dict(type="data", symmetric=False, array=100 * (part.worst_hi - part.worst),
                         arrayminus=100 * (part.worst - part.worst_lo))))
    fig.update_layout(title=title, template="plotly_white", height=480,
                      xaxis_title="cache entries per token and KV head (long-context limit, log)",
                      yaxis_title="worst-phase accuracy (%)", xaxis_type="log")
    return fig


__all__ = ["memory_figure"]
