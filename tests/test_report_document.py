"""The offline HTML report: the same sections render to the same bytes (figure ids by position, not
plotly's random ones), so a re-rendered results page changes only where its results did."""

from __future__ import annotations

import re

import pandas as pd
import plotly.graph_objects as go

from phaseinterp.report import Section
from phaseinterp.report.document import render


def sections(y):
    figs = [go.Figure(go.Scatter(x=[0, 1, 2], y=y)), go.Figure(go.Bar(x=["a", "b"], y=[1, 2]))]
    return [Section("curves", "two figures", [pd.DataFrame({"r": [0, 1], "acc": [0.5, 0.25]})], figs),
            Section("more", figures=[go.Figure(go.Scatter(x=[0], y=[1]))])]


def test_the_same_sections_render_to_the_same_bytes_and_ids_follow_position():
    page = render(sections([1, 2, 3]), "t", {"source": "x"})
    assert page == render(sections([1, 2, 3]), "t", {"source": "x"})
    assert re.findall(r'<div id="(figure-\d+)"', page) == ["figure-0", "figure-1", "figure-2"]
    assert page.count("window.PlotlyConfig") == 1  # plotly.js embedded once
    assert render(sections([1, 2, 4]), "t", {"source": "x"}) != page
