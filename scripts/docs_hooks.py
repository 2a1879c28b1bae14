"""mkdocs hooks (mkdocs.yml `hooks:`): the pages that are not files under docs/.

- `tutorials/NN_topic.ipynb` become the pages `tutorials/NN_topic/` (mkdocs-jupyter renders, and with
  `execute: true` runs, them), so the notebooks stay where the README and tests/test_tutorials.py expect them.
- `reference/`: one API page per top-level module or subpackage of `phaseinterp`, each a mkdocstrings
  `::: phaseinterp.NAME` block, plus an index that lists them and documents what `import phaseinterp` exports; a new module gets its page without an edit here.
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files

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


@event_priority(100)  # before mkdocs-jupyter's on_files, which turns the notebooks added here into its pages
def on_files(files: Files, config: MkDocsConfig) -> Files:
    for notebook in tutorial_notebooks():
        files.append(File(notebook.relative_to(ROOT).as_posix(), str(ROOT), config.site_dir, config.use_directory_urls))
    modules = api_modules()
    files.append(File.generated(config, "reference/index.md", content=_reference_index(modules)))
    for module in modules:
        name = module.split(".", 1)[1]
        files.append(File.generated(config, f"reference/{name}.md", content=f"# `{module}`\n\n::: {module}\n"))
    return files
