"""Gate cycling with payload maps (`payload=True`): the exact identity it satisfies, and how it
relates to the paper's gates-only cycling."""

from __future__ import annotations

import pytest
import torch

from tests.helpers import noisy_model, tiny_cfg
from phaseinterp import CompressionConfig
from phaseinterp.backends import HookedNNsightBackend
from phaseinterp.interventions import cycled_gates
from phaseinterp.model.compressor import window_positions

W4 = CompressionConfig(window=4, stride=4, local_window=2)


def _tokens(n_windows: int, W: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 97, (3, n_windows * W), generator=torch.Generator().manual_seed(seed))


def _rolled_in_windows(tokens: torch.Tensor, W: int, delta: int) -> torch.Tensor:
    """Tokens with each window's slots rolled by -delta: slot i holds position start + (i + delta) mod W."""
    b, n = tokens.shape
    return torch.roll(tokens.view(b, n // W, W), -delta, dims=2).reshape(b, n)


@pytest.mark.parametrize("delta", [1, 2, 3])
def test_payload_cycling_equals_rolling_each_window_of_the_input(delta):
    """Layer 0 reads each position's token alone (no positional embedding), so with W = S the entries
    of the fully cycled compressor are the uncycled entries of the input rolled inside each window."""
    model = noisy_model(tiny_cfg([W4, "full"]))
    tokens = _tokens(6, 4)
    names = ["blocks.0.attn.compress_k.hook_out", "blocks.0.attn.compress_v.hook_out"]
    _, moved = model.run_with_cache(_rolled_in_windows(tokens, 4, delta), names_filter=names)
    with cycled_gates(model, delta, payload=True):
        _, cycled = model.run_with_cache(tokens, names_filter=names)
    with cycled_gates(model, delta):
        _, gates_only = model.run_with_cache(tokens, names_filter=names)
    for name in names:
        torch.testing.assert_close(cycled[name], moved[name], atol=1e-5, rtol=1e-5)
        assert (gates_only[name] - moved[name]).abs().max() > 1e-2  # per-offset payload maps: the paper's variant differs


@pytest.mark.parametrize("cc", [CompressionConfig(window=8, stride=4, local_window=3),
                                CompressionConfig(window=6, stride=4, gate="vector", kv="tied", local_window=3)],
                         ids=["w8s4", "w6s4-vector-tied"])
def test_payload_cycling_rolls_the_slots_of_overlapping_windows(cc):
    """The general identity, overlapping windows included: a fully cycled compressor folds window
    slots [x_0 .. x_{W-1}] as the original folds [x_delta .. x_{W-1}, x_0 .. x_{delta-1}]."""
    model = noisy_model(tiny_cfg([cc, "full"]))
    comp = model.blocks[0].attn.compress_kv if cc.kv == "tied" else model.blocks[0].attn.compress_k
    h = torch.randn(2, 30, model.cfg.d_model, generator=torch.Generator().manual_seed(3))
    pos = window_positions(cc, h.shape[1])
    windows, before = h[:, pos.clamp(min=0)], pos < 0
    delta = 3
    expected = comp.fold(torch.roll(windows, -delta, dims=2), torch.roll(before, -delta, dims=1))
    with cycled_gates(model, delta, layers=[0], payload=True):
        got = comp.fold(windows, before)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    assert (comp.fold(windows, before) - expected).abs().max() > 1e-2


@pytest.mark.parametrize("payload", [False, True])
def test_cycling_by_delta_plus_W_equals_cycling_by_delta(payload):
    model = noisy_model(tiny_cfg([W4, W4]))
    tokens = _tokens(5, 4)
    clean = model(tokens)
    with cycled_gates(model, 1, payload=payload):
        one = model(tokens)
    with cycled_gates(model, 5, payload=payload):
        five = model(tokens)
    torch.testing.assert_close(five, one, atol=1e-6, rtol=1e-6)
    assert (one - clean).abs().max() > 1e-3
    torch.testing.assert_close(model(tokens), clean)  # restored


def test_with_shared_payload_maps_the_two_variants_agree():
    shared = CompressionConfig(window=4, stride=4, payload="shared", local_window=2)
    model = noisy_model(tiny_cfg([shared, shared]))
    tokens = _tokens(5, 4)
    with cycled_gates(model, 2):
        gates_only = model(tokens)
    with cycled_gates(model, 2, payload=True):
        both = model(tokens)
    torch.testing.assert_close(both, gates_only, atol=1e-6, rtol=1e-6)
    assert (both - model(tokens)).abs().max() > 1e-3


def test_payload_cycling_moves_uniform_gates_and_restores_on_error():
    uniform = CompressionConfig(window=4, stride=4, gate="uniform", local_window=2)
    model = noisy_model(tiny_cfg([uniform, "full"]))
    tokens = _tokens(5, 4)
    clean = model(tokens)
    with pytest.raises(ValueError, match="payload=True also rolls"):
        with cycled_gates(model, 1):
            pass
    with pytest.raises(RuntimeError, match="inside"):
        with cycled_gates(model, 1, payload=True):
            assert (model(tokens) - clean).abs().max() > 1e-3
            raise RuntimeError("inside")
    torch.testing.assert_close(model(tokens), clean)
    assert model.blocks[0].attn.compress_k.payload_index.tolist() == [0, 1, 2, 3]


def test_a_backend_that_edits_gate_logits_refuses_payload_cycling():
    model = noisy_model(tiny_cfg([W4, "full"]))
    backend = HookedNNsightBackend(model)
    with pytest.raises(ValueError, match="payload=True is invalid"):
        with cycled_gates(backend, 1, payload=True):
            pass
    with cycled_gates(backend, 1):  # gates only still works there
        assert (backend(_tokens(4, 4)) - model(_tokens(4, 4))).abs().max() > 1e-3
