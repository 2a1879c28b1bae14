"""A type checker sees the public API: every lazily exported name (PEP 562, phaseinterp/_lazy.py)
resolves for mypy to what it is at run time, through `phaseinterp/__init__.pyi` for the top-level
package and `if TYPE_CHECKING:` imports in the others; an unknown name is an error for mypy as it is
for Python. The stub and the imports are checked against the run-time export tables."""

import ast
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "phaseinterp"
LAZY = sorted(".".join(p.relative_to(ROOT).parent.parts) for p in PACKAGE.rglob("__init__.py")
              if "lazy_exports(" in p.read_text())


def static_imports(package: str) -> dict[str, str]:
    """{name: module} that a type checker reads for `package`: every import of its `.pyi` stub, or the
    imports under `if TYPE_CHECKING:` of its `__init__.py`."""
    init = ROOT / package.replace(".", "/") / "__init__.py"
    stub = init.with_suffix(".pyi")
    tree = ast.parse((stub if stub.exists() else init).read_text())
    if stub.exists():
        nodes = tree.body
    else:
        nodes = [n for block in tree.body if isinstance(block, ast.If) and ast.unparse(block.test) == "TYPE_CHECKING"
                 for n in block.body]
    return {(a.asname or a.name): node.module for node in nodes if isinstance(node, ast.ImportFrom) for a in node.names}


def test_the_lazy_packages_are_found():
    assert {"phaseinterp", "phaseinterp.tasks", "phaseinterp.theory", "phaseinterp.train", "phaseinterp.plot",
            "phaseinterp.model.nsa"} <= set(LAZY)


@pytest.mark.parametrize("package", LAZY)
def test_what_the_type_checker_reads_is_the_export_table(package):
    table = importlib.import_module(package)._EXPORTS
    assert static_imports(package) == {name: f"{package}.{module}" for name, module in table.items()}


def test_top_level_stub_declares_all_and_version():
    import phaseinterp

    tree = ast.parse((PACKAGE / "__init__.pyi").read_text())
    declared = next(ast.literal_eval(n.value) for n in tree.body
                    if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "__all__")
    assert sorted(declared) == sorted(phaseinterp.__all__)
    assert any(isinstance(n, ast.AnnAssign) and ast.unparse(n.target) == "__version__" for n in tree.body)


# Followed, these cost mypy most of a minute and decide no test here: their types read as Any, while torch
# (whose decorators type some exported functions), transformer_lens (the base class of our models: skipped, a
# model would be assignable to anything) and phaseinterp itself are followed.
UNFOLLOWED = ("transformers", "nnsight", "plotly", "scipy", "pandas", "accelerate", "safetensors",
              "tokenizers", "huggingface_hub", "gguf", "einops", "jaxtyping", "beartype", "matplotlib", "tqdm")


def mypy(tmp_path: Path, *files: Path) -> list[str]:
    """mypy's error and note lines for `files` (errors inside phaseinterp and its dependencies are not
    reported: only whether the usage files resolve)."""
    config = tmp_path / "mypy.ini"
    config.write_text("[mypy]\n[mypy-" + ",".join(f"{m}.*" for m in UNFOLLOWED) + "]\nfollow_imports = skip\n")
    run = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(config), "--follow-imports=silent",
                          "--show-error-codes",
                          "--no-error-summary", "--python-version", "3.11", *map(str, files)],
                         capture_output=True, text=True, cwd=ROOT)
    assert run.returncode in (0, 1), run.stdout + run.stderr  # 2: mypy itself failed
    return run.stdout.splitlines()


def test_mypy_resolves_every_lazy_name_and_rejects_unknown_ones(tmp_path):
    names = [(package, name) for package in LAZY for name in sorted(importlib.import_module(package)._EXPORTS)]
    lines = ["import " + ", ".join(LAZY)]
    lines += [f"reveal_type({package}.{name})" for package, name in names]
    lines += [f"{package}.no_such_name" for package in LAZY]
    probe = tmp_path / "probe.py"
    probe.write_text("\n".join(lines) + "\n")
    out = mypy(tmp_path, probe)
    revealed = {int(m[1]): m[2] for line in out if (m := re.match(r".*probe\.py:(\d+): note: Revealed type is \"(.*)\"", line))}
    assert sorted(revealed) == list(range(2, 2 + len(names))), "\n".join(out)
    unresolved = [f"{package}.{name}" for (package, name), line in zip(names, range(2, 2 + len(names)))
                  if revealed[line] == "Any"]
    assert not unresolved, f"names a type checker sees as Any: {unresolved}"
    errors = [line for line in out if ": error:" in line]
    first = 2 + len(names)
    assert [int(e.split(":")[1]) for e in errors] == list(range(first, first + len(LAZY))), "\n".join(errors)
    assert all(e.endswith("[attr-defined]") for e in errors), "\n".join(errors)


def test_mypy_accepts_a_usage_file_of_the_public_api(tmp_path):
    out = mypy(tmp_path, ROOT / "tests" / "typing_usage.py")
    unresolved = [line for line in out if re.search(r"\[(attr-defined|name-defined|import-not-found|import-untyped)\]", line)]
    assert not unresolved, "\n".join(unresolved)
    assert not [line for line in out if ": error:" in line], "\n".join(out)


def test_load_is_typed_by_name_and_a_wrong_assignment_fails(tmp_path):
    """`phaseinterp.load` of a core shipped name is the model class it loads as; any other source is a
    `torch.nn.Module`, never `Any`, so assigning it to the wrong type is a mypy error."""
    probe = tmp_path / "probe.py"
    probe.write_text("import phaseinterp\n"
                     "reveal_type(phaseinterp.load('w4s4'))\n"
                     "reveal_type(phaseinterp.load('hf-deepseek-v4'))\n"
                     "reveal_type(phaseinterp.load('runs/mine'))\n"
                     "reveal_type(phaseinterp.models())\n"
                     "bad: int = phaseinterp.load('w4s4')\n"
                     "worse: str = phaseinterp.load('runs/mine')\n")
    out = mypy(tmp_path, probe)
    revealed = [m[1] for line in out if (m := re.search(r'Revealed type is "(.*)"', line))]
    assert revealed == ["phaseinterp.model.transformer.HookedCompressedTransformer",
                        "phaseinterp.families.hf_causal_lm.HFCausalLM", "torch.nn.modules.module.Module",
                        "list[phaseinterp.catalog.ModelInfo]"], "\n".join(out)
    errors = [line for line in out if ": error:" in line]
    assert [int(e.split(":")[1]) for e in errors] == [6, 7], "\n".join(out)
    assert all("Incompatible types in assignment" in e and e.endswith("[assignment]") for e in errors), "\n".join(errors)


def test_the_typed_names_are_the_catalogs_core_set():
    """`HookedName` / `HFName` (phaseinterp/sources.py) list the wheel's shipped models by what they load as."""
    from typing import get_args

    from phaseinterp import catalog
    from phaseinterp.sources import HFName, HookedName

    core = {m.name: m.config for m in catalog.models() if m.core}
    assert set(get_args(HookedName)) == {n for n, c in core.items() if not c.startswith(("HF ", "NSA"))}
    assert set(get_args(HFName)) == {n for n, c in core.items() if c.startswith("HF ")}
