"""The map entry points stay short enough to read (issue 42): `knockout_map`, `activation_patching`
and `gate_attribution` read as short recipes over named helpers; their settings are one frozen
options object each, built the same by the API (keywords) and the command line; the commands pass
a request object between their helpers and never write state onto the parsed `args`."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
from pathlib import Path

import pytest

from phaseinterp.cli import build_parser
from phaseinterp.commands.gates import attribution_options
from phaseinterp.commands.knockout import knockout_options, patching_options
from phaseinterp.interventions import (AttributionOptions, KnockoutOptions, PatchingOptions, activation_patching,
                                       gate_attribution, knockout_map)

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 55  # lines of code below the docstring


def _code_lines(fn) -> int:
    """Lines from the first statement after the docstring to the end of the function."""
    node = ast.parse(textwrap.dedent(inspect.getsource(fn))).body[0]
    body = node.body[1:] if isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant) \
        else node.body
    return node.end_lineno - body[0].lineno + 1


@pytest.mark.parametrize("fn", [knockout_map, activation_patching, gate_attribution])
def test_entry_points_read_as_short_recipes(fn):
    n = _code_lines(fn)
    assert 5 < n <= LIMIT, f"{fn.__name__} has {n} lines of code (allowed <= {LIMIT}): move a step into a helper"


def test_options_are_frozen_and_keywords_build_the_same_object():
    o = KnockoutOptions(n_boot=100, change="relative")
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.n_boot = 5
    assert KnockoutOptions.build(None, n_boot=100, change="relative") == o
    assert KnockoutOptions.build(o, seed=3) == dataclasses.replace(o, seed=3) != o  # keywords override
    assert KnockoutOptions.build(o) is o
    assert PatchingOptions().level == "head" and KnockoutOptions().level == "kv_head"  # each entry point's defaults
    with pytest.raises(TypeError, match=r"options \['n_bot'\] are invalid: allowed \[.*'n_boot'"):
        KnockoutOptions.build(None, n_bot=10)
    with pytest.raises(TypeError, match="options=PatchingOptions.* is invalid here: allowed a KnockoutOptions"):
        KnockoutOptions.build(PatchingOptions())
    with pytest.raises(TypeError, match=r"options \['n_boot'\] are invalid"):  # attribution has no bootstrap
        AttributionOptions.build(None, n_boot=10)


def _args(*argv: str):
    return build_parser().parse_args(list(argv))


def test_the_cli_builds_the_options_the_api_builds():
    args = _args("knockout", "--preset", "tiny-w4s4", "--n-boot", "300", "--task-seed", "4", "--level", "head",
                 "--replacement", "zero", "--positions", "3,7", "--change", "relative", "--floor", "0.4",
                 "--max-rows", "64", "--no-progress", "--out", "x")
    api = KnockoutOptions.build(None, level="head", replacement="zero", positions=[3, 7], n_boot=300, seed=4,
                                max_rows=64, label="tiny-w4s4 (seed 0)", change="relative", floor=0.4, progress=False)
    assert knockout_options(args) == api
    assert knockout_options(_args("knockout", "--preset", "p", "--out", "x")) == KnockoutOptions(label="p (seed 0)")
    assert patching_options(args) == PatchingOptions.build(None, unit="z", level="head", n_boot=300, seed=4,
                                                           max_rows=64, progress=False)
    assert patching_options(_args("knockout", "--preset", "p", "--level", "layer", "--out", "x")).level == "kv_head"
    gates = _args("gates", "--preset", "p", "--layers", "1", "2", "--mode", "noise", "--max-rows", "8", "--out", "x")
    assert attribution_options(gates) == AttributionOptions.build(None, override="uniform", mode="noise", layers=[1, 2],
                                                                  max_rows=8)


def _assigns_onto_args(tree: ast.Module) -> list[int]:
    """Lines assigning an attribute of a name `args` (`args.x = ...`, `args.x += ...`, setattr(args, ...))."""
    hits = []
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
        if any(isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "args"
               for t in targets):
            hits.append(node.lineno)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr" \
                and node.args and isinstance(node.args[0], ast.Name) and node.args[0].id == "args":
            hits.append(node.lineno)
    return hits


def test_no_command_writes_state_onto_args():
    offenders = {p.name: lines for p in sorted((ROOT / "phaseinterp" / "commands").glob("*.py"))
                 if (lines := _assigns_onto_args(ast.parse(p.read_text())))}
    assert offenders == {}, f"commands write onto args (build a Request instead): {offenders}"
    assert _assigns_onto_args(ast.parse("args.loaded = 1\nsetattr(args, 'x', 2)\n")) == [1, 2]  # the check sees them


def test_options_and_keywords_run_the_same_map():
    import numpy as np
    import torch

    from phaseinterp.interventions import planted_model
    from phaseinterp.tasks import RecordLookup

    torch.set_num_threads(1)
    model = planted_model(32, stride=4, key_offsets=(0, 2))  # KV head h owns phase key_offsets[h]: real effects
    task = RecordLookup(vocab_size=32, n_records=6, n_demos=1)
    batch, calib = task.sample(6, 4, seed=0), task.sample(6, 4, seed=0, split="calibration")
    by_keywords = knockout_map(model, batch, calib, replacement="zero", n_boot=40, seed=2, progress=False)
    base = KnockoutOptions(level="head", replacement="mean", n_boot=40, progress=False)
    by_options = knockout_map(model, batch, calib, options=base, level="kv_head", replacement="zero", seed=2)  # keywords win
    options_only = knockout_map(model, batch, calib, options=base)
    np.testing.assert_array_equal(by_keywords.values, by_options.values)
    np.testing.assert_array_equal(by_keywords.lo, by_options.lo)
    assert by_keywords.meta["intervention"] == by_options.meta["intervention"]
    assert np.nanmin(by_keywords.values) <= -50  # a knockout that matters: the comparison is not vacuous
    assert options_only.dims[1] == "head" and options_only.meta["intervention"]["replacement"] == "mean"
    assert by_options.meta["seed"] == 2 and options_only.meta["seed"] == 0 and options_only.meta["n_boot"] == 40
