"""The package says what it is: one version everywhere (`phaseinterp --version`, `__version__`,
pyproject), a top-level `--help` that starts with a sentence for users, and a wheel that ships the
LICENSE (SPDX `MIT`), `py.typed` and the top-level stub."""

import contextlib
import io
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

import phaseinterp
from phaseinterp.cli import DESCRIPTION, build_parser
from tests.helpers import copy_sources
from tests.test_startup import imported_after

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_version_is_one_number_everywhere():
    assert phaseinterp.__version__ == PYPROJECT["project"]["version"]
    out = subprocess.run([sys.executable, "-m", "phaseinterp.cli", "--version"], capture_output=True, text=True,
                         check=True, cwd=ROOT).stdout
    assert out.strip() == f"phaseinterp {phaseinterp.__version__}"
    assert imported_after("from phaseinterp.cli import main\ntry:\n    main(['--version'])\nexcept SystemExit:\n    pass") == []


def test_top_level_help_is_for_users():
    with contextlib.redirect_stdout(io.StringIO()) as text, pytest.raises(SystemExit):
        build_parser().parse_args(["--help"])
    help_text = " ".join(text.getvalue().split())
    assert help_text.startswith("usage: phaseinterp [-h] [--version] VERB ...")
    assert " ".join(DESCRIPTION.split()) in help_text and DESCRIPTION.endswith(".") and DESCRIPTION[0].isupper()
    for verb in ("reproduce", "sweep", "knockout", "train"):
        assert f" {verb} " in help_text
    assert "Each verb lives" not in help_text and "register(" not in help_text  # no developer docstring


def test_license_matches_pyproject():
    assert PYPROJECT["project"]["license"] == "MIT" and PYPROJECT["project"]["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License") and "the phaseinterp authors" in text
    assert not [c for c in PYPROJECT["project"]["classifiers"] if c.startswith("License ::")]  # the SPDX field says it


def test_wheel_ships_license_and_type_information(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    copy_sources(src)
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(tmp_path / "dist")], check=True, capture_output=True, cwd=tmp_path)
    (wheel,) = (tmp_path / "dist").glob("phaseinterp-*.whl")
    archive = zipfile.ZipFile(wheel)
    names = set(archive.namelist())
    assert {"phaseinterp/py.typed", "phaseinterp/__init__.pyi"} <= names, sorted(names)[:20]
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), [n for n in names if "dist-info" in n]
    metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "License-Expression: MIT" in metadata.splitlines() and "Classifier: Typing :: Typed" in metadata


def test_ruff_finds_nothing_and_ci_pins_the_same_ruff():
    pin = next(d for d in PYPROJECT["project"]["optional-dependencies"]["test"] if d.startswith("ruff=="))
    ci = (ROOT / ".ci" / "run").read_text()
    assert f"pip install -q {pin}" in ci and "ruff check ." in ci
    assert ci.index("ruff check .") < ci.index("pytest")
    run = subprocess.run([sys.executable, "-m", "ruff", "check", "--output-format", "concise", "."],
                         capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0, run.stdout + run.stderr


def test_readme_installs_for_cpu_and_cuda_users_alike():
    readme = (ROOT / "README.md").read_text()
    torch_req = next(d for d in PYPROJECT["project"]["dependencies"] if d.startswith("torch"))
    floor = torch_req.split(">=")[1].split(",")[0]
    install = readme[readme.index("Install PyTorch first"):readme.index("## Ten lines of API")]
    assert f"torch {floor} or later" in install and f"`torch>={floor}`" in install
    assert "**CUDA**" in install and "**CPU only**" in install
    assert "pip install torch==" not in readme  # a pinned CPU wheel would downgrade a CUDA user's torch
    assert "://" not in readme, "no hostnames or URLs in the README"
    assert "torch==2.13.0" in (ROOT / ".ci" / "run").read_text()  # CI keeps its own pin


def test_readme_is_a_front_page():
    readme = (ROOT / "README.md").read_text()
    assert 90 <= len(readme.splitlines()) <= 150, f"README has {len(readme.splitlines())} lines: a front page is about 120"
    for picture in ("assets/figures/phase_curve.png", "assets/figures/head_map.png"):
        assert f"]({picture})" in readme and (ROOT / picture).stat().st_size > 10_000, picture
    for link in ("tutorials/README.md", "docs/", "experiments/README.md", "docs/results.md"):
        assert f"]({link})" in readme and (ROOT / link).exists(), link
    prose = "".join(part for i, part in enumerate(readme.split("```")) if i % 2 == 0)  # outside code blocks
    assert "%" not in prose, "findings live in docs/results.md (rendered from the result files), not in the README"
    assert "arXiv 2609.36322" in readme and "## Citing" in readme
    # the verb table is one table: contiguous rows, one per verb that `phaseinterp --help` lists
    parser = build_parser()
    (subparsers,) = [a for a in parser._actions if a.choices and isinstance(a.choices, dict)]
    verbs = list(subparsers.choices)
    assert len(verbs) >= 8 and all(v in parser.format_help() for v in verbs), verbs
    section = readme[readme.index("## The `phaseinterp` command"):]
    lines = section.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("| verb"))
    rows = []
    for line in lines[first + 2:]:
        if not line.startswith("|"):
            break
        rows.append(line)
    assert sorted(re.match(r"\| `phaseinterp (\w+)", r).group(1) for r in rows) == sorted(verbs), rows
