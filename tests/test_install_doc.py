"""docs/install.md states the dependency bounds of pyproject.toml and why, the versions the suite
passed with, and the sae-lens conflict: the bounds it states are pyproject's, the versions it lists
and the ones installed here lie inside them."""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "install.md").read_text()
REQUIREMENTS = {Requirement(d).name: Requirement(d) for d in
                tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]}
BOUNDED = ["transformers", "nnsight", "transformer-lens", "torch"]


def versions_tested() -> dict[str, str]:
    """The "Tested versions" table: {package: version}."""
    table = DOC.split("## Tested versions", 1)[1].split("\n## ", 1)[0]
    return {m[1]: m[2] for m in re.finditer(r"^\| ([\w.-]+) \| ([\d.]+)", table, re.M)}


@pytest.mark.parametrize("name", BOUNDED)
def test_the_doc_states_pyprojects_bound(name):
    spec = str(REQUIREMENTS[name].specifier)
    row = next(line for line in DOC.splitlines() if line.startswith(f"| `{name}` |"))
    assert f"`{','.join(sorted(spec.split(','), key=lambda s: s[0] != '>'))}`" in row, (name, spec, row)


@pytest.mark.parametrize("name", ["transformers", "nnsight", "transformer-lens"])
def test_upper_bounds_cap_the_next_release_that_may_break(name):
    assert any(s.operator == "<" for s in REQUIREMENTS[name].specifier), f"{name} has no cap"


@pytest.mark.parametrize("name", ["transformers", "nnsight", "transformer-lens", "torch"])
def test_the_tested_and_the_installed_versions_lie_within_the_bounds(name):
    listed = versions_tested()[name]
    assert REQUIREMENTS[name].specifier.contains(Version(listed), prereleases=True), (name, listed)
    installed = Version(version(name)).base_version  # torch's "+cpu" local tag aside
    assert REQUIREMENTS[name].specifier.contains(installed, prereleases=True), (name, installed)


def test_the_transformers_floor_has_both_deepseek_models():
    import transformers.models.deepseek_v4  # noqa: F401  (the floor's reason: both ship from 5.11 on)
    import transformers.models.deepseek_v32  # noqa: F401

    assert "5.11" in str(REQUIREMENTS["transformers"].specifier)


def test_the_sae_lens_conflict_is_stated_with_its_cause():
    section = DOC.split("## Known conflict: sae-lens", 1)[1]
    assert "transformer-lens>=2.16.1,<4" in section and "`transformer-lens>=4,<5`" in section
    assert "HookedTransformer" in section  # the cause: TransformerLens 4 removed it
