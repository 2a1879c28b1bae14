"""Attention views: role-aware token names, the labelled attention figure, the circuitsvis
adapter's data (the view itself only where circuitsvis is installed), and the Jupyter display
of curves and maps (a plotly figure that works offline; plotly loaded only when asked)."""

import base64
import importlib.util
import json
import re
import subprocess
import sys

import numpy as np
import pytest
import torch

from phaseinterp import HookedCompressedTransformer, preset
from phaseinterp.analysis import pattern_by_token
from phaseinterp.measure import PhaseCurve, SpecializationMap
from phaseinterp.plot import attention_figure, attention_view, circuitsvis_data, map_figure
from phaseinterp.plot.display import reset_embedding
from phaseinterp.tasks import RecordLookup, TokenPools, to_str_tokens


@pytest.fixture(scope="module")
def setup():
    model = HookedCompressedTransformer(preset("tiny-w4s4"), seed=0)
    task = RecordLookup(vocab_size=model.cfg.vocab_size, n_records=4, n_demos=1)
    batch = task.sample(2, modulus=4, seed=1)
    return model, task, batch


def test_token_names_follow_the_pools():
    pools = TokenPools(keys=np.array([10, 11]), values=np.array([20, 21, 22]), filler=np.array([5]), head=(1, 2),
                       tail=(3,))
    assert pools.to_str_tokens([1, 2, 11, 22, 5, 3, 99]) == ["H0", "H1", "K1", "V2", "FILL", "T0", "#99"]
    assert pools.to_str_tokens(torch.tensor([[10, 20], [5, 21]])) == [["K0", "V0"], ["FILL", "V1"]]
    with pytest.raises(ValueError, match=r"tokens of shape \(1, 1, 1\) .* allowed integer ids"):
        pools.to_str_tokens(np.zeros((1, 1, 1), dtype=int))
    with pytest.raises(ValueError, match="vocab='x' is invalid: allowed TokenPools"):
        to_str_tokens([0], "x")


def test_every_prompt_token_is_named_by_its_role(setup):
    _, task, batch = setup
    pools = task.pools
    names = to_str_tokens(batch.tokens, task)
    assert names == to_str_tokens(batch.tokens, task.vocab_size)  # the synthetic split, from its size
    for row, labels in zip(batch.tokens.tolist(), names):
        for tok, name in zip(row, labels):
            role, index = name[0], name[1:]
            if name == "BOS":
                assert tok == pools.head[0]
            elif name == "FILL":
                assert tok in pools.filler
            else:
                assert {"K": pools.keys, "V": pools.values}[role][int(index)] == tok
    i = 0  # the scored answer is the target record's value
    assert names[i][int(batch.value_pos[i])] == f"V{list(pools.values).index(int(batch.answer[i]))}"


def test_attention_figure_shows_the_computed_pattern_with_token_labels(setup):
    model, task, batch = setup
    tokens = batch.tokens[:3]
    pattern = pattern_by_token(model, tokens, layer=1)  # [batch, head, q, k]
    labels = to_str_tokens(tokens[2], task)
    one = attention_figure(pattern, tokens, task, row=2, heads=1, layer=1)
    (trace,) = one.data
    np.testing.assert_allclose(np.asarray(trace.z), pattern[2, 1].numpy(), rtol=1e-6)
    assert list(one.layout.xaxis.ticktext) == labels and list(one.layout.yaxis.ticktext) == labels
    assert list(one.layout.xaxis.tickvals) == list(range(len(labels)))  # positions: repeated labels stay apart
    assert one.layout.title.text == "attention: L1H1"
    grid = attention_figure(pattern, tokens, task, row=2, cols=2)
    H = model.cfg.n_heads
    assert len(grid.data) == H and [t.name for t in grid.data] == [f"H{h}" for h in range(H)]
    for h, t in enumerate(grid.data):
        np.testing.assert_allclose(np.asarray(t.z), pattern[2, h].numpy(), rtol=1e-6)
    axes = [k for k in grid.layout.to_plotly_json() if k.startswith("xaxis")]
    assert len(axes) == H and all(list(grid.layout[a].ticktext) == labels for a in axes)
    custom = np.asarray(grid.data[0].customdata)  # hover: [query label, key label]
    assert custom[5, 3, 0] == labels[5] and custom[5, 3, 1] == labels[3]
    own = [f"t{i}" for i in range(tokens.shape[1])]  # labels given (e.g. an HF tokenizer's)
    assert list(attention_figure(pattern[2, 0], tokens[2], own).layout.xaxis.ticktext) == own


