"""A self-contained HTML report: titled sections of text, tables and plotly figures, offline.

Plotly's JavaScript is embedded once; every figure after the first reuses it, so the report opens
in a browser with no network. Figures get ids by position (plotly's own are random), so the same
sections render to the same bytes and a re-rendered page changes only where its results did.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio


@dataclass
class Section:
    """One report section: a title, a paragraph (plain text), tables and figures."""

    title: str
    text: str = ""
    tables: list[pd.DataFrame] = field(default_factory=list)
    figures: list[go.Figure] = field(default_factory=list)
    error: str | None = None


def render(sections: list[Section], title: str, provenance: dict[str, Any]) -> str:
    parts, n_figures = [], 0
    for section in sections:
        parts.append(f"<h2>{html.escape(section.title)}</h2>")
        if section.text:
            parts.append(f"<p>{html.escape(section.text)}</p>")
        if section.error:
            parts.append(f"<p class='error'>This section failed: {html.escape(section.error)}</p>")
        for table in section.tables:
            parts.append(table.to_html(index=False, float_format=lambda x: f"{x:.3g}", border=0, classes="table"))
        for fig in section.figures:
            parts.append(pio.to_html(fig, full_html=False, include_plotlyjs=n_figures == 0, div_id=f"figure-{n_figures}"))
            n_figures += 1
    style = (
        "body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}"
        "table.table{border-collapse:collapse;margin:1em 0;font-size:0.9em}"
        ".table td,.table th{padding:3px 8px;border-bottom:1px solid #ddd;text-align:right}"
        ".error{color:#b00}pre{background:#f6f6f6;padding:1em;overflow-x:auto}"
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{style}</style></head><body><h1>{html.escape(title)}</h1>"
        + "".join(parts)
        + f"<h2>Provenance</h2><pre>{html.escape(json.dumps(provenance, indent=2, default=str))}</pre></body></html>"
    )


def write_report(sections: list[Section], path: str | Path, title: str, provenance: dict[str, Any]) -> Path:
    """Write the report atomically (temp file + rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(render(sections, title, provenance), encoding="utf-8")
    tmp.replace(path)
    return path


