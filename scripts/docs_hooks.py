"""mkdocs hooks (mkdocs.yml `hooks:`): the pages that are not files under docs/, and tutorial pages
that show their figures offline.

- `tutorials/NN_topic.ipynb` become the pages `tutorials/NN_topic/` (mkdocs-jupyter renders, and with
  `execute: true` runs, them), so the notebooks stay where the README and tests/test_tutorials.py expect them.
  A tutorial whose first cell asks for an extra (`pip install 'phaseinterp[smollm2]'`) that is not
  installed is rendered without running it (its first cell says how to get it), so `mkdocs build --strict`
  works after `pip install -e ".[test,docs]"` alone.
- Figures: the kernels draw plotly figures with the `notebook` renderer (HTML that calls `Plotly.newPlot`;
  plotly's own JSON output would be dropped by the notebook converter), every tutorial page loads one
  local copy of plotly.js (`assets/javascripts/plotly.min.js`, from the installed plotly) in its head,
  and the inline copies, the remote MathJax tags of plotly's HTML and the converter's empty MathJax
  `<script src="">` are removed: the pages load nothing from the network.
- `reference/`: one API page per top-level module or subpackage of `phaseinterp`, each a mkdocstrings
  `::: phaseinterp.NAME` block, plus an index that lists them and documents what `import phaseinterp` exports; a new module gets its page without an edit here.
"""

from __future__ import annotations

import logging
import os
import re
import tomllib
from importlib import metadata
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page
from mkdocs.utils import get_relative_url

log = logging.getLogger("mkdocs.hooks.phaseinterp")
#: Run only these tutorials (comma-separated stems, e.g. "01_quickstart"); unset: all (tests/test_docs_site.py).
ONLY_ENV = "PHASEINTERP_DOCS_TUTORIALS"
#: Where the site keeps its one copy of plotly.js.
PLOTLY_JS = "assets/javascripts/plotly.min.js"
EXTRA = re.compile(r"phaseinterp\[(\w+)\]")
REMOTE_MATHJAX = re.compile(r'<script[^>]*\bsrc="(?:https?:)?//[^"]*mathjax[^"]*"[^>]*>\s*</script>', re.IGNORECASE)
EMPTY_SRC = re.compile(r'<script[^>]*\bsrc=""[^>]*>\s*</script>', re.IGNORECASE)

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "phaseinterp"


def api_modules() -> list[str]:
    """Dotted names of phaseinterp's public top-level modules and subpackages (no leading underscore), sorted."""
    names = [p.stem for p in PACKAGE.glob("*.py") if not p.name.startswith("_")]
    names += [p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file() and not p.name.startswith("_")]
    return [f"phaseinterp.{name}" for name in sorted(names)]


def tutorial_notebooks() -> list[Path]:
    """The tutorials, `tutorials/NN_topic.ipynb`, in order."""
    return sorted((ROOT / "tutorials").glob("[0-9][0-9]_*.ipynb"))


def _reference_index(modules: list[str]) -> str:
    rows = "\n".join(f"- [`{m}`]({m.split('.', 1)[1]}.md)" for m in modules)
    return ("# API reference\n\nGenerated from the docstrings. Each module or subpackage has its own page:\n\n"
            + rows + "\n\n## `import phaseinterp`\n\nThe names the package exports (lazily; `__init__.pyi` "
            "lists them):\n\n::: phaseinterp\n    options:\n      show_submodules: false\n      heading_level: 3\n")


def missing_extras(notebook: Path) -> dict[str, list[str]]:
    """{extra: its distributions not installed} for the extras the tutorial's first cell asks for."""
    import nbformat

    first = nbformat.read(notebook, as_version=4).cells[0].source
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    missing = {}
    for extra in dict.fromkeys(EXTRA.findall(first)):
        names = [re.split(r"[<>=!~\[; ]", req, maxsplit=1)[0] for req in extras.get(extra, [])]
        lacking = [name for name in names if not _installed(name)]
        if lacking:
            missing[extra] = lacking
    return missing


def _installed(distribution: str) -> bool:
    try:
        metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return False
    return True


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    # the kernels mkdocs-jupyter starts inherit this: figures as HTML calling Plotly.newPlot (see the module docstring)
    os.environ["PLOTLY_RENDERER"] = "notebook"
    jupyter = config.plugins.get("mkdocs-jupyter")
    if jupyter is not None and jupyter.config.get("execute"):
        ignore = list(jupyter.config.get("execute_ignore") or [])
        only = [n for n in os.environ.get(ONLY_ENV, "").split(",") if n]  # a quick build (tests): run just these
        for notebook in tutorial_notebooks():
            if only and notebook.stem not in only:
                ignore.append(f"tutorials/{notebook.name}")
                continue
            missing = missing_extras(notebook)
            if missing:
                log.info(f"{notebook.name} is rendered without running it: not installed {missing} "
                         f"(pip install -e '.[{','.join(missing)}]')")
                ignore.append(f"tutorials/{notebook.name}")
        jupyter.config["execute_ignore"] = ignore
    return config


def on_post_page(output: str, page: Page, config: MkDocsConfig) -> str:
    """A tutorial page: one local plotly.js in the head, no inline copies, no remote or empty script tags."""
    if not page.file.src_uri.startswith("tutorials/"):
        return output
    from plotly.offline import get_plotlyjs

    js = get_plotlyjs()
    while (at := output.find(js)) >= 0:  # an inline copy (the renderer's first figure, a map's own HTML)
        start = output.rfind("<script", 0, at)
        end = output.find("</script>", at + len(js))
        if start < 0 or end < 0 or output[output.find(">", start) + 1:at].strip() or output[at + len(js):end].strip():
            break  # not a script of its own: leave it
        output = output[:start] + output[end + len("</script>"):]
    output = EMPTY_SRC.sub("", REMOTE_MATHJAX.sub("", output))
    tag = f'<script src="{get_relative_url(PLOTLY_JS, page.url)}"></script>'
    return output.replace("</head>", f"{tag}\n</head>", 1)


@event_priority(100)  # before mkdocs-jupyter's on_files, which turns the notebooks added here into its pages
def on_files(files: Files, config: MkDocsConfig) -> Files:
    for notebook in tutorial_notebooks():
        files.append(File(notebook.relative_to(ROOT).as_posix(), str(ROOT), config.site_dir, config.use_directory_urls))
    from plotly.offline import get_plotlyjs

    files.append(File.generated(config, PLOTLY_JS, content=get_plotlyjs()))
    modules = api_modules()
    files.append(File.generated(config, "reference/index.md", content=_reference_index(modules)))
    for module in modules:
        name = module.split(".", 1)[1]
        files.append(File.generated(config, f"reference/{name}.md", content=f"# `{module}`\n\n::: {module}\n"))
    return files
