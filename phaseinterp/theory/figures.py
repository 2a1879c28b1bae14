"""Plotly figures for the theory experiments. Builders take the experiments' tidy tables and
return `go.Figure` objects; nothing is shown or written here."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots


def gate_trajectory_figure(gates: pd.DataFrame, title: str = "") -> go.Figure:
    """Heatmaps of the mean gates p^K, p^V (columns) of every head (rows) over flow time.

    Args:
        gates: columns ``t, branch ("key"/"value"), head, position, p``.
    """
    heads = sorted(gates["head"].unique())
    fig = make_subplots(rows=len(heads), cols=2, shared_xaxes=True, shared_yaxes=True,
                        subplot_titles=[f"head {h}: {b} gate" for h in heads for b in ("key", "value")],
                        vertical_spacing=0.06, horizontal_spacing=0.05)
    for i, h in enumerate(heads):
        for j, branch in enumerate(("key", "value")):
            sub = gates[(gates["head"] == h) & (gates["branch"] == branch)]
            z = sub.pivot(index="position", columns="t", values="p")
            fig.add_trace(go.Heatmap(z=z.to_numpy(), x=z.columns, y=z.index, zmin=0, zmax=1,
                                     colorscale="Viridis", showscale=(i == 0 and j == 0),
                                     colorbar={"title": "p"}), row=i + 1, col=j + 1)
            fig.update_yaxes(title_text="position r" if j == 0 else None, row=i + 1, col=j + 1, dtick=1)
    fig.update_xaxes(title_text="flow time t", row=len(heads))
    fig.update_layout(title=title or "Gate trajectories (mean over the training sample)",
                      height=250 * len(heads) + 100)
    return fig


def loss_figure(loss: pd.DataFrame, optimum: float | None = None, title: str = "") -> go.Figure:
    """Training loss over flow time (one line per seed), with the Theorem 1 optimum as a line.

    Args:
        loss: columns ``t, seed, loss``.
        optimum: the Theorem 1 loss on the same sample, or None.
    """
    fig = go.Figure()
    for seed, sub in loss.groupby("seed"):
        fig.add_trace(go.Scatter(x=sub["t"], y=sub["loss"], mode="lines", name=f"seed {seed}",
                                 line={"width": 1}, opacity=0.6, showlegend=loss["seed"].nunique() <= 10))
    if optimum is not None:
        fig.add_hline(y=optimum, line_dash="dash", line_color="black",
                      annotation_text=f"Theorem 1 optimum {optimum:.4f}")
    fig.update_layout(title=title or "Loss along the gradient flow", xaxis_title="flow time t",
                      yaxis_title="cross-entropy (training sample)")
    return fig


def positions_figure(heads: pd.DataFrame, S: int) -> go.Figure:
    """How often each head ends keyed on each position (value position = key + 1 when paired)."""
    fig = go.Figure()
    for h, sub in heads.groupby("head"):
        counts = sub["key_position"].value_counts().reindex(range(S), fill_value=0)
        fig.add_trace(go.Bar(x=list(range(S)), y=counts.to_numpy(), name=f"head {h}"))
    unpaired = int((~heads["paired"]).sum())
    fig.update_layout(barmode="stack", xaxis_title="key position r (value expected at r+1)",
                      yaxis_title="number of seeds", xaxis={"dtick": 1},
                      title=f"End positions of the heads over {heads['seed'].nunique()} seeds "
                            f"({unpaired} heads with value not at key+1)")
    return fig


def coverage_figure(seeds: pd.DataFrame, m: int, S: int, random_coverage: float) -> go.Figure:
    """Distribution over seeds of the coverage, against the random and the optimal coverage."""
    values = np.round(seeds["coverage"].to_numpy() * (S - 1)).astype(int)
    counts = np.bincount(values, minlength=S)
    fig = go.Figure(go.Bar(x=[f"{k}/{S - 1}" for k in range(S)], y=counts, name="seeds"))
    fig.add_vline(x=random_coverage * (S - 1), line_dash="dot",
                  annotation_text=f"independent random picks: {random_coverage:.3f}")
    fig.add_vline(x=m, line_dash="dash", annotation_text=f"Theorem 1 (distinct): {m / (S - 1):.3f}",
                  annotation_position="bottom right")
    fig.update_layout(title=f"Coverage of the S-1 = {S - 1} non-final positions (m = {m} heads); "
                            f"mean {seeds['coverage'].mean():.3f}",
                      xaxis_title="positions held by some head (key r, value r+1)", yaxis_title="seeds")
    return fig


def phase_accuracy_figure(phases: pd.DataFrame) -> go.Figure:
    """Per-phase retrieval accuracy, mean over seeds with a 95% seed-bootstrap interval.

    Args:
        phases: columns ``phase, accuracy, ci_low, ci_high, covered_share``.
    """
    fig = go.Figure()
    fig.add_trace(go.Bar(x=phases["phase"], y=phases["accuracy"], name="accuracy (mean over seeds)",
                         error_y={"type": "data", "symmetric": False,
                                  "array": phases["ci_high"] - phases["accuracy"],
                                  "arrayminus": phases["accuracy"] - phases["ci_low"]}))
    fig.add_trace(go.Scatter(x=phases["phase"], y=phases["covered_share"], mode="markers",
                             marker={"symbol": "x", "size": 10}, name="share of seeds covering the phase"))
    fig.update_layout(title="Retrieval accuracy by query phase r* (answer at r*+1)", xaxis_title="phase r*",
                      yaxis_title="top-1 accuracy", yaxis_range=[0, 1.05], xaxis={"dtick": 1})
    return fig


def sweep_figure(sweep: pd.DataFrame) -> go.Figure:
    """Coverage (with random and optimal references) and share of one-hot / static seeds, per swept
    parameter (one column each).

    Args:
        sweep: columns ``param, value, coverage, coverage_sem, random_coverage, optimum_coverage,
            onehot_paired_share, static_share``.
    """
    params = list(dict.fromkeys(sweep["param"]))
    fig = make_subplots(rows=2, cols=len(params), subplot_titles=params, vertical_spacing=0.12)
    for j, p in enumerate(params):
        sub = sweep[sweep["param"] == p]
        x = sub["value"].astype(str)
        show = j == 0
        fig.add_trace(go.Scatter(x=x, y=sub["coverage"], error_y={"array": 1.96 * sub["coverage_sem"]},
                                 mode="lines+markers", name="coverage", legendgroup="c", showlegend=show,
                                 line={"color": "#1f77b4"}), row=1, col=j + 1)
        fig.add_trace(go.Scatter(x=x, y=sub["random_coverage"], mode="lines", name="random picks",
                                 legendgroup="r", showlegend=show, line={"dash": "dot", "color": "gray"}),
                      row=1, col=j + 1)
        fig.add_trace(go.Scatter(x=x, y=sub["optimum_coverage"], mode="lines", name="Theorem 1",
                                 legendgroup="o", showlegend=show, line={"dash": "dash", "color": "black"}),
                      row=1, col=j + 1)
        fig.add_trace(go.Scatter(x=x, y=sub["onehot_paired_share"], mode="lines+markers",
                                 name="seeds: all heads one-hot, value = key+1", legendgroup="h",
                                 showlegend=show, line={"color": "#d62728"}), row=2, col=j + 1)
        fig.add_trace(go.Scatter(x=x, y=sub["static_share"], mode="lines+markers", name="seeds: all gates static",
                                 legendgroup="s", showlegend=show, line={"color": "#2ca02c", "dash": "dash"}),
                      row=2, col=j + 1)
        fig.update_xaxes(title_text=p, type="category", row=2, col=j + 1)
    fig.update_yaxes(title_text="coverage", range=[0, 1.05], row=1, col=1)
    fig.update_yaxes(title_text="share of seeds", range=[-0.05, 1.05], row=2, col=1)
    fig.update_layout(title="How coverage and convergence depend on the parameters (one at a time)",
                      height=700, width=max(900, 330 * len(params)))
    return fig


def optimum_figure(seeds: pd.DataFrame) -> go.Figure:
    """Loss of the flow's end point and of its one-hot limit against the Theorem 1 optimum, per seed."""
    fig = go.Figure()
    order = seeds.sort_values("loss")
    x = order["seed"].astype(str)
    fig.add_trace(go.Scatter(x=x, y=order["loss"], mode="markers", name="flow end point",
                             marker={"color": order["coverage"], "colorscale": "Viridis", "showscale": True,
                                     "colorbar": {"title": "coverage"}}))
    fig.add_trace(go.Scatter(x=x, y=order["onehot_limit_loss"], mode="markers", marker={"symbol": "x"},
                             name="one-hot limit at the flow's positions"))
    fig.add_trace(go.Scatter(x=x, y=order["theorem1_loss"], mode="lines", line={"dash": "dash", "color": "black"},
                             name="Theorem 1 optimum (distinct one-hot)"))
    fig.update_layout(title="Held-out loss: gradient-flow end point vs the Theorem 1 optimum",
                      xaxis_title="seed (sorted by end-point loss)", yaxis_title="cross-entropy (held-out sample)",
                      xaxis={"type": "category", "showticklabels": len(seeds) <= 40})
    return fig


def static_rules_figure(rules: pd.DataFrame, optimum: float) -> go.Figure:
    """Exact losses of static rules (random, mixtures, split, locally optimized) vs Theorem 1."""
    fig = go.Figure()
    for kind, sub in rules.groupby("kind", sort=False):
        fig.add_trace(go.Box(y=sub["loss"], name=kind, boxpoints="all", jitter=0.4))
    fig.add_hline(y=optimum, line_dash="dash", annotation_text=f"Theorem 1: {optimum:.4f}")
    fig.update_layout(title="Exact loss (eps = 0) of static rules against the distinct one-hot optimum",
                      yaxis_title="exact expected cross-entropy")
    return fig
