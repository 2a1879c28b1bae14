"""The floors of docs/architecture.md, enforced: every module imports only from its own floor or
the floors below, and no two modules import each other through any chain. Imports inside
functions and under `TYPE_CHECKING` count: they hide a dependency, they do not remove it. So do
imports by name: `importlib.import_module("phaseinterp.x")`, an f-string module path
(`f"phaseinterp.commands.{verb}"` counts as every module of `phaseinterp.commands`) and any string
that is a dotted `phaseinterp` path (`"-m", "phaseinterp.train.result"`, `"phaseinterp.x.name"`)."""

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "phaseinterp"
DOC = PACKAGE.parent / "docs" / "architecture.md"

#: Lowest first. A module belongs to the floor of its longest matching prefix.
FLOORS = [
    ("core", ["phaseinterp", "phaseinterp._lazy", "phaseinterp.assets", "phaseinterp.config", "phaseinterp.family", "phaseinterp.gates",
              "phaseinterp.layouts", "phaseinterp.presets", "phaseinterp.progress", "phaseinterp.registry", "phaseinterp.units"]),
    ("model", ["phaseinterp.model", "phaseinterp.catalog", "phaseinterp.checkpoint", "phaseinterp.checkpoint_io", "phaseinterp.convert",
               "phaseinterp.families", "phaseinterp.sources", "phaseinterp.backends"]),
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


DOTTED = re.compile(r"phaseinterp(\.[A-Za-z_]\w*)+")


def module_of(dotted: str, known: set[str]) -> str | None:
    """The longest known module a dotted path names or reaches into ("phaseinterp.a.b.attr" -> "phaseinterp.a.b")."""
    parts = dotted.split(".")
    return next((m for n in range(len(parts), 1, -1) if (m := ".".join(parts[:n])) in known), None)


def by_name(node: ast.AST, known: set[str]) -> list[str]:
    """The modules a string names: a dotted phaseinterp path, or every module an f-string path can reach."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and DOTTED.fullmatch(node.value):
        return [m] if (m := module_of(node.value, known)) else []
    if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
        head = str(node.values[0].value)
        if head.startswith("phaseinterp.") and DOTTED.fullmatch(head.rstrip(".")):
            return sorted(m for m in known if m.startswith(head))
    return []


def imports(path: Path, known: set[str]) -> dict[str, int]:
    """{imported phaseinterp module: line}; `from pkg import name` counts as `pkg.name` when that is a
    module; a module named by a string (importlib, `-m`, an f-string path) counts too."""
    found = {}
    tree = ast.parse(path.read_text(), str(path))
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    inside_fstring = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in known else node.module for a in node.names]
        elif id(node) not in docstrings and id(node) not in inside_fstring:
            names = by_name(node, known)
        for name in names:
            if name.startswith("phaseinterp"):
                found.setdefault(name, node.lineno)
    return found


#: The one import allowed up the floors: Jupyter's display hook, where a data object meets its
#: figure. `_repr_html_` may import `phaseinterp.plot.display` inside the method (plotly loads only
#: when a notebook asks); that module reads the object and never the other way round.
DISPLAY_HOOK, DISPLAY_MODULE = "_repr_html_", "phaseinterp.plot.display"


def only_in_display_hook(path: Path) -> bool:
    """`DISPLAY_MODULE` is imported in `path`, and only inside `_repr_html_` methods."""
    tree = ast.parse(path.read_text(), str(path))
    inside = {id(n) for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) and f.name == DISPLAY_HOOK
              for n in ast.walk(f)}
    hits = [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == DISPLAY_MODULE]
    return bool(hits) and all(id(n) in inside for n in hits)


def graph() -> dict[str, dict[str, int]]:
    mods = modules()
    out = {m: imports(p, set(mods)) for m, p in mods.items()}
    for m, p in mods.items():
        if DISPLAY_MODULE in out[m] and only_in_display_hook(p):
            del out[m][DISPLAY_MODULE]
    return out


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


def test_the_display_hook_is_the_only_way_up(tmp_path):
    hook = tmp_path / "hook.py"
    hook.write_text("class A:\n    def _repr_html_(self):\n        from phaseinterp.plot.display import map_html\n")
    assert only_in_display_hook(hook)
    other = tmp_path / "other.py"
    other.write_text("def draw():\n    from phaseinterp.plot.display import map_html\n")
    assert not only_in_display_hook(other)
    users = sorted(m for m, p in modules().items() if only_in_display_hook(p))
    assert users == ["phaseinterp.measure.curve", "phaseinterp.measure.specialization"]


def test_the_checks_catch_what_they_are_for(tmp_path):
    assert floor_of("phaseinterp.families.hf_causal_lm") == 1 and floor_of("phaseinterp.train.loop") == 7
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from phaseinterp.plot import phase_figure\n")
    assert imports(bad, {"phaseinterp.plot"}) == {"phaseinterp.plot": 2}
    by_name = tmp_path / "by_name.py"
    by_name.write_text('"""phaseinterp.cli"""\nimport importlib\n\n\ndef f(verb):\n'
                       '    importlib.import_module("phaseinterp.cli")\n'
                       '    importlib.import_module(f"phaseinterp.commands.{verb}")\n'
                       '    return ["-m", "phaseinterp.train.result"], "see phaseinterp.plot for figures"\n')
    known = {"phaseinterp.cli", "phaseinterp.commands", "phaseinterp.commands.sweep", "phaseinterp.train",
             "phaseinterp.train.result", "phaseinterp.plot"}
    assert imports(by_name, known) == {"phaseinterp.cli": 6, "phaseinterp.commands.sweep": 7, "phaseinterp.train.result": 8}


def test_docs_name_every_floor_and_package():
    text = DOC.read_text()
    rows = re.findall(r"^\| \*\*([\w/]+)\*\* \|([^|]*)\|", text, re.M)
    assert [name for name, _ in rows] == [name for name, _ in FLOORS], "docs/architecture.md's floor table is out of date"
    for (name, prefixes), (_, cell) in zip(FLOORS, rows):
        for prefix in prefixes:
            short = prefix.removeprefix("phaseinterp.") if prefix != "phaseinterp" else "phaseinterp"
            assert f"`{short}`" in cell, f"docs/architecture.md: floor {name} does not list `{short}`"
