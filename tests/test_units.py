"""One unit language: `phaseinterp.units.Unit` names what every intervention, map, backend and the
CLI act on, with the maps' row labels as its names ("L1", "L1.KV0", "L0.H3", "L1.G0")."""

import numpy as np
import pytest
import torch

import phaseinterp
from phaseinterp.analysis import SpecializationMap
from phaseinterp.units import LEVELS, UNIT_KINDS, Unit, head_units
from tests.helpers import tiny_cfg

CANONICAL = {Unit("layer", 3): "L3", Unit("kv_head", 3, 0): "L3.KV0", Unit("head", 12, 5): "L12.H5",
             Unit("gate", 3, 1): "L3.G1"}
OLD = {Unit("layer", 3): "L3", Unit("kv_head", 3, 0): "L3.kv0", Unit("head", 12, 5): "L12.h5",
       Unit("gate", 3, 1): "L3.gate1"}


def test_every_kind_round_trips_in_both_spellings():
    assert {u.kind for u in CANONICAL} == set(UNIT_KINDS)
    for unit, name in CANONICAL.items():
        assert unit.name == str(unit) == name
        assert Unit.parse(name) == unit and Unit.parse(unit.name) == unit
        for spelling in (name, name.lower(), OLD[unit], OLD[unit].upper()):
            assert Unit.parse(spelling) == unit, spelling
            assert Unit.parse(spelling).name == name


@pytest.mark.parametrize("bad", ["", "L", "3.KV0", "L3.", "L3.KV", "L3.Q0", "L3.kv-1", "L-1", "L3.KV0.H1", " L3",
                                 "L3.head0", "L3_kv0", None, 3])
def test_parse_rejects_bad_names_naming_the_value(bad):
    with pytest.raises(ValueError, match=rf"unit name {repr(bad).replace('.', '[.]')} is invalid: allowed 'L<layer>', "
                                         r"'L<layer>\.KV<k>', 'L<layer>\.H<h>' or 'L<layer>\.G<b>'"):
        Unit.parse(bad)


def test_head_units_cover_the_heads_they_did_before_on_a_gqa_config():
    cfg = tiny_cfg(["full", "full"], n_heads=4, n_kv_heads=2)
    got = {level: [(u.name, u.layer, u.heads(cfg)) for u in head_units(cfg, level)] for level in LEVELS}
    assert got == {  # as the former HeadUnit(layer, index, heads, level) listed them
        "kv_head": [("L0.KV0", 0, (0, 1)), ("L0.KV1", 0, (2, 3)), ("L1.KV0", 1, (0, 1)), ("L1.KV1", 1, (2, 3))],
        "head": [(f"L{l}.H{h}", l, (h,)) for l in (0, 1) for h in range(4)],
        "layer": [("L0", 0, (0, 1, 2, 3)), ("L1", 1, (0, 1, 2, 3))],
    }
    assert [u.name for u in head_units(cfg, "kv_head", [1])] == ["L1.KV0", "L1.KV1"]
    assert torch.equal(Unit("kv_head", 1, 1).mask(cfg), torch.tensor([False, False, True, True]))
    assert all(u.kind == "layer" and u.index is None for u in head_units(cfg, "layer"))
    assert phaseinterp.Unit is Unit and phaseinterp.head_units is head_units


def test_units_say_what_a_config_lacks():
    cfg = tiny_cfg(["full", "full"], n_heads=4, n_kv_heads=2)
    with pytest.raises(ValueError, match=r"L1\.KV2: kv_head index=2 is out of range: allowed 0\.\.1"):
        Unit("kv_head", 1, 2).heads(cfg)
    with pytest.raises(ValueError, match=r"L2: layer=2 is out of range: allowed 0\.\.1"):
        Unit("layer", 2).mask(cfg)
    with pytest.raises(ValueError, match=r"L0\.G0: a gate unit has no query heads"):
        Unit("gate", 0, 0).heads(cfg)
    with pytest.raises(ValueError, match=r"level='neuron' is invalid"):
        head_units(cfg, "neuron")
    with pytest.raises(ValueError, match=r"layer=5 is invalid: allowed 0\.\.1"):
        head_units(cfg, "head", [5])


def test_map_rows_are_units():
    for axis, coords, names in [("kv_head", [0, 1], ["L0.KV0", "L0.KV1", "L2.KV0", "L2.KV1"]),
                                ("head", [3], ["L0.H3", "L2.H3"]), ("heads", ["all"], ["L0", "L2"])]:
        m = SpecializationMap(np.zeros((2, len(coords), 4)), ("layer", axis, "residue"),
                              {"layer": [0, 2], axis: coords, "residue": [0, 1, 2, 3]})
        assert [u.name for u in m.units()] == m.row_labels() == names
        assert [Unit.parse(label) for label in m.row_labels()] == m.units()
    branches = SpecializationMap(np.zeros((1, 2, 4)), ("layer", "branch", "residue"),
                                 {"layer": [0], "branch": ["k", "v"], "residue": [0, 1, 2, 3]})
    with pytest.raises(ValueError, match=r"rows over \['layer', 'branch'\] are not units"):
        branches.units()
