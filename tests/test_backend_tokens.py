"""TransformerLens's tokenizer methods on every backend (`backends.tokens`), checked against
TransformerLens's own `TransformerBridge` over the same model and tokenizer."""

import copy

import numpy as np
import pytest
import torch
from transformer_lens.model_bridge.sources._bridge_builder import build_bridge_from_module
from transformers import AutoTokenizer

from phaseinterp import HookedCompressedTransformer, preset
from phaseinterp.backends.tiny import tiny_qwen3, word_tokenizer
from phaseinterp.families.resolve import backend_for

TEXTS = ["bac bad baf", "bag"]


@pytest.fixture(scope="module")
def bridged(tmp_path_factory):
    """(raw tiny Qwen3, a bridge over a copy with a saved word tokenizer, the bridge's backend)."""
    raw = tiny_qwen3(seed=0)
    folder = tmp_path_factory.mktemp("tokenizer")
    word_tokenizer(raw.config.vocab_size).save_pretrained(folder)  # TransformerLens reloads it by its path
    bridge = build_bridge_from_module(copy.deepcopy(raw), "Qwen3ForCausalLM", hf_config=raw.config,
                                      tokenizer=AutoTokenizer.from_pretrained(folder))
    return raw, bridge, backend_for(bridge)


@pytest.mark.parametrize("kwargs", [{}, {"prepend_bos": True}, {"prepend_bos": False}, {"padding_side": "left"},
                                    {"prepend_bos": True, "padding_side": "left"}])
def test_to_tokens_equals_transformer_lens(bridged, kwargs):
    _, bridge, backend = bridged
    assert backend.tokenizer is bridge.tokenizer
    ours, theirs = backend.to_tokens(TEXTS, **kwargs), bridge.to_tokens(TEXTS, **kwargs)
    assert ours.tolist() == theirs.tolist()
    assert len(set(ours.flatten().tolist())) > 2  # real words, not unknown tokens and padding
    assert backend.to_tokens(TEXTS[0], **kwargs).tolist() == bridge.to_tokens(TEXTS[0], **kwargs).tolist()


def test_to_str_tokens_and_to_string_equal_transformer_lens(bridged):
    _, bridge, backend = bridged
    ids = bridge.to_tokens(TEXTS, prepend_bos=True)
    for x in ("bac bad", ids[0], ids[:1], ids[0].numpy(), ["bac", "bad bag"]):
        assert backend.to_str_tokens(x) == bridge.to_str_tokens(x)
    assert backend.to_str_tokens("bac bad", prepend_bos=True) == ["<s>", "bac", "bad"]
    assert backend.to_string(ids) == bridge.to_string(ids) and backend.to_string(ids[0]) == bridge.to_string(ids[0])
    assert backend.to_str_tokens(ids[0].tolist()) == bridge.to_str_tokens(ids[0])  # a list of ids: one row
    with pytest.raises(ValueError, match=r"tokens of shape \(2, 4\) are invalid"):
        backend.to_str_tokens(ids)


def test_a_raw_model_needs_a_tokenizer_and_then_reads_text(bridged):
    raw, bridge, _ = bridged
    backend = backend_for(raw)
    with pytest.raises(ValueError, match="HFCausalLMBackend.tokenizer is None"):
        backend.to_tokens("bac")
    backend.tokenizer = bridge.tokenizer
    assert backend.to_tokens(TEXTS, prepend_bos=False).tolist() == bridge.to_tokens(TEXTS, prepend_bos=False).tolist()
    with pytest.raises(ValueError, match="padding_side='middle' is invalid"):
        backend.to_tokens("bac", padding_side="middle")


def test_our_model_s_backend_names_tokens_as_the_model_does():
    model = HookedCompressedTransformer(preset("tiny-w4s4"), seed=0)
    backend = backend_for(model)
    ids = model.to_tokens("K5 V130 FILL")
    assert backend.to_tokens("K5 V130 FILL").tolist() == ids.tolist()
    assert backend.to_str_tokens(ids[0]) == model.to_str_tokens(ids[0]) == ["BOS", "K5", "V130", "FILL"]
    assert backend.to_string(np.asarray(ids)) == model.to_string(ids)
    assert torch.equal(backend.to_tokens(["K5"], prepend_bos=False), model.to_tokens(["K5"], prepend_bos=False))


def test_an_nnsight_wrapper_passes_its_tokenizer(bridged):
    import beartype  # noqa: F401  (nnsight 0.8 needs it imported first)
    from nnsight.modeling.transformers import TransformersModel

    raw, bridge, _ = bridged
    lm = TransformersModel(copy.deepcopy(raw), tokenizer=bridge.tokenizer)
    backend = backend_for(lm)
    assert backend.tokenizer is lm.tokenizer
    assert backend.to_str_tokens("bac bad", prepend_bos=False) == ["bac", "bad"]
