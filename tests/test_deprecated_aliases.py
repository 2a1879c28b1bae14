"""The modules issue 42 moved into the family folders keep their old import paths as aliases: each
old path gives the moved module itself and says, once, where it lives now."""

import importlib
import sys

import pytest

MOVED = {
    "phaseinterp.backends.hf": "phaseinterp.families.hf.backend",
    "phaseinterp.backends.hooked": "phaseinterp.families.hooked.backend",
    "phaseinterp.backends.nsa": "phaseinterp.families.nsa.backend",
    "phaseinterp.backends.dsa": "phaseinterp.families.dsa.backend",
    "phaseinterp.backends.dsa_indexer": "phaseinterp.families.dsa.indexer",
    "phaseinterp.backends.deepseek_v4": "phaseinterp.families.deepseek_v4.backend",
    "phaseinterp.backends.bridge": "phaseinterp.families.bridges.backend",
    "phaseinterp.backends.compressed_hf": "phaseinterp.families.compressed_hf.backend",
    "phaseinterp.convert.deepseek_v4": "phaseinterp.families.deepseek_v4.convert",
}


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_path_is_the_moved_module_and_warns(old, monkeypatch):
    new = importlib.import_module(MOVED[old])
    monkeypatch.delitem(sys.modules, old, raising=False)  # import the alias afresh, as a first import does
    with pytest.warns(DeprecationWarning, match=f"{old} is deprecated: import {MOVED[old]}"):
        alias = importlib.import_module(old)
    assert alias is new


def test_resolve_model_moved_to_the_families():
    from phaseinterp.families.resolve import resolve_model

    sys.modules.pop("phaseinterp.backends.resolve", None)
    with pytest.warns(DeprecationWarning, match="import resolve_model from phaseinterp.families.resolve"):
        from phaseinterp.backends.resolve import resolve_model as old
    assert old is resolve_model
