"""Point the shipped HTML pages under assets/ at one local plotly.js (assets/results/plotly.min.js)
instead of the plotly CDN, so that they open offline; the studies now write them that way
(`save_html(..., root=...)`), this rewrites the pages written before. The CDN tag's plotly.js
version must equal the installed plotly's bundle, which is the copy written (else the page could
render differently): the script refuses otherwise.

    python scripts/offline_html.py
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from plotly.offline import get_plotlyjs, get_plotlyjs_version

ROOT = Path(__file__).resolve().parents[1]
BUNDLE = ROOT / "assets" / "results" / "plotly.min.js"
CDN = re.compile(r'src="https://cdn\.plot\.ly/plotly-([0-9.]+)\.min\.js"')


def main() -> int:
    if not BUNDLE.is_file():
        BUNDLE.write_text(get_plotlyjs(), encoding="utf-8")
    for page in sorted((ROOT / "assets").rglob("*.html")):
        text = page.read_text(encoding="utf-8")
        versions = set(CDN.findall(text))
        if not versions:
            continue
        if versions != {get_plotlyjs_version()}:
            print(f"{page}: CDN plotly.js {sorted(versions)} but the bundle is {get_plotlyjs_version()}: not rewritten")
            return 1
        local = os.path.relpath(BUNDLE, page.parent).replace(os.sep, "/")
        page.write_text(CDN.sub(f'src="{local}"', text), encoding="utf-8")
        print(f"{page.relative_to(ROOT)} -> {local}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
