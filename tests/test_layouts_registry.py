"""A new compressor layout is one `register_layout` call: test-only layouts run through the config,
the model, its hooks, the backend and a gate intervention, and change the output exactly where
their geometry differs from the generic layout."""

import dataclasses
import warnings

import pytest
import torch

from phaseinterp import CompressionConfig, HookedCompressedTransformer, preset
from phaseinterp.backends import backend_for
from phaseinterp.convert import load_hf_compressor
from phaseinterp.interventions import gate_override
from phaseinterp.layouts import LAYOUTS, Layout, hf_layouts, layout_of, register_layout
from phaseinterp.model.compressor import entry_rope_positions, map_index, n_maps, window_starts
from phaseinterp.model.joint_attention import key_positions


@pytest.fixture
def late_rope():
    """The generic geometry with each key entry rotated one stride after its window's start."""
    layout = register_layout(Layout("late-rope", rope_shift=1))
    yield layout
    del LAYOUTS["late-rope"]


@pytest.fixture
def two_block():
    """A CSA-like window (W = 2S, reaching one block back, one map per block) with the generic
    layout's scalar gates and separate K/V."""
    layout = register_layout(Layout("two-block", window_strides=2, lookback=1, block_maps=True))
    yield layout
    del LAYOUTS["two-block"]


def model_with(layout: str, **changes) -> HookedCompressedTransformer:
    cfg = preset("tiny-w4s4")
    layers = tuple(s if s == "full" else dataclasses.replace(s, layout=layout, **changes) for s in cfg.layers)
    return HookedCompressedTransformer(cfg.replace(layers=layers), seed=0).eval()


def tokens(model, T=24):
    return torch.randint(0, model.cfg.vocab_size, (2, T), generator=torch.Generator().manual_seed(0))


def test_a_registered_layout_changes_the_output_only_where_its_geometry_differs(late_rope):
    generic, late = model_with("generic"), model_with("late-rope")
    # the layout changes no parameter: the same seed gives the same weights
    assert all(torch.equal(a, b) for a, b in zip(generic.state_dict().values(), late.state_dict().values()))
    cc = late.cfg.compression(1)
    assert cc.pad == 0 and cc.rope_shift == cc.stride and cc.rope_position(2) == 3 * cc.stride
    x = tokens(generic)
    with torch.no_grad():
        lg, cache_g = generic.run_with_cache(x)
        ll, cache_l = late.run_with_cache(x)
    # layer 0 folds the same entries (RoPE is the attention's), then rotates them at other positions
    assert torch.equal(cache_g["blocks.0.attn.compress_k.hook_out"], cache_l["blocks.0.attn.compress_k.hook_out"])
    assert not torch.allclose(cache_g["blocks.0.attn.hook_rot_entries"], cache_l["blocks.0.attn.hook_rot_entries"])
    assert torch.equal(entry_rope_positions(cc, 3), window_starts(cc, 3) + cc.stride)
    first = cc.window - 1  # before the first entry is visible the attention reads no entry: same logits
    assert torch.equal(lg[:, :first], ll[:, :first])
    assert not torch.allclose(lg[:, first:], ll[:, first:], atol=1e-4)


def test_a_registered_geometry_runs_through_config_model_hooks_backend_and_interventions(two_block):
    cc = CompressionConfig(window=8, stride=4, layout="two-block")  # scalar gates, separate K/V: no requirement
    assert cc.pad == 4 and cc.n_entries(24) == 6 and n_maps(cc, "per_offset") == 2
    assert map_index(cc, "per_offset").tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    assert key_positions(cc, 24, 23, 0) == [0, 1, 2, 3]  # entry 0's window starts one block before 0
    with pytest.raises(ValueError, match=r"window=6 is invalid: allowed 2 \* stride = 8 for layout 'two-block'"):
        CompressionConfig(window=6, stride=4, layout="two-block")
    model = model_with("two-block", window=8)
    assert model.blocks[1].attn.compress_k.W_C.shape[0] == 2  # one payload map per block, not per offset
    x = tokens(model)
    with torch.no_grad():
        _, cache = model.run_with_cache(x)
    gate = cache["blocks.1.attn.compress_k.hook_gate"]  # [batch, entry, offset, kv_head]
    assert gate.shape[1:3] == (6, 8)
    assert (gate[:, 0, :4] == 0).all() and torch.allclose(gate.sum(2), torch.ones(()))
    assert (gate[:, 1:] > 0).all()
    valid = backend_for(model).gate_valid(1, 6)
    assert valid[0].tolist() == [False] * 4 + [True] * 4 and valid[1:].all()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an override that changed nothing would warn
        with gate_override(model, "uniform", layers=[1]):
            edited = model(x)
    assert not torch.allclose(model(x), edited)
    with pytest.raises(ValueError, match=r"layout='two-block': allowed 'deepseek-csa' or 'hca' for HF compressors"):
        load_hf_compressor(model.blocks[1].attn.compress_k, None)


def test_the_registry_lists_the_built_in_layouts_and_refuses_bad_ones():
    assert list(LAYOUTS)[:3] == ["generic", "deepseek-csa", "hca"]
    csa = layout_of("deepseek-csa")
    assert (csa.window_strides, csa.lookback, csa.rope_shift, csa.block_maps) == (2, 1, 1, True)
    assert dict(csa.requires) == {"kv": "tied", "gate": "vector"}
    assert {t: l.name for t, l in hf_layouts().items()} == {"compressed_sparse_attention": "deepseek-csa",
                                                           "heavily_compressed_attention": "hca"}
    with pytest.raises(ValueError, match=r"layout='ring' is invalid: allowed one of \['generic', 'deepseek-csa', 'hca'\]"):
        layout_of("ring")
    with pytest.raises(ValueError, match=r"layout='ring' is invalid: allowed one of \['generic', 'deepseek-csa', 'hca'\]"):
        CompressionConfig(window=4, stride=4, layout="ring")
    with pytest.raises(ValueError, match="layout 'hca' is already registered"):
        register_layout(Layout("hca"))
    with pytest.raises(ValueError, match="lookback=-1 is invalid"):
        Layout("bad", lookback=-1)


def test_a_layout_that_fixes_fields_says_which():
    register_layout(Layout("tied-only", requires=(("kv", "tied"),)))
    try:
        assert CompressionConfig(window=4, stride=4, kv="tied", layout="tied-only").layout == "tied-only"
        with pytest.raises(ValueError, match=r"layout='tied-only' is invalid: allowed 'tied-only' only with kv='tied'"):
            CompressionConfig(window=4, stride=4, layout="tied-only")
    finally:
        del LAYOUTS["tied-only"]
