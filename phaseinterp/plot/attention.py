"""Token-level attention patterns with token labels (plotly; never `show()`n), and the data a
circuitsvis view takes (`circuitsvis_data`; the view itself: `attention_view`, extra `views`)."""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from phaseinterp.tasks.pools import to_str_tokens


def attention_figure(pattern: Any, tokens: Any, vocab: Any, *, row: int = 0, heads: int | Sequence[int] | None = None,
                     layer: int | None = None, cols: int = 4, title: str | None = None) -> go.Figure:
    """Heatmap of an attention pattern (query on y, key on x), every axis labelled with the
    prompt's tokens by role (`to_str_tokens`: "BOS", "K5", "V130", "FILL").

    Args:
        pattern: `[batch, head, q, k]` (`analysis.pattern_by_token`, a full layer's
            `hook_pattern`), `[head, q, k]` or `[q, k]`; q = k = the prompt's length.
        tokens: the prompts `[batch, pos]` or one prompt `[pos]`.
        vocab: TokenPools, a task with `.pools`, a synthetic vocabulary size, or the labels
            themselves (a list of strings, one per position, e.g. an HF tokenizer's tokens).
        row: which prompt of the batch.
        heads: one head (one heatmap), several (a grid, `cols` per line), or None (all).
        layer: only for the titles ("L1H0").
        title: figure title.

    Returns:
        A plotly Figure, one Heatmap trace per head, `z` the pattern as given; x and y run over
        positions 0..T-1 with tick labels `to_str_tokens(tokens[row])`.

    Example:
        >>> from phaseinterp.analysis import pattern_by_token
        >>> fig = attention_figure(pattern_by_token(model, batch.tokens[:1], layer=1), batch.tokens[:1], task, heads=0)
        >>> fig.layout.xaxis.ticktext[:3]
        ('BOS', 'FILL', 'FILL')
    """
    labels, att, names = _prepare(pattern, tokens, vocab, row, heads, layer)
    T = len(labels)
    n = len(names)
    ncols = min(n, _positive("cols", cols))
    nrows = math.ceil(n / ncols)
    fig = make_subplots(rows=nrows, cols=ncols, subplot_titles=names if n > 1 else None,
                        horizontal_spacing=0.06 / ncols, vertical_spacing=0.08 / nrows)
    pos = list(range(T))
    hover_k, hover_q = np.meshgrid(labels, labels)
    custom = np.stack([hover_q, hover_k], -1)
    for i, (z, name) in enumerate(zip(att, names)):
        fig.add_trace(go.Heatmap(
            z=z, x=pos, y=pos, customdata=custom, coloraxis="coloraxis", name=name,
            hovertemplate=(f"{name}<br>query %{{y}} %{{customdata[0]}}<br>key %{{x}} %{{customdata[1]}}"
                           "<br>weight %{z:.3f}<extra></extra>")), row=i // ncols + 1, col=i % ncols + 1)
    fig.update_xaxes(tickmode="array", tickvals=pos, ticktext=labels, tickangle=-90, tickfont=dict(size=8),
                     title_text="key (source token)")
    fig.update_yaxes(tickmode="array", tickvals=pos, ticktext=labels, autorange="reversed", tickfont=dict(size=8),
                     title_text="query")
    side = max(300, 12 * T)
    fig.update_layout(title=title or ("attention: " + names[0] if n == 1 else "attention by head"),
                      coloraxis=dict(colorscale="Blues", cmin=0, colorbar=dict(title="weight")),
                      template="plotly_white", width=min(2400, side * ncols + 200),
                      height=min(2400, side * nrows + 150))
    return fig


def circuitsvis_data(pattern: Any, tokens: Any, vocab: Any, *, row: int = 0,
                     heads: int | Sequence[int] | None = None, layer: int | None = None) -> dict[str, Any]:
    """What `circuitsvis.attention.attention_heads` takes: `tokens` (labels, `to_str_tokens`),
    `attention` `[head, q, k]` (float numpy) and `attention_head_names` ("L1H0", ...);
    arguments as `attention_figure`.

    Example:
        >>> from phaseinterp.analysis import pattern_by_token
        >>> data = circuitsvis_data(pattern_by_token(model, tokens[:1], layer=1), tokens[:1], task, heads=[0, 1], layer=1)
        >>> data["attention"].shape == (2, tokens.shape[1], tokens.shape[1]), data["attention_head_names"]
        (True, ['L1H0', 'L1H1'])
    """
    labels, att, names = _prepare(pattern, tokens, vocab, row, heads, layer)
    return {"tokens": labels, "attention": att, "attention_head_names": names}


def attention_view(pattern: Any, tokens: Any, vocab: Any, *, row: int = 0, heads: int | Sequence[int] | None = None,
                   layer: int | None = None, **kwargs: Any) -> Any:
    """The circuitsvis view of `circuitsvis_data(...)` (`circuitsvis.attention.attention_heads`;
    `kwargs` go to it). Needs the extra: `pip install 'phaseinterp[views]'`.

    Raises:
        ImportError: circuitsvis is not installed (naming the extra).
    """
    try:
        from circuitsvis.attention import attention_heads
    except ImportError as err:
        raise ImportError("attention_view needs circuitsvis, which is not installed: "
                          "pip install 'phaseinterp[views]' (or circuitsvis>=1.43)") from err
    return attention_heads(**circuitsvis_data(pattern, tokens, vocab, row=row, heads=heads, layer=layer), **kwargs)


def _prepare(pattern: Any, tokens: Any, vocab: Any, row: int, heads: Any, layer: int | None
             ) -> tuple[list[str], np.ndarray, list[str]]:
    """(labels, pattern [head, q, k] of the chosen row and heads, head names)."""
    att = np.asarray(pattern.detach().float().cpu() if hasattr(pattern, "detach") else pattern, dtype=np.float64)
    toks = np.asarray(tokens.detach().cpu() if hasattr(tokens, "detach") else tokens)
    if att.ndim not in (2, 3, 4):
        raise ValueError(f"pattern of shape {att.shape} is invalid: allowed [batch, head, q, k], [head, q, k] or [q, k]")
    att = att.reshape((1,) * (4 - att.ndim) + att.shape)
    if toks.ndim == 1:
        toks = toks[None]
    if toks.ndim != 2:
        raise ValueError(f"tokens of shape {toks.shape} are invalid: allowed [batch, pos] or [pos]")
    n_rows = att.shape[0] if att.shape[0] > 1 else toks.shape[0]
    if isinstance(row, bool) or not isinstance(row, (int, np.integer)) or not 0 <= row < n_rows:
        raise ValueError(f"row={row!r} out of range: allowed 0..{n_rows - 1}")
    att = att[row if att.shape[0] > 1 else 0]
    toks = toks[row if toks.shape[0] > 1 else 0]
    T = len(toks)
    if att.shape[1:] != (T, T):
        raise ValueError(f"pattern has queries x keys {att.shape[1:]}: allowed ({T}, {T}), the prompt's length "
                         "(a compressed layer's hook_pattern: map it with analysis.pattern_by_token)")
    H = att.shape[0]
    chosen = list(range(H)) if heads is None else [heads] if isinstance(heads, (int, np.integer)) else list(heads)
    bad = [h for h in chosen if isinstance(h, bool) or not isinstance(h, (int, np.integer)) or not 0 <= h < H]
    if not chosen or bad:
        raise ValueError(f"heads={heads!r} is invalid: allowed heads in 0..{H - 1} (an int, a list, or None for all)")
    if isinstance(vocab, (list, tuple)) and all(isinstance(s, str) for s in vocab):
        if len(vocab) != T:
            raise ValueError(f"{len(vocab)} labels for a prompt of {T} tokens: allowed one label per position")
        labels = list(vocab)
    else:
        labels = to_str_tokens(toks, vocab)
    prefix = f"L{layer}" if layer is not None else ""
    return labels, att[chosen], [f"{prefix}H{h}" for h in chosen]


def _positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name}={value!r} is invalid: allowed an integer >= 1")
    return int(value)
