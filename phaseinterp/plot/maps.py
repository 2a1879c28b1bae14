"""Plotly figures of specialization maps, gate statistics, gate cycling and gate attribution
(never `show()`n); write them with `phaseinterp.plot.save_html`."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

#: Results drawn here, read by their attributes: a SpecializationMap draws itself with `map_figure`
#: (`_repr_html_`), so this floor never imports measure or interventions (no import cycle).
SpecializationMap = GateAttribution = CyclingResult = Any


def map_figure(smap: SpecializationMap, *, clip: float | int | None = None, title: str | None = None,
               show_values: bool = True, significance: str = "fdr", q: float = 0.05) -> go.Figure:
    """Diverging heatmap of a map: last axis (residue) on x, the other axes flattened on y
    ("layer.head", first unit on top), colors centered at 0 and clipped at +-clip.

    Args:
        smap: the map.
        clip: color range +-clip; default `smap.clip` (100 for % maps), else the largest |value|.
            Values beyond are drawn at the end color; the hover shows the true value.
        title: figure title (default: the quantity and intervention).
        show_values: print rounded values in the cells.
        significance: which cells count as significant: "fdr" (default; Benjamini-Hochberg at
            level `q` across the map's cells, `smap.significant_fdr(q)`) or "uncorrected" (each
            cell's interval excludes 0, `smap.significant`). A map without p-values (saved before
            they existed) shows its uncorrected cells and the subtitle says so.
        q: the false discovery rate for "fdr".

    Cells that are not significant print their value in parentheses; the subtitle names the rule
    ("BH-FDR q=0.05" or "uncorrected 95% interval"). Masked cells (`smap.masked`, e.g. relative
    changes at unreliable clean accuracy) are gray and say "masked", the reason in the subtitle;
    the hover names each cell's state.

    Returns:
        A plotly Figure: the map's Heatmap trace (`zmid=0`, `zmin=-clip`, `zmax=clip`), last, under
        it a gray Heatmap of the masked cells when there are any.

    Example:
        >>> from phaseinterp.interventions import knockout_map
        >>> from phaseinterp.plot import save_html
        >>> fig = map_figure(knockout_map(model, batch, calib, n_boot=100))
        >>> save_html(fig, "knockout.html")
        PosixPath('knockout.html')
    """
    z = smap.as_2d()
    finite = np.abs(z[np.isfinite(z)])
    c = clip if clip is not None else smap.clip
    if c is None:
        c = float(finite.max()) if finite.size and finite.max() > 0 else 1.0
    if not c > 0:
        raise ValueError(f"clip={c} out of range: must be > 0")
    x_dim = smap.dims[-1]
    rows = smap.row_labels()
    xs = [str(v) for v in smap.coords[x_dim]]
    shown = np.clip(z, -c, c)
    sig, rule = smap.significance(significance, q)  # (None, "") for a map without intervals: nothing marked
    sig = np.ones(z.shape, dtype=bool) if sig is None else smap.as_2d(sig)
    masked = smap.as_2d(smap.masked)
    fmt = np.vectorize(lambda v: f"{v:.0f}" if c >= 10 else f"{v:.2f}")(np.nan_to_num(z))
    text = np.where(~np.isfinite(z), "", np.where(sig, fmt, np.char.add(np.char.add("(", fmt), ")")))
    state = np.where(sig, f"significant, {rule}", f"not significant, {rule}") if rule else np.full(z.shape, "")
    if rule and smap.p is not None:  # the cell's own bootstrap p-value on hover
        p2 = smap.as_2d(smap.p)
        shown_p = np.array([f"<br>bootstrap p={p:.3g}" if np.isfinite(p) else "" for p in p2.ravel()]).reshape(p2.shape)
        state = np.char.add(state, shown_p)
    state = np.where(masked, "masked", state)
    custom = np.stack([z, state], axis=-1).astype(object)
    hover = "%{y} " + x_dim + "=%{x}<br>value=%{customdata[0]:.4g}<br>%{customdata[1]}<extra></extra>"
    traces = []
    if masked.any():  # drawn under the map: gray cells that say why they hold no value
        traces.append(go.Heatmap(z=np.where(masked, 0.0, np.nan), x=xs, y=rows, showscale=False, hoverinfo="skip",
                                 colorscale=[[0, "#d9d9d9"], [1, "#d9d9d9"]], text=np.where(masked, "masked", ""),
                                 texttemplate="%{text}", textfont=dict(color="#666666", size=9)))
    traces.append(go.Heatmap(
        z=shown, x=xs, y=rows, customdata=custom, zmid=0, zmin=-c, zmax=c,
        colorscale="RdBu", colorbar=dict(title=smap.quantity or "value"), hovertemplate=hover,
        text=text if show_values else None, texttemplate="%{text}" if show_values else None,
        hoverongaps=False))
    fig = go.Figure(traces)
    if title is None:
        kind = smap.meta.get("intervention", {}).get("kind", "") if isinstance(smap.meta.get("intervention"), dict) else ""
        title = f"{kind}: {smap.quantity}" if kind else smap.quantity
    notes = []
    if rule:
        notes.append(f"(value): not significant, {rule}")
    if masked.any():
        reason = (smap.meta.get("masked") or {}).get("reason", "left out on purpose")
        notes.append(f"gray: masked, {reason}")
    if notes:
        title = f"{title}<br><sup>{'; '.join(notes)}</sup>"
    fig.update_layout(title=title, xaxis_title=x_dim, yaxis_title=".".join(smap.dims[:-1]),
                      xaxis=dict(type="category"), yaxis=dict(type="category", autorange="reversed"),
                      template="plotly_white", height=max(300, 28 * len(rows) + 150))
    return fig


def gate_plane_figure(stats: pd.DataFrame, *, title: str = "gate concentration") -> go.Figure:
    """Static vs per-window effective number of offsets, one point per (layer, branch, kv_head).

    `stats` is `phaseinterp.analysis.gate_statistics(...)`. Both axes run from 1 (one-hot) to W
    (uniform). Bottom-left = one fixed offset for all windows (static concentration), top-right =
    uniform averaging, right and low = one-hot per window but on input-dependent offsets.
    """
    _need(stats, ["layer", "branch", "kv_head", "static", "per_window", "window"])
    fig = go.Figure()
    for branch, df in stats.groupby("branch", sort=False):
        fig.add_trace(go.Scatter(
            x=df["static"], y=df["per_window"], mode="markers+text", name=str(branch),
            text=[f"{l}.{h}" for l, h in zip(df["layer"], df["kv_head"])], textposition="top center",
            hovertemplate="layer.kv_head %{text}<br>static %{x:.2f}<br>per-window %{y:.2f}<extra>" + str(branch) + "</extra>"))
    W = float(stats["window"].max())
    fig.add_trace(go.Scatter(x=[1, W], y=[1, W], mode="lines", line=dict(dash="dot", color="gray"), name="y = x"))
    fig.update_layout(title=title, xaxis_title="static: exp H(E_windows[a])", yaxis_title="per-window: E_windows[exp H(a)]",
                      xaxis=dict(range=[0.9, W + 0.1]), yaxis=dict(range=[0.9, W + 0.1], scaleanchor="x"),
                      template="plotly_white")
    return fig


def gate_profile_figure(profiles: pd.DataFrame, *, title: str = "gate profiles g(r) (value gates rolled by -1)"
                        ) -> go.Figure:
    """Heatmap of gate profiles: phase on x, "layer.branch.kv_head" on y, g(r) = mass / uniform
    share (1 = uniform; sequential color scale from 0 to S)."""
    _need(profiles, ["layer", "branch", "kv_head", "phase", "g"])
    df = profiles.assign(unit=[f"{l}.{b}.{h}" for l, b, h in zip(profiles["layer"], profiles["branch"], profiles["kv_head"])])
    units = list(dict.fromkeys(df["unit"]))
    table = df.pivot_table(index="unit", columns="phase", values="g", sort=False).reindex(units)
    fig = go.Figure(go.Heatmap(z=table.values, x=[str(c) for c in table.columns], y=units, colorscale="Viridis",
                               zmin=0, colorbar=dict(title="g(r)"),
                               hovertemplate="%{y} phase %{x}<br>g=%{z:.2f}<extra></extra>"))
    fig.update_layout(title=title, xaxis_title="phase r", yaxis_title="layer.branch.kv_head",
                      xaxis=dict(type="category"), yaxis=dict(type="category", autorange="reversed"),
                      template="plotly_white", height=max(300, 28 * len(units) + 150))
    return fig


def gate_dynamics_figure(dynamics: pd.DataFrame, *, title: str = "gate concentration during training") -> go.Figure:
    """Trajectories in the (static, per-window) plane over checkpoints, one line per
    (layer, branch, kv_head), markers colored by step."""
    _need(dynamics, ["step", "layer", "branch", "kv_head", "static", "per_window", "window"])
    fig = go.Figure()
    for (layer, branch, h), df in dynamics.sort_values("step").groupby(["layer", "branch", "kv_head"], sort=False):
        fig.add_trace(go.Scatter(
            x=df["static"], y=df["per_window"], mode="lines+markers", name=f"{layer}.{branch}.{h}",
            marker=dict(color=df["step"], colorscale="Viridis", showscale=False), customdata=df["step"],
            hovertemplate="step %{customdata}<br>static %{x:.2f}<br>per-window %{y:.2f}<extra>%{fullData.name}</extra>"))
    W = float(dynamics["window"].max())
    fig.add_trace(go.Scatter(x=[1, W], y=[1, W], mode="lines", line=dict(dash="dot", color="gray"), name="y = x"))
    fig.update_layout(title=title, xaxis_title="static effective offsets", yaxis_title="per-window effective offsets",
                      xaxis=dict(range=[0.9, W + 0.1]), yaxis=dict(range=[0.9, W + 0.1]), template="plotly_white")
    return fig


def cycling_figure(results: Sequence[CyclingResult], *, title: str | None = None) -> go.Figure:
    """Accuracy by residue: baseline, each cycled curve (solid) and its prediction
    A_0((r - delta) mod R) (dashed); boundary residues marked."""
    if not results:
        raise ValueError("no cycling results to plot")
    base = results[0].baseline
    fig = go.Figure(go.Scatter(x=base.residues, y=100 * base.accuracy, mode="lines+markers", name="delta = 0",
                               line=dict(color="black")))
    for res in results:
        fig.add_trace(go.Scatter(x=res.cycled.residues, y=100 * res.cycled.accuracy, mode="lines+markers",
                                 name=f"delta = {res.delta} (R^2 = {res.r2:.2f})"))
        fig.add_trace(go.Scatter(x=res.cycled.residues, y=100 * res.predicted, mode="lines", line=dict(dash="dash"),
                                 name=f"predicted, delta = {res.delta}", opacity=0.6))
    for r in results[0].boundary:
        fig.add_vrect(x0=r - 0.5, x1=r + 0.5, fillcolor="gray", opacity=0.12, line_width=0)
    fig.update_layout(title=title or "gate cycling: phase curve shift (shaded: boundary phase, excluded from R^2)",
                      xaxis_title="residue r", yaxis_title="accuracy (%)", xaxis=dict(dtick=1),
                      yaxis=dict(range=[-2, 102]), template="plotly_white")
    return fig


def attribution_scatter(attribution: SpecializationMap, exact: SpecializationMap, *, title: str | None = None
                        ) -> go.Figure:
    """Attribution estimate (x) against the exact effect of the same intervention (y), one point
    per cell, with the y = x line."""
    a, e = attribution.values.reshape(-1), exact.values.reshape(-1)
    ok = np.isfinite(a) & np.isfinite(e)
    labels = np.repeat(attribution.row_labels(), attribution.shape[-1])
    x_lab = np.tile([str(c) for c in attribution.coords[attribution.dims[-1]]], len(attribution.row_labels()))
    text = [f"{u} {attribution.dims[-1]}={x}" for u, x in zip(labels[ok], x_lab[ok])]
    lim = float(np.abs(np.concatenate([a[ok], e[ok]])).max()) if ok.any() else 1.0
    fig = go.Figure([go.Scatter(x=a[ok], y=e[ok], mode="markers", text=text, name="cells",
                                hovertemplate="%{text}<br>attribution %{x:.3g}<br>exact %{y:.3g}<extra></extra>"),
                     go.Scatter(x=[-lim, lim], y=[-lim, lim], mode="lines", line=dict(dash="dot", color="gray"), name="y = x")])
    fig.update_layout(title=title or "attribution vs exact intervention", xaxis_title="attribution (first order)",
                      yaxis_title="exact effect", template="plotly_white")
    return fig


def gate_attribution_figure(result: GateAttribution) -> go.Figure:
    """`attribution_scatter` of a `gate_attribution(..., validate=True)` result, its Spearman in the title."""
    if result.exact is None:
        raise ValueError("no exact effects (run gate_attribution with validate=True)")
    return attribution_scatter(result.attribution, result.exact,
                               title=f"gate attribution vs exact (Spearman {result.spearman:.2f})")


def _need(df: Any, cols: list[str]) -> None:
    if not isinstance(df, pd.DataFrame) or df.empty:
        raise ValueError("expected a non-empty pandas DataFrame")
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise ValueError(f"table lacks columns {missing}; it has {list(df.columns)}")
