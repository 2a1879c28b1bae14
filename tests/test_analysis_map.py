"""SpecializationMap: labels, ranking, coverage, tables, JSON round trip, display, heatmap."""

import json

import numpy as np
import plotly.graph_objects as go
import pytest

from phaseinterp.analysis import SpecializationMap, stack_maps
from phaseinterp.plot import map_figure

NAN = np.nan


@pytest.fixture
def smap():
    values = np.array([[[-100.0, -10.0, 5.0, NAN], [0.0, -60.0, -140.0, 3.0]],
                       [[-20.0, -20.0, -20.0, -20.0], [40.0, 0.0, 0.0, 0.0]]])
    return SpecializationMap(values, ("layer", "kv_head", "residue"),
                             {"layer": [0, 1], "kv_head": [0, 1], "residue": [0, 1, 2, 3]},
                             lo=values - 5, hi=np.minimum(values + 5, values + 200), extras={"acc": values / 200 + 1},
                             clean={"accuracy": [0.5, 0.5, 0.5, 0.5]}, quantity="relative accuracy change (%)",
                             meta={"intervention": {"kind": "knockout"}, "seed": 3})


def test_validation_names_the_problem():
    with pytest.raises(ValueError, match="coords\\['residue'\\] has 3 labels for an axis of length 4"):
        SpecializationMap(np.zeros((1, 4)), ("layer", "residue"), {"layer": [0], "residue": [0, 1, 2]})
    with pytest.raises(ValueError, match="direction=2 is invalid"):
        SpecializationMap(np.zeros((1, 1)), ("a", "b"), {"a": [0], "b": [0]}, direction=2)


def test_selection_rows_and_top(smap):
    assert smap.row_labels() == ["L0.KV0", "L0.KV1", "L1.KV0", "L1.KV1"]
    assert smap.sel(layer=0, kv_head=1).tolist()[:3] == [0.0, -60.0, -140.0]
    with pytest.raises(ValueError, match=r"kv_head=7 is invalid: allowed \[0, 1\]"):
        smap.sel(kv_head=7)
    top = smap.top(3)  # knockout: most negative first, NaN never chosen
    assert list(zip(top.unit, top.residue, top.value)) == [("L0.KV1", 2, -140.0), ("L0.KV0", 0, -100.0), ("L0.KV1", 1, -60.0)]
    assert smap.top(1, by="pos").value.tolist() == [40.0]
    assert smap.top(1, by="abs").value.tolist() == [-140.0]


def test_coverage_and_uncovered(smap):
    assert smap.coverage(50) == {"L0.KV0": [0], "L0.KV1": [1, 2], "L1.KV0": [], "L1.KV1": []}
    assert smap.uncovered(50) == [3]
    assert smap.coverage(15) == {"L0.KV0": [0], "L0.KV1": [1, 2], "L1.KV0": [0, 1, 2, 3], "L1.KV1": []}
    assert smap.coverage(50, dim="kv_head")["L0.residue=0"] == [0]  # per (layer, residue): which heads
    assert smap.coverage(15, significant=True)["L1.KV0"] == [0, 1, 2, 3]


def test_table_and_round_trip(smap, tmp_path):
    df = smap.to_pandas()
    assert len(df) == 16 and list(df.columns[:5]) == ["unit", "layer", "kv_head", "residue", "value"]
    assert {"lo", "hi", "acc"} <= set(df.columns)
    assert df.loc[(df.layer == 0) & (df.kv_head == 1) & (df.residue == 2), "value"].item() == -140.0
    path = smap.save(tmp_path / "m.json")
    raw = json.loads(path.read_text())
    assert raw["values"][0][0][3] is None and raw["meta"]["seed"] == 3 and "versions" in raw["meta"]
    back = SpecializationMap.load(path)
    np.testing.assert_array_equal(back.values, smap.values)
    np.testing.assert_array_equal(back.lo, smap.lo)
    np.testing.assert_array_equal(back.extras["acc"], smap.extras["acc"])
    assert back.coords == smap.coords and back.dims == smap.dims and back.clean == smap.clean
    smap.save(tmp_path / "m.csv")
    assert (tmp_path / "m.csv").read_text().splitlines()[0].startswith("unit,layer,kv_head,residue,value")
    with pytest.raises(ValueError, match=r"suffix '.txt' is invalid"):
        smap.save(tmp_path / "m.txt")


def test_heatmap_is_diverging_centered_and_clipped(smap):
    fig = map_figure(smap)
    assert isinstance(fig, go.Figure)
    hm = fig.data[0]
    assert (hm.zmid, hm.zmin, hm.zmax) == (0, -100.0, 100.0)
    assert list(hm.x) == ["0", "1", "2", "3"] and list(hm.y) == ["L0.KV0", "L0.KV1", "L1.KV0", "L1.KV1"]
    z = np.array(hm.z, dtype=float)
    assert z[1, 2] == -100.0 and float(np.array(hm.customdata)[1, 2, 0]) == -140.0  # clipped, true value on hover
    assert fig.layout.xaxis.title.text == "residue" and fig.layout.yaxis.title.text == "layer.kv_head"
    norm = SpecializationMap(np.array([[0.5, 2.0]]), ("head", "residue"), {"head": [0], "residue": [0, 1]}, clip=1.0,
                             direction=1)
    assert map_figure(norm).data[0].zmax == 1.0


def test_figure_marks_cells_whose_interval_includes_zero_and_masked_cells(smap):
    lo, hi = smap.lo.copy(), smap.hi.copy()
    lo[0, 0, 1], hi[0, 0, 1] = -15.0, 2.0  # -10 with an interval across 0: not significant
    masked = np.zeros(smap.shape, dtype=bool)
    masked[1, :, 3] = True
    values = np.where(masked, np.nan, smap.values)
    m = SpecializationMap(values, smap.dims, smap.coords, lo, hi, extras={"masked": masked}, quantity="relative (%)",
                          meta={"masked": {"reason": "clean accuracy below the floor"}})
    assert m.significant[0, 0, 1] == False and m.significant[0, 0, 0] == True  # noqa: E712
    fig = map_figure(m)
    gray, hm = fig.data
    text = np.array(hm.text)
    assert text[0, 1] == "(-10)" and text[0, 0] == "-100"  # parentheses: interval includes 0
    assert np.array(gray.text)[2, 3] == "masked" and np.array(gray.text)[0, 3] == ""
    assert np.array(hm.customdata)[2, 3, 1] == "masked" and np.array(hm.customdata)[0, 1, 1].startswith("not significant")
    assert "gray: masked, clean accuracy below the floor" in fig.layout.title.text
    table = m.to_pandas()
    assert {"significant", "masked"} <= set(table.columns) and int(table.masked.sum()) == 2
    assert not table.loc[(table.layer == 0) & (table.kv_head == 0) & (table.residue == 1), "significant"].item()


def test_jupyter_display_and_repr(smap):
    html = smap._repr_html_()
    assert "plotly-graph-div" in html and "top cells" in html and "SpecializationMap(knockout" in html
    assert "layer[2] x kv_head[2] x residue[4]" in repr(smap)


def test_stack_maps(smap):
    st = stack_maps([smap, smap], "step", [100, 200])
    assert st.dims == ("step", "layer", "kv_head", "residue") and st.shape == (2, 2, 2, 4)
    assert st.row_labels()[0] == "step=100.L0.KV0"
