"""SmolLM2-135M (a real pretrained model from the package registry) and training-free KV compression:
load, hooks, the wrapper's definitions, nnsight units, a short induction sweep and a knockout.
The model is loaded once per test session (~20 s); everything else runs on a few short prompts."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch

from phaseinterp.backends import Replace, SetGate, Unit, backend_for
from phaseinterp.families.compressed_hf.backend import CompressedHFBackend
from phaseinterp.backends.kv_compression import (ANCHORS, RULES, KVCompression, compress_attention, compressed_layers,
                                                 hook_cache, restore_attention)
from phaseinterp.backends.smollm2 import smollm2_dir
from phaseinterp.tasks.induction import induction_batch, induction_final_batch


@pytest.fixture(scope="session")
def smol():
    try:
        smollm2_dir()
    except ImportError as err:
        pytest.skip(str(err))
    from phaseinterp.backends.smollm2 import load_smollm2

    torch.set_num_threads(1)
    return load_smollm2()


@pytest.fixture
def model(smol):
    yield smol[0]
    restore_attention(smol[0])  # every test starts and ends uncompressed


@pytest.fixture(scope="module")
def tokens():
    return induction_batch(2, 24, 4, seed=7).tokens[::23]  # the two prompts, [2, 49]


def logits(model, tokens):
    with torch.no_grad():
        return model(input_ids=tokens, use_cache=False).logits


def test_loads_the_pretrained_model_offline(smol):
    model, tokenizer = smol
    c = model.config
    assert (c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads, c.head_dim) == (30, 9, 3, 64)
    ids = tokenizer("The capital of France is", return_tensors="pt").input_ids
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=2, do_sample=False)
    assert tokenizer.decode(out[0, ids.shape[1]:]).strip().startswith("Paris")


def test_missing_extra_names_the_install_command(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "gguf" else real(name, *a))
    with pytest.raises(ImportError, match=r"\['gguf'\].*pip install 'phaseinterp\[smollm2\]'"):
        smollm2_dir()


@pytest.mark.parametrize("bad, match", [(dict(window=4, stride=8), "stride=8 is out of range"),
                                        (dict(window=4, stride=4, rule="max"), "rule='max' is invalid"),
                                        (dict(window=4, stride=4, anchor="middle"), "anchor='middle' is invalid"),
                                        (dict(window=4, stride=4, rule="evict", offset=4), r"offset=4 is invalid: allowed None, or 0..3"),
                                        (dict(window=0, stride=1), "window=0 is invalid")])
def test_bad_compression_settings_name_the_value(bad, match):
    with pytest.raises(ValueError, match=match):
        KVCompression(**bad)


def test_w1_s1_equals_the_uncompressed_model(model, tokens):
    tokens = tokens[:1]
    ref = logits(model, tokens)
    for rule in RULES:
        for anchor in ANCHORS:
            compress_attention(model, KVCompression(1, 1, rule, anchor, local=0))
            assert torch.allclose(logits(model, tokens), ref, atol=2e-4, rtol=0), (rule, anchor)
    compress_attention(model, KVCompression(4, 4, "mean", local=0))
    changed = logits(model, tokens)
    assert changed.isfinite().all() and (changed - ref).abs().max() > 1.0  # compression does change the model
    restore_attention(model)
    assert torch.equal(logits(model, tokens), ref) and not compressed_layers(model)


def test_hooks_show_the_rules_and_the_visibility_rule(model, tokens):
    W, layer = 4, 5
    layer_input = {}
    compress_attention(model, KVCompression(W, W, "score", "first", local=3, layers=(layer,)))
    handle = compressed_layers(model)[layer].register_forward_pre_hook(
        lambda mod, args, kwargs: layer_input.update(h=kwargs["hidden_states"]), with_kwargs=True)
    try:
        _, cache = hook_cache(model, tokens)
    finally:
        handle.remove()
    T, n = tokens.shape[1], (tokens.shape[1] - W) // W + 1
    pre = f"blocks.{layer}.attn."
    assert cache[pre + "compress_k.hook_gate"].shape == (2, n, W, 3)
    assert cache[pre + "compress_k.hook_out"].shape == cache[pre + "hook_rot_entries"].shape == (2, n, 3, 64)
    pattern = cache[pre + "hook_pattern"]
    assert pattern.shape == (2, 9, T, n + 3) and torch.allclose(pattern.sum(-1), torch.ones(2, 9, T), atol=1e-5)
    ends = torch.arange(n) * W + W - 1
    assert (pattern[:, :, :, :n][:, :, torch.arange(T)[:, None] < ends[None]] == 0).all()  # incomplete windows unseen
    # score rule, recomputed from the layer's own projections: the window's last query's attention
    attn = compressed_layers(model)[layer]
    h = layer_input["h"]
    pos = torch.arange(T)
    cos, sin = model.model.rotary_emb(h, pos[None])
    rot = lambda x: x * cos[:, :, None] + torch.cat([-x[..., 32:], x[..., :32]], -1) * sin[:, :, None]  # noqa: E731
    with torch.no_grad():
        q = rot(attn.q_proj(h).view(2, T, 9, 64))
        k = rot(attn.k_proj(h).view(2, T, 3, 64))
    j = 2
    window = torch.arange(j * W, j * W + W)
    scores = torch.einsum("bhd,bwhd->bhw", q[:, window[-1]], k[:, window].repeat_interleave(3, 2)) / 8
    want = scores.softmax(-1).view(2, 3, 3, W).mean(2)  # [batch, kv_head, offset]
    assert torch.allclose(cache[pre + "compress_k.hook_gate"][:, j].transpose(1, 2), want, atol=1e-5)
    with pytest.raises(ValueError, match="closest"):
        hook_cache(model, tokens, [pre + "compress_k.hook_gates"])


def test_mean_and_evict_weights_and_causality(model, tokens):
    compress_attention(model, KVCompression(4, 4, "evict", offset=1, layers=(2,)))
    _, cache = hook_cache(model, tokens, lambda name: name.endswith("hook_gate"))
    assert (cache["blocks.2.attn.compress_v.hook_gate"][..., 1, :] == 1).all()
    assert cache["blocks.2.attn.compress_v.hook_gate"].sum() == cache["blocks.2.attn.compress_v.hook_gate"][..., 1, :].sum()
    compress_attention(model, KVCompression(4, 4, "mean", "centre", layers=(2, 3)))
    edited = tokens.clone()
    edited[:, 30] = 5000
    a, b = logits(model, tokens), logits(model, edited)
    assert torch.allclose(a[:, :30], b[:, :30], atol=1e-5) and (a[:, 30:] - b[:, 30:]).abs().max() > 1e-2


def test_nnsight_backend_units_gates_and_entries(model, tokens):
    compress_attention(model, KVCompression(4, 4, "score", "post", layers=(3, 7)))
    backend = backend_for(model)
    assert isinstance(backend, CompressedHFBackend)
    assert [u.name for u in backend.units("gate")] == ["L3.G0", "L3.G1", "L7.G0", "L7.G1"]
    assert backend.cfg.layer_strides[3] == 4 and backend.cfg.layer_strides[0] is None
    _, cache = hook_cache(model, tokens)
    gate = backend.gate_weights(tokens, Unit("gate", 7, 1))
    assert torch.allclose(gate[..., 0], cache["blocks.7.attn.compress_v.hook_gate"])
    assert torch.allclose(backend.entries(tokens, Unit("gate", 3, 0)), cache["blocks.3.attn.compress_k.hook_out"])
    with backend.intervene(*(SetGate(Unit("gate", l, b), "uniform") for l in (3, 7) for b in (0, 1))):
        uniform = backend(tokens)
    compress_attention(model, KVCompression(4, 4, "mean", "post", layers=(3, 7)))
    assert torch.allclose(uniform, logits(model, tokens), atol=1e-4)  # uniform score weights = the mean rule
    with pytest.raises(ValueError, match="layer 0 has no compressor"):
        backend.gate_weights(tokens, Unit("gate", 0, 0))


def test_induction_sweep_and_statistics(model):
    from phaseinterp.analysis.induction_sweep import induction_correct, sweep_row

    batch = induction_batch(2, 48, 8, seed=11)
    clean = induction_correct(model, batch)
    assert clean.float().mean() > 0.5  # the pretrained model copies
    spec = KVCompression(4, 4, "mean", "post", layers=(17, 18, 23))
    compressed = induction_correct(model, batch, spec)
    assert not compressed_layers(model)  # restored
    row = sweep_row(compressed, clean, batch, 4, spec, n_boot=200, n_perm=200)
    assert row.modulus == 8 and len(row.accuracy) == 8 and len(row.phase_accuracy) == 4
    assert row.delta_pp == pytest.approx(100 * (compressed.float().mean() - clean.float().mean()).item())
    assert row.delta_ci_pp[0] <= row.delta_pp <= row.delta_ci_pp[1]
    assert row.delta_pp < -30  # pooling the induction layers' keys loses most of the copying


def test_knockout_map_on_a_compressed_layer(model):
    from phaseinterp.interventions import knockout_map

    compress_attention(model, KVCompression(4, 4, "evict", offset=0, layers=(18,)))
    batch = induction_final_batch(1, 40, 8, min_distance=12, seed=3)
    calib = induction_final_batch(1, 40, 8, min_distance=12, seed=4)
    backend = backend_for(model)
    kmap = knockout_map(backend, batch, calib, layers=[18], n_boot=100, max_rows=64)
    assert kmap.shape == (1, 3, 8) and np.isfinite(kmap.values).all()
    clean = backend.final_logits(batch.tokens, batch.query_pos).argmax(-1) == batch.answer
    assert np.array_equal(np.array(kmap.clean["correct"]), clean.numpy())
    with backend.intervene(Replace(Unit("layer", 18), 0.0)):
        knocked = backend.final_logits(batch.tokens, batch.query_pos)
    assert not torch.allclose(knocked, backend.final_logits(batch.tokens, batch.query_pos))


def test_the_smollm2_study_runs_in_quick_mode(smol, tmp_path, monkeypatch):
    # experiments/smollm2 end to end on the session's model (loading it again costs ~20 s)
    import json

    import phaseinterp.backends.smollm2 as smollm2
    from experiments.smollm2.run import main

    monkeypatch.setattr(smollm2, "load_smollm2", lambda: smol)
    main(["--out", str(tmp_path), "--prompts", "2", "--length", "32", "--windows", "4", "--screen-prompts", "1",
          "--ko-per-residue", "1", "--ko-len", "32", "--ko-distance", "12", "--ko-layers", "0", "--n-boot", "20",
          "--n-perm", "20", "--no-all-layers-control", "--anchors", "post", "--resume"])
    result = json.loads((tmp_path / "smollm2.json").read_text())
    # journaled as it went (nothing to take back on a first run), and the journal is gone once the result is whole
    assert result["resumed"]["minibatches"] == 0 and result["resumed"]["of"] > 30
    assert result["knockout"]["map"]["meta"]["resumed"]["chunks"] == 0
    assert not (tmp_path / ".smollm2-journal").exists()
    grids = {r["grid"] for r in result["rows"]}
    assert "baseline" in grids and f"layer {result['screen']['worst_layer']}" in grids
    assert {r["spec"]["anchor"] for r in result["rows"] if r["spec"]} == {"post"}
    assert len(result["screen"]["drop_pp"]) == 30 and result["knockout"]["settings"]["ko_layers"] == [0]
    assert "SmolLM2" in (tmp_path / "smollm2.md").read_text()
