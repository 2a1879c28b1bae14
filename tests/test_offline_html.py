"""Every shipped HTML page opens offline: its scripts are inline or local files that exist (no CDN)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = re.compile(r'<script[^>]*\bsrc="([^"]+)"')


def shipped_pages() -> list[Path]:
    return sorted(p for folder in ("assets", "docs", "tutorials") for p in (ROOT / folder).rglob("*.html"))


def test_every_shipped_page_loads_its_scripts_from_local_files():
    pages = shipped_pages()
    assert pages, "no shipped HTML found: the test would pass vacuously"
    remote, missing = [], []
    for page in pages:
        for src in SRC.findall(page.read_text(encoding="utf-8")):
            if re.match(r"^[a-z]+:|^//", src):
                remote.append(f"{page.relative_to(ROOT)}: {src}")
            elif not (page.parent / src).is_file():
                missing.append(f"{page.relative_to(ROOT)}: {src}")
    assert not remote, "pages that need the network (rewrite them with scripts/offline_html.py):\n" + "\n".join(remote)
    assert not missing, "pages whose local script is missing:\n" + "\n".join(missing)


def test_the_shared_bundle_is_the_plotly_js_the_pages_were_written_with():
    from plotly.offline import get_plotlyjs_version

    bundle = (ROOT / "assets" / "results" / "plotly.min.js").read_text(encoding="utf-8")
    assert f"v{get_plotlyjs_version()}" in bundle[:400]
