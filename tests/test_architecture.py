"""The floors of docs/architecture.md, enforced: every module imports only from its own floor or
the floors below, and no two modules import each other through any chain. Imports inside
functions and under `TYPE_CHECKING` count: they hide a dependency, they do not remove it."""

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "phaseinterp"
DOC = PACKAGE.parent / "docs" / "architecture.md"

#: Lowest first. A module belongs to the floor of its longest matching prefix.
FLOORS = [
    ("core", ["phaseinterp", "phaseinterp._lazy", "phaseinterp.config", "phaseinterp.gates",
              "phaseinterp.layouts", "phaseinterp.presets", "phaseinterp.registry", "phaseinterp.units"]),
    ("model", ["phaseinterp.model", "phaseinterp.checkpoint", "phaseinterp.checkpoint_io", "phaseinterp.convert",
               "phaseinterp.train.hf_model", "phaseinterp.backends"]),
    ("tasks", ["phaseinterp.tasks"]),
    ("measure", ["phaseinterp.measure"]),
    ("interventions", ["phaseinterp.interventions"]),
    ("analysis", ["phaseinterp.analysis", "phaseinterp.flip"]),
    ("plot", ["phaseinterp.plot"]),
    ("train/theory", ["phaseinterp.train", "phaseinterp.theory"]),
    ("report", ["phaseinterp.report", "phaseinterp.commands", "phaseinterp.cli"]),
]


def floor_of(module: str) -> int:
    matches = [(len(prefix), i) for i, (_, prefixes) in enumerate(FLOORS) for prefix in prefixes
               if module == prefix or module.startswith(prefix + ".")]
    assert matches, f"{module} is on no floor: add it to FLOORS and docs/architecture.md"
    return max(matches)[1]


def modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imports(path: Path, known: set[str]) -> dict[str, int]:
    """{imported phaseinterp module: line}; `from pkg import name` counts as `pkg.name` when that is a module."""
    found = {}
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in known else node.module for a in node.names]
        for name in names:
            if name.startswith("phaseinterp"):
                found.setdefault(name, node.lineno)
    return found


def graph() -> dict[str, dict[str, int]]:
    mods = modules()
    return {m: imports(p, set(mods)) for m, p in mods.items()}


def test_every_import_points_down_or_sideways():
    upward = [f"{m} ({FLOORS[floor_of(m)][0]}) imports {t} ({FLOORS[floor_of(t)][0]}) at line {line}"
              for m, targets in graph().items() for t, line in targets.items()
              if t != "phaseinterp" and floor_of(t) > floor_of(m)]
    assert not upward, "imports that run up a floor (move the code down, or the import up):\n" + "\n".join(upward)


def test_no_import_cycles():
    g = {m: {t for t in targets if t in modules() and t != m} for m, targets in graph().items()}
    cycles, state = [], {}

    def visit(m: str, stack: list[str]) -> None:
        state[m] = "open"
        for t in sorted(g[m]):
            if state.get(t) == "open":
                cycles.append(" -> ".join(stack[stack.index(t):] + [m, t]) if t in stack else f"{m} -> {t}")
            elif t not in state:
                visit(t, stack + [m])
        state[m] = "done"

    for m in sorted(g):
        if m not in state:
            visit(m, [])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_the_checks_catch_what_they_are_for(tmp_path):
    assert floor_of("phaseinterp.train.hf_model") == 1 and floor_of("phaseinterp.train.loop") == 7
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from phaseinterp.plot import phase_figure\n")
    assert imports(bad, {"phaseinterp.plot"}) == {"phaseinterp.plot": 2}


def test_docs_name_every_floor_and_package():
    text = DOC.read_text()
    rows = re.findall(r"^\| \*\*([\w/]+)\*\* \|([^|]*)\|", text, re.M)
    assert [name for name, _ in rows] == [name for name, _ in FLOORS], "docs/architecture.md's floor table is out of date"
    for (name, prefixes), (_, cell) in zip(FLOORS, rows):
        for prefix in prefixes:
            short = prefix.removeprefix("phaseinterp.") if prefix != "phaseinterp" else "phaseinterp"
            assert f"`{short}`" in cell, f"docs/architecture.md: floor {name} does not list `{short}`"
