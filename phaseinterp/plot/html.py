"""HTML export of plotly figures, with one shared plotly.js per output folder."""

from __future__ import annotations

import os
from pathlib import Path

import plotly.graph_objects as go

from phaseinterp.measure.outputs import atomic_path

PLOTLY_JS = "plotly.min.js"


def save_html(fig: go.Figure, path: str | Path, *, include_plotlyjs: bool | str = "shared",
              root: str | Path | None = None) -> Path:
    """Write `fig` as HTML; return the path. How the page gets plotly.js (~4.8 MB):

    - "shared" (default): from `root/plotly.min.js` (default root: the page's folder), written there
      once, so a folder of figures carries one copy and opens offline; keep the folder together.
    - True: embedded in the page (self-contained, 4.8 MB per figure).
    - "cdn": from the plotly CDN (a few kB; needs the network to view).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if include_plotlyjs == "shared":
        root = Path(root) if root is not None else path.parent
        bundle = root / PLOTLY_JS
        if not bundle.is_file():
            from plotly.offline import get_plotlyjs

            root.mkdir(parents=True, exist_ok=True)
            tmp = bundle.with_name(bundle.name + ".tmp")
            tmp.write_text(get_plotlyjs(), encoding="utf-8")
            tmp.replace(bundle)
        include_plotlyjs = os.path.relpath(bundle, path.parent).replace(os.sep, "/")
    elif include_plotlyjs not in (True, False, "cdn"):
        raise ValueError(f"include_plotlyjs={include_plotlyjs!r}: allowed 'shared', True, False or 'cdn'")
    with atomic_path(path) as tmp:  # a page appears whole or not at all
        fig.write_html(tmp, include_plotlyjs=include_plotlyjs)
    return path
