"""Sliding-window layers by blocks of queries (`backends.windowed_attention`): equal to HF's `sdpa` and `eager`
attention, padded rows and decoding included, and the blocks are what runs on sliding layers."""

import pytest
import torch
from transformers import MistralConfig, MistralForCausalLM
from transformers.integrations import sdpa_attention

from phaseinterp.backends.windowed_attention import set_attention, windowed_sdpa
from phaseinterp.families.gemma3 import tiny_gemma3


def noisy(model):
    with torch.no_grad():
        for p in model.parameters():  # larger weights: attention far from uniform
            p.normal_(std=0.3)
    return model.eval()


def models():
    torch.manual_seed(0)
    mistral = MistralForCausalLM(MistralConfig(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                               num_attention_heads=4, num_key_value_heads=2, sliding_window=8))
    return {"gemma3": noisy(tiny_gemma3(seed=0, sliding_window=8)), "mistral": noisy(mistral)}


def logits(model, impl, tokens, mask=None):
    set_attention(model, impl)
    with torch.no_grad():
        return model(input_ids=tokens, attention_mask=mask).logits


@pytest.fixture
def query_lengths(monkeypatch):
    """The query length of every `sdpa` call."""
    seen = []
    original = sdpa_attention.sdpa_attention_forward

    def spy(module, query, *args, **kwargs):
        seen.append(query.shape[2])
        return original(module, query, *args, **kwargs)

    monkeypatch.setattr(sdpa_attention, "sdpa_attention_forward", spy)
    return seen


@pytest.mark.parametrize("name", ["gemma3", "mistral"])
def test_blocks_of_queries_equal_sdpa_and_eager(name, query_lengths):
    model = models()[name]
    tokens = torch.randint(3, 256, (2, 70), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(2, 70, dtype=torch.long)
    mask[1, :5] = 0  # a left-padded row
    sdpa, eager = logits(model, "sdpa", tokens), logits(model, "eager", tokens)
    query_lengths.clear()
    got = logits(model, "windowed", tokens)
    torch.testing.assert_close(got, sdpa, atol=2e-5, rtol=2e-5)
    torch.testing.assert_close(got, eager, atol=2e-5, rtol=2e-5)
    n_sliding = sum(t == "sliding_attention" for t in model.config.layer_types) if name == "gemma3" else 2
    assert sorted(query_lengths) == sorted([8] * 8 * n_sliding + [6] * n_sliding + [70] * (len(model.model.layers) - n_sliding))
    padded_ref = logits(model, "sdpa", tokens, mask)
    torch.testing.assert_close(logits(model, "windowed", tokens, mask)[:, 5:], padded_ref[:, 5:], atol=2e-5, rtol=2e-5)


def test_decoding_with_a_cache_equals_sdpa():
    model = models()["gemma3"]
    tokens = torch.randint(3, 256, (1, 40), generator=torch.Generator().manual_seed(2))
    out = {}
    for impl in ("sdpa", "windowed"):
        set_attention(model, impl)
        with torch.no_grad():
            out[impl] = model.generate(tokens, max_new_tokens=6, do_sample=False, pad_token_id=0)
    assert torch.equal(out["sdpa"], out["windowed"])


def test_a_mask_reaching_outside_the_band_runs_sdpa_whole(query_lengths):
    model = models()["gemma3"]
    attn = model.model.layers[0].self_attn
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, n, 40, 16, generator=g) for n in (4, 2, 2))
    everything = torch.ones(1, 1, 40, 40, dtype=torch.bool)  # bidirectional: keys beyond each block's band
    got, _ = windowed_sdpa(attn, q, k, v, everything, scaling=0.25, sliding_window=8)
    assert query_lengths == [40]
    want, _ = sdpa_attention.sdpa_attention_forward(attn, q, k, v, everything, scaling=0.25)
    torch.testing.assert_close(got, want)


def test_gemma3_270m_names_its_attention_choices():
    from phaseinterp.families.gemma3.load import load_gemma3_270m

    with pytest.raises(ValueError, match=r"attention='flash' is invalid: allowed one of \['eager', 'sdpa', 'windowed'\]"):
        load_gemma3_270m(attention="flash")
