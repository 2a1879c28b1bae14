"""Attention by source token: hand-computed, equal to hook_pattern under full attention, rows
summing to 1 on random compressed models of every gate kind and layout."""

import dataclasses

import pytest
import torch

from phaseinterp import CompressionConfig, HookedCompressedTransformer, preset
from phaseinterp.analysis import pattern_by_token, spread_pattern


def test_a_hand_computed_case():
    cc = CompressionConfig(window=4, stride=2, local_window=2)  # overlapping windows [0..3] and [2..5]
    T = 6
    n, L = cc.n_entries(T), cc.local_length()
    assert (n, L) == (2, 2)
    pattern = torch.zeros(1, 1, T, n + L)
    pattern[0, 0, 5] = torch.tensor([0.2, 0.5, 0.1, 0.2])  # query 5: entries 0 and 1, then positions 4 and 5
    gates = torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.25, 0.25, 0.25, 0.25]])[None, :, :, None]
    row = spread_pattern(cc, pattern, gates)[0, 0, 5]
    # positions 0, 1 only in entry 0; 2, 3 in both windows; 4, 5 in entry 1 and the local slots
    expected = torch.tensor([0.2 * 0.1, 0.2 * 0.2, 0.2 * 0.3 + 0.5 * 0.25, 0.2 * 0.4 + 0.5 * 0.25,
                             0.5 * 0.25 + 0.1, 0.5 * 0.25 + 0.2])
    torch.testing.assert_close(row, expected)
    with pytest.raises(ValueError, match="pattern has 3 keys: allowed entries \\+ local slots = 2 \\+ 2"):
        spread_pattern(cc, pattern[..., :3], gates)


def test_full_attention_is_its_own_pattern():
    model = HookedCompressedTransformer(preset("tiny-full"), seed=0).eval()
    tokens = torch.randint(0, model.cfg.vocab_size, (2, 20), generator=torch.Generator().manual_seed(0))
    _, cache = model.run_with_cache(tokens)
    torch.testing.assert_close(pattern_by_token(model, tokens, 1), cache["blocks.1.attn.hook_pattern"])


@pytest.mark.parametrize("name", ["tiny-w4s4", "tiny-w8s4", "tiny-w4s4-uniform", "tiny-deepseek-csa"])
def test_rows_sum_to_one_and_never_read_the_future(name):
    model = HookedCompressedTransformer(preset(name), seed=0).eval()
    tokens = torch.randint(0, model.cfg.vocab_size, (2, 40), generator=torch.Generator().manual_seed(0))
    layer = next(l for l in range(model.cfg.n_layers) if model.cfg.compression(l) is not None)
    p = pattern_by_token(model, tokens, layer)
    assert p.shape == (2, model.cfg.n_heads, 40, 40) and bool((p >= 0).all())
    sink = model.cfg.compression(layer).sink
    if not sink:
        torch.testing.assert_close(p.sum(-1), torch.ones(2, model.cfg.n_heads, 40))
    assert float(p.triu(diagonal=1).abs().max()) == 0.0  # causal: no weight on later tokens


def test_a_sink_takes_its_share():
    cfg = preset("tiny-w4s4")
    layers = tuple(s if s == "full" else dataclasses.replace(s, sink=True) for s in cfg.layers)
    model = HookedCompressedTransformer(cfg.replace(layers=layers), seed=0).eval()
    tokens = torch.randint(0, cfg.vocab_size, (1, 24), generator=torch.Generator().manual_seed(0))
    _, cache = model.run_with_cache(tokens)
    p = pattern_by_token(model, tokens, 1)
    torch.testing.assert_close(p.sum(-1), cache["blocks.1.attn.hook_pattern"].sum(-1))  # what the pattern holds
    assert float(p.sum(-1).max()) < 1.0
    with pytest.raises(ValueError, match="layer=2 is invalid: allowed 0..1"):
        pattern_by_token(model, tokens, 2)
