"""docs/errors.md documents every exception the library raises, module by module.

The raise sites are found by parsing every `phaseinterp/**/*.py`: `raise X(...)`, `raise X`, and
`raise helper(...)` where `helper` is a package function annotated to return an exception (for
example `_bad(...) -> ValueError`). Each (module, exception class) pair must appear in the doc
under a heading naming the module's path, and each such heading must name a module that raises.
A new module that raises, or an existing one that starts raising a new exception class, fails
this test until docs/errors.md says what the error means and how to fix it.
"""

from __future__ import annotations

import ast
import builtins
import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "phaseinterp"
DOC = ROOT / "docs" / "errors.md"
HEADING = re.compile(r"^#{2,4} `(phaseinterp/[\w/]+\.py)`\s*$", re.M)

# Raised and caught inside the library, never seen by users; SystemExit ends a `__main__` script.
INTERNAL = {"_Stop", "SystemExit"}


def _is_builtin_exception(name: str) -> bool:
    obj = getattr(builtins, name, None)
    return isinstance(obj, type) and issubclass(obj, BaseException)


def _package_sources() -> dict[str, ast.Module]:
    return {p.relative_to(ROOT).as_posix(): ast.parse(p.read_text(), filename=str(p))
            for p in sorted(PACKAGE.rglob("*.py"))}


def _exception_helpers_and_classes(trees: dict[str, ast.Module]) -> tuple[dict[str, str], set[str]]:
    """Functions annotated to return an exception class (name -> class), and exception classes
    defined in the package (classes whose bases are exceptions, transitively)."""
    helpers: dict[str, str] = {}
    bases: dict[str, list[str]] = {}
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and isinstance(node.returns, ast.Name):
                if _is_builtin_exception(node.returns.id):
                    helpers[node.name] = node.returns.id
            elif isinstance(node, ast.ClassDef):
                bases[node.name] = [b.id for b in node.bases if isinstance(b, ast.Name)]
    classes: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, parents in bases.items():
            if name not in classes and any(_is_builtin_exception(p) or p in classes for p in parents):
                classes.add(name)
                changed = True
    return helpers, classes


def raised_by_module() -> dict[str, dict[str, list[int]]]:
    """{module path: {exception class: [line numbers]}} for every user-visible raise site."""
    trees = _package_sources()
    helpers, classes = _exception_helpers_and_classes(trees)
    found: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for module, tree in trees.items():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Raise) or node.exc is None:
                continue
            exc = node.exc
            target = exc.func if isinstance(exc, ast.Call) else exc
            name = target.id if isinstance(target, ast.Name) else target.attr if isinstance(target, ast.Attribute) else None
            if name in helpers:
                name = helpers[name]
            elif name is None or not (_is_builtin_exception(name) or name in classes):
                if isinstance(exc, ast.Call):
                    raise AssertionError(f"{module}:{node.lineno}: cannot tell which exception `raise {ast.unparse(exc)}` "
                                         "raises; annotate the helper's return type (-> ValueError) or raise the class")
                continue  # `raise err`: re-raising a caught exception
            if name not in INTERNAL:
                found[module][name].append(node.lineno)
    return {m: dict(v) for m, v in found.items()}


def documented_sections() -> dict[str, str]:
    """{module path: its section of docs/errors.md}."""
    text = DOC.read_text()
    heads = list(HEADING.finditer(text))
    sections = {}
    for i, m in enumerate(heads):
        end = heads[i + 1].start() if i + 1 < len(heads) else len(text)
        assert m.group(1) not in sections, f"{m.group(1)} has two sections in docs/errors.md"
        sections[m.group(1)] = text[m.end():end]
    return sections


def test_the_scan_finds_the_known_raise_sites():
    raised = raised_by_module()
    assert "ValueError" in raised["phaseinterp/config.py"]  # through `raise _bad(...)` -> ValueError
    assert "KeyError" in raised["phaseinterp/model/transformer.py"]  # hook-name typos
    assert "FileNotFoundError" in raised["phaseinterp/checkpoint_io.py"]
    assert all("_Stop" not in classes for classes in raised.values())
    assert len(raised) > 40


def test_every_raising_module_and_exception_is_documented():
    raised, sections = raised_by_module(), documented_sections()
    missing = [f"{module}: {cls} (lines {lines})" for module, by_class in sorted(raised.items())
               for cls, lines in sorted(by_class.items())
               if module not in sections or f"`{cls}`" not in sections[module]]
    assert not missing, "undocumented in docs/errors.md (add a `## `module`` section or a row):\n" + "\n".join(missing)


def test_no_stale_sections():
    raised, sections = raised_by_module(), documented_sections()
    stale = [m for m in sections if m not in raised]
    assert not stale, f"docs/errors.md documents modules that raise nothing (or no longer exist): {stale}"
    for module, text in sections.items():
        named = set(re.findall(r"`(\w+(?:Error|Exception))`", text))
        extra = named - set(raised[module])
        assert not extra, f"docs/errors.md lists {sorted(extra)} under {module}, which does not raise them"
