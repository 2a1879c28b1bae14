"""The studies live apart from the library: `phaseinterp/` never imports `experiments/` (importlib
strings included), the studies use the public API only, and each study says what it answers, how
to run it and where its result is."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STUDIES = sorted(p.parent for p in (ROOT / "experiments").glob("*/__init__.py"))


def _mentions_experiments(path: Path) -> list[int]:
    """Lines of `path` that import `experiments` or name it in a string (an `importlib` import)."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and re.fullmatch(r"experiments(\.\w+)+",
                                                                                            node.value):
            names = [node.value]  # a dotted module name, as importlib takes it ("experiments" alone: theory's module)
        if any(n == "experiments" or n.startswith("experiments.") for n in names):
            lines.append(node.lineno)
    return lines


def test_the_library_never_imports_a_study():
    found = {str(p.relative_to(ROOT)): lines for p in sorted((ROOT / "phaseinterp").rglob("*.py"))
             if (lines := _mentions_experiments(p))}
    assert not found, f"phaseinterp/ imports experiments/ (the library never imports a study): {found}"


def test_the_check_catches_an_import_of_a_study(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import importlib\n\ndef f():\n    from experiments.zoo import members\n"
                   "    return importlib.import_module('experiments.nsa.study')\n")
    assert _mentions_experiments(bad) == [4, 5]
    private = tmp_path / "private.py"
    private.write_text("import phaseinterp\nfrom phaseinterp.train.result import _architecture, sweep_checkpoint\n"
                       "x = phaseinterp.checkpoint._read\n")
    assert _private_uses(private) == ["phaseinterp.train.result: _architecture", "phaseinterp.checkpoint._read"]


def _private_uses(path: Path) -> list[str]:
    """`phaseinterp` names with a leading underscore that `path` imports or reaches by attribute."""
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("phaseinterp"):
            parts = node.module.split(".") + [a.name for a in node.names]
            found += [f"{node.module}: {p}" for p in parts if p.startswith("_") and p != "__future__"]
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith("phaseinterp") and
                      any(p.startswith("_") for p in a.name.split("."))]
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            base = node.value
            while isinstance(base, ast.Attribute):
                base = base.value
            if isinstance(base, ast.Name) and base.id == "phaseinterp":
                found.append(ast.unparse(node))
    return found


@pytest.mark.parametrize("study", STUDIES, ids=lambda p: p.name)
def test_a_study_uses_the_public_api_and_documents_itself(study):
    private = {str(p.relative_to(ROOT)): uses for p in sorted(study.rglob("*.py")) if (uses := _private_uses(p))}
    assert not private, f"studies import only public names of phaseinterp: {private}"
    readme = (study / "README.md").read_text()
    assert "**Question.**" in readme and "**Result" in readme, f"{study.name}/README.md: question and result"
    commands = re.findall(r"python -m (experiments\.[\w.]+)", readme)
    assert commands, f"{study.name}/README.md names no command"
    for module in commands:
        assert (ROOT / (module.replace(".", "/") + ".py")).is_file(), f"{study.name}/README.md: no module {module}"
    results = re.findall(r"`(assets/results/[^`{ ]+)", readme)
    assert results and all((ROOT / r).exists() for r in results), f"{study.name}/README.md: result files {results}"
    assert list(study.glob("test_*.py")) or study.name == "smollm2", f"{study.name} has no quick-mode test"


def test_the_index_lists_every_study():
    index = (ROOT / "experiments" / "README.md").read_text()
    assert sorted(re.findall(r"\[`(\w+)/`\]", index)) == sorted(p.name for p in STUDIES)


def test_a_verb_calls_library_functions_not_another_verb_nor_the_cli():
    # `reproduce` once parsed a fake argv through cli.py and ran other verbs' compute(args)
    verbs = sorted(p for p in (ROOT / "phaseinterp" / "commands").glob("*.py") if not p.name.startswith("_"))
    found = {}
    for path in verbs:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                names = [node.value] if re.fullmatch(r"phaseinterp\.(cli|commands\.\w+)", node.value) else []
            bad = [n for n in names if n == "phaseinterp.cli" or (n.startswith("phaseinterp.commands.")
                                                                   and n != "phaseinterp.commands._common"
                                                                   and not n.startswith("phaseinterp.commands._common."))]
            if bad:
                found.setdefault(path.name, []).append(node.lineno)
    assert len(verbs) >= 7 and not found, f"verbs importing another verb or the CLI: {found}"