def test_attention_figure_names_bad_input(setup):
    model, task, batch = setup
    pattern = pattern_by_token(model, batch.tokens[:2], layer=1)
    H = model.cfg.n_heads
    with pytest.raises(ValueError, match=f"heads=9 is invalid: allowed heads in 0..{H - 1}"):
        attention_figure(pattern, batch.tokens[:2], task, heads=9)
    with pytest.raises(ValueError, match="row=5 out of range: allowed 0..1"):
        attention_figure(pattern, batch.tokens[:2], task, row=5)
    T = batch.tokens.shape[1]
    with pytest.raises(ValueError, match=f"allowed \\({T}, {T}\\), the prompt's length"):
        attention_figure(pattern[..., :-1], batch.tokens[:2], task)
    with pytest.raises(ValueError, match="cols=0 is invalid"):
        attention_figure(pattern, batch.tokens[:2], task, cols=0)
    with pytest.raises(ValueError, match=f"3 labels for a prompt of {T} tokens"):
        attention_figure(pattern, batch.tokens[:2], ["a", "b", "c"])


def test_circuitsvis_data_without_circuitsvis(setup):
    model, task, batch = setup
    pattern = pattern_by_token(model, batch.tokens[:1], layer=0)
    data = circuitsvis_data(pattern, batch.tokens[:1], task, heads=[2, 0], layer=0)
    assert data["tokens"] == to_str_tokens(batch.tokens[0], task)
    assert data["attention_head_names"] == ["L0H2", "L0H0"]
    np.testing.assert_allclose(data["attention"], pattern[0, [2, 0]].numpy(), rtol=1e-6)


@pytest.mark.skipif(importlib.util.find_spec("circuitsvis") is not None, reason="circuitsvis is installed")
def test_the_view_names_the_extra_when_circuitsvis_is_missing(setup):
    model, task, batch = setup
    with pytest.raises(ImportError, match=r"pip install 'phaseinterp\[views\]'"):
        attention_view(pattern_by_token(model, batch.tokens[:1], layer=0), batch.tokens[:1], task)


@pytest.mark.skipif(importlib.util.find_spec("circuitsvis") is None, reason="circuitsvis not installed (extra views)")
def test_the_circuitsvis_view(setup):
    model, task, batch = setup
    view = attention_view(pattern_by_token(model, batch.tokens[:1], layer=0), batch.tokens[:1], task, heads=0)
    assert "BOS" in str(view)


def plotted(html: str) -> list[dict]:
    """The traces of the plotly figure in a notebook output (typed arrays decoded)."""
    start = re.search(r'Plotly\.newPlot\(\s*"[^"]+",\s*', html).end()
    data, _ = json.JSONDecoder().raw_decode(html[start:])

    def decode(v):
        if isinstance(v, dict) and "bdata" in v:
            arr = np.frombuffer(base64.b64decode(v["bdata"]), dtype=np.dtype(v["dtype"]))
            return arr.reshape([int(n) for n in str(v["shape"]).split(",")]) if "shape" in v else arr
        return np.asarray(v) if isinstance(v, list) else v
    return [{k: decode(v) for k, v in t.items()} for t in data]


def small_curve() -> PhaseCurve:
    residue = np.tile(np.arange(4), 30)
    correct = (residue != 3) | (np.arange(len(residue)) % 3 == 0)
    return PhaseCurve.from_correct(correct, residue=residue, example_id=np.repeat(np.arange(30), 4), modulus=4,
                                   period=4, n_boot=50, n_perm=50, label="demo")


def test_notebook_display_draws_the_figure_offline():
    reset_embedding()
    curve = small_curve()
    first = curve._repr_html_()
    assert 'class="plotly-graph-div"' in first and "<details>" in first and "demo" in first
    assert 'src="https://cdn.plot.ly' not in first and len(first) > 3_000_000  # plotly.js inline, no network
    (trace,) = plotted(first)
    np.testing.assert_allclose(trace["y"], 100 * curve.accuracy)
    values = np.array([[[-80.0, 5.0, 0.0, -40.0]]])
    smap = SpecializationMap(values, ("layer", "kv_head", "residue"), {"layer": [1], "kv_head": [0], "residue": [0, 1, 2, 3]},
                             quantity="absolute accuracy change (pp)", clip=100.0)
    later = smap._repr_html_()
    assert 'class="plotly-graph-div"' in later and len(later) < 100_000  # the page already holds plotly.js
    np.testing.assert_allclose(plotted(later)[-1]["z"], np.asarray(map_figure(smap).data[-1].z))
    np.testing.assert_allclose(plotted(later)[-1]["z"], values[0])
    reset_embedding()
    assert len(smap._repr_html_()) > 3_000_000


def test_plotly_loads_only_when_a_figure_is_shown():
    code = ("import sys, numpy as np\nfrom phaseinterp.measure import PhaseCurve\n"
            "c = PhaseCurve.from_correct(np.arange(40) % 3 > 0, residue=np.arange(40) % 4, "
            "example_id=np.arange(40) // 4, modulus=4, n_boot=20, n_perm=20)\nrepr(c)\n"
            "print('plotly' in sys.modules)\nc._repr_html_()\nprint('plotly' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[-2:] == ["False", "True"]
