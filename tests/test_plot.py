"""Figures: values, intervals, overlays, stride marks, HTML export; never show()."""

import numpy as np
import plotly.graph_objects as go
import pytest

from phaseinterp.measure import PhaseCurve
from phaseinterp.plot import phase_figure, save_html


def curve(rates, label, period=4, seed=0):
    rng = np.random.default_rng(seed)
    R = len(rates)
    residue = np.tile(np.arange(R), 40)
    example = np.repeat(np.arange(40), R)
    correct = rng.random(len(residue)) < np.asarray(rates)[residue]
    return PhaseCurve.from_correct(correct, residue=residue, example_id=example, modulus=R, period=period,
                                   n_boot=100, n_perm=50, label=label)


@pytest.fixture(autouse=True)
def no_show(monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("the library called show()")
    monkeypatch.setattr(go.Figure, "show", fail)


def test_one_curve_with_intervals_and_stride_marks():
    c = curve([0.9, 0.8, 0.7, 0.2] * 3, "compressed")
    fig = phase_figure(c)
    (trace,) = fig.data
    assert trace.name == "compressed"
    assert np.allclose(trace.y, 100 * c.accuracy) and np.allclose(trace.x, np.arange(12))
    assert np.allclose(trace.error_y.array, 100 * (c.boot_hi - c.accuracy))
    assert np.allclose(trace.error_y.arrayminus, 100 * (c.accuracy - c.boot_lo))
    assert sorted(s.x0 for s in fig.layout.shapes) == [3.5, 7.5]
    assert "compressed: phase effect" in fig.layout.title.text
    wilson = phase_figure(c, interval="wilson").data[0]
    assert np.allclose(wilson.error_y.array, 100 * (c.wilson_hi - c.accuracy))
    assert phase_figure(c, interval=None).data[0].error_y.array is None


def test_overlay_of_several_curves_and_strides():
    full, comp = curve([0.6] * 24, "full", period=None), curve([0.9, 0.8, 0.7, 0.2] * 6, "w4s4")
    fig = phase_figure({"full attention": full, "compressed": comp}, periods=[4, 8])
    assert [t.name for t in fig.data] == ["full attention", "compressed"]
    assert np.allclose(fig.data[1].y, 100 * comp.accuracy)
    xs = sorted(s.x0 for s in fig.layout.shapes)
    assert xs == sorted([k * 4 - 0.5 for k in range(1, 6)] + [k * 8 - 0.5 for k in range(1, 3)])
    assert {s.line.dash for s in fig.layout.shapes} == {"dot", "dash"}
    assert [t.name for t in phase_figure([full, comp]).data] == ["full", "w4s4"]


def test_html_export_shares_one_plotly_js_per_folder(tmp_path):
    fig = phase_figure(curve([0.5, 0.9, 0.9, 0.9], "x"))
    first = save_html(fig, tmp_path / "fig.html")
    nested = save_html(fig, tmp_path / "sub" / "fig.html", root=tmp_path)
    assert '"name":"x"' in first.read_text().replace(" ", "")
    assert 'src="plotly.min.js"' in first.read_text() and 'src="../plotly.min.js"' in nested.read_text()
    bundles = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.js"))
    assert bundles == ["plotly.min.js"] and (tmp_path / "plotly.min.js").stat().st_size > 1_000_000
    assert first.stat().st_size < 100_000 and nested.stat().st_size < 100_000
    embedded = save_html(fig, tmp_path / "alone" / "fig.html", include_plotlyjs=True)
    assert embedded.stat().st_size > 1_000_000 and not (tmp_path / "alone" / "plotly.min.js").exists()
    with pytest.raises(ValueError, match="include_plotlyjs='inline'"):
        save_html(fig, tmp_path / "x.html", include_plotlyjs="inline")


def test_bad_arguments():
    c = curve([0.5, 0.6], "x", period=None)
    with pytest.raises(ValueError, match="unknown interval 'sd'; choose one of: bootstrap, wilson, None"):
        phase_figure(c, interval="sd")
    with pytest.raises(ValueError, match="no curves to plot"):
        phase_figure([])
    with pytest.raises(ValueError, match=r"period=0 out of range"):
        phase_figure(c, periods=[0])


def test_table_figure_draws_one_protocol_of_a_results_table():
    from phaseinterp.plot import table_figure, zoo_figure

    rows = [{"model": "a", "protocol": "prefix", "accuracy": [0.5, 1.0], "learned": True},
            {"model": "b", "protocol": "prefix", "accuracy": [0.0, 0.25], "learned": False},
            {"model": "a", "protocol": "insequence", "accuracy": [1.0, 1.0], "learned": True}]
    fig = table_figure(rows, protocol="prefix")
    assert [t.name for t in fig.data] == ["a", "b"] and list(fig.data[1].y) == [0.0, 25.0]
    assert fig.data[0].line.dash is None and fig.data[1].line.dash == "dot"  # did not learn: dotted
    with pytest.raises(ValueError, match=r"no rows with protocol='suffix': allowed \['insequence', 'prefix'\]"):
        table_figure(rows, protocol="suffix")
    with pytest.warns(DeprecationWarning, match="use phaseinterp.plot.table_figure"):
        old = zoo_figure(rows, protocol="prefix")  # the old name still works, and says which to use
    assert [t.name for t in old.data] == ["a", "b"]
