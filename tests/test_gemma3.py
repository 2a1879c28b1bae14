"""Training-free chunked compression of Gemma 3 (`families.gemma3`) on a tiny random Gemma 3 (six
layers: sliding 0, 1, 3, 4 with an 8-token window, global 2 and 5): W = S = 1, local = 0 is the
uncompressed model at every layer type; hooks, edits, a phase sweep and a knockout map run through
a compressed model; the sliding window holds for what a compressed sliding layer reads."""

import warnings

import numpy as np
import pytest
import torch

from phaseinterp import families
from phaseinterp.backends import SetGate, Unit, backend_for
from phaseinterp.backends.kv_compression import KVCompression, compressed_layers, hook_cache, restore_attention
from phaseinterp.families.compressed_hf.backend import CompressedHFBackend
from phaseinterp.families.gemma3 import tiny_gemma3
from phaseinterp.families.gemma3.attention import CompressedGemma3Attention, compress_gemma3, global_layers
from tests.helpers import assert_final_path_equals_hooks


@pytest.fixture(scope="module")
def gemma():
    torch.set_num_threads(1)
    model = tiny_gemma3(seed=0)
    with torch.no_grad():
        for name, p in model.named_parameters():  # larger weights: every head moves the logits
            if "norm" not in name:
                p.normal_(std=0.2)
    return model


@pytest.fixture
def model(gemma):
    yield gemma
    restore_attention(gemma)


@pytest.fixture(scope="module")
def tokens():
    return torch.randint(3, 256, (2, 37), generator=torch.Generator().manual_seed(0))


def logits(model, tokens):
    with torch.no_grad():
        return model(input_ids=tokens, use_cache=False).logits


def test_tiny_config_mixes_sliding_and_global_layers(model):
    assert global_layers(model) == (2, 5) and model.config.sliding_window == 8
    assert families.family_of_model(model).name != "gemma3-compressed"  # plain: the generic HF family


@pytest.mark.parametrize("layers", ["global", "all"])
@pytest.mark.parametrize("anchor", ["post", "centre"])
def test_w1_s1_equals_the_uncompressed_model(model, tokens, layers, anchor):
    ref = logits(model, tokens)
    compress_gemma3(model, KVCompression(1, 1, "mean", anchor, local=0), layers=layers)
    assert sorted(compressed_layers(model)) == ([2, 5] if layers == "global" else list(range(6)))
    out = logits(model, tokens)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    # a sink and a local window count some keys twice: no longer the original (the check can fail)
    compress_gemma3(model, KVCompression(1, 1, local=3, sink=2), layers=layers)
    assert (logits(model, tokens) - ref).abs().max() > 1e-3


def test_sliding_layers_see_only_their_window(model, tokens):
    # compressing a sliding layer with a long local window: keys past the 8-token window stay hidden,
    # so local=8 and local=20 give the same pattern on the window's slots and zero beyond it
    compress_gemma3(model, KVCompression(4, 4, local=20, sink=2, layers=(0,)))
    _, cache = hook_cache(model, tokens, ["blocks.0.attn.hook_pattern"])
    p = cache["blocks.0.attn.hook_pattern"]  # [b, head, pos, entries + sink + local]
    n = KVCompression(4, 4).n_entries(37)
    t = 30
    local = p[0, :, t, n + 2:]  # slot i = position t - 19 + i
    assert (local[:, :12] == 0).all() and (local[:, 12:] > 0).all()  # positions < t - 7 are hidden
    assert (p[0, :, t, n:n + 2] == 0).all()  # the sink (positions 0, 1) is outside the window
    entries = p[0, :, t, :n]  # entry j covers 4j .. 4j + 3: visible iff 4j >= t - 7 and 4j + 3 <= t
    want = torch.tensor([4 * j >= t - 7 and 4 * j + 3 <= t for j in range(n)])
    assert ((entries > 0) == want).all() and want.sum() == 1


def test_hooks_fire_with_documented_shapes_and_an_edit_changes_logits(model, tokens):
    compress_gemma3(model, KVCompression(4, 4, "score", "post", local=2))
    pre = "blocks.5.attn."
    ref, cache = hook_cache(model, tokens)
    n = 9  # complete windows of 37 tokens
    assert cache[pre + "compress_k.hook_gate"].shape == (2, n, 4, 2)
    torch.testing.assert_close(cache[pre + "compress_k.hook_gate"].sum(2), torch.ones(2, n, 2))
    assert cache[pre + "compress_v.hook_out"].shape == (2, n, 2, 16)
    assert cache[pre + "hook_pattern"].shape == (2, 4, 37, n + 2)
    assert cache[pre + "hook_z"].shape == (2, 37, 4, 16)
    # hook_k holds the normed keys before RoPE: k_norm(k_proj(x)) of the layer's input
    attn = model.model.layers[5].self_attn
    assert isinstance(attn, CompressedGemma3Attention) and attn.k_norm is attn.original.k_norm
    backend = backend_for(model)
    assert isinstance(backend, CompressedHFBackend)
    assert families.family_of_model(model).name == "gemma3-compressed"
    assert [u.name for u in backend.units("gate")] == ["L2.G0", "L2.G1", "L5.G0", "L5.G1"]
    with backend.intervene(SetGate(Unit("gate", 5, 0), "uniform")):
        edited = backend(tokens)
    assert (edited - ref).abs().max() > 1e-3
    with backend.intervene(*(SetGate(Unit("gate", l, b), "uniform") for l in (2, 5) for b in (0, 1))):
        uniform = backend(tokens)
    compress_gemma3(model, KVCompression(4, 4, "mean", "post", local=2))
    torch.testing.assert_close(uniform, logits(model, tokens), atol=1e-5, rtol=1e-5)  # uniform score = mean

def test_bad_layers_choice_and_wrong_model_name_the_value(model):
    with pytest.raises(ValueError, match="layers='local' is invalid"):
        compress_gemma3(model, KVCompression(4, 4), layers="local")
    from phaseinterp.backends.tiny import tiny_qwen3

    with pytest.raises(ValueError, match="allowed a Gemma 3 causal LM"):
        compress_gemma3(tiny_qwen3(seed=0), KVCompression(4, 4))


def test_phase_sweep_and_knockout_map_run_through_a_compressed_gemma3(model):
    from phaseinterp.interventions import knockout_map
    from phaseinterp.measure.sweep import phase_sweep
    from phaseinterp.tasks import RecordLookup

    task = RecordLookup(vocab_size=256, n_records=4, n_demos=1)
    batch, calib = task.sample(2, 4, seed=0), task.sample(2, 4, seed=0, split="calibration")
    compress_gemma3(model, KVCompression(4, 4, "score", "centre", local=3), layers="all")
    backend = backend_for(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # random weights: accuracies near 0
        curve = phase_sweep(backend, batch, progress=False, n_boot=50, n_perm=50)
        kmap = knockout_map(backend, batch, calib, layers=[2, 3], n_boot=50, progress=False)
    final = backend.final_logits(batch.tokens, batch.query_pos)
    correct = (final.argmax(-1) == batch.answer).numpy()
    assert len(curve.accuracy) == 4 and np.isclose(np.mean(curve.accuracy), correct.mean())
    assert kmap.shape[:2] == (2, 2) and np.isfinite(kmap.values).all()
    assert np.array_equal(np.array(kmap.clean["correct"]), correct)


@pytest.mark.parametrize("layers,spec", [("global", KVCompression(4, 4, "mean", local=4)),
                                         ("all", KVCompression(4, 2, "score", "centre", local=3, sink=2)),
                                         ("all", KVCompression(3, 3, "evict", "last", offset=2, local=10, sink=1)),
                                         ("plain", None)])
def test_final_position_path_equals_full_forwards(model, layers, spec):
    # rows end at positions 22..26, past the 8-token sliding window: the windows' cuts are exercised
    import dataclasses

    from phaseinterp.backends.kv_cache import kv_cache_fallback
    from phaseinterp.interventions import head_units
    from phaseinterp.tasks import RecordLookup

    task = RecordLookup(vocab_size=256, n_records=6, n_demos=1)
    batch = task.sample(2, 4, seed=0)
    T = batch.tokens.shape[1]
    assert T > 3 * model.config.sliding_window
    batch = dataclasses.replace(batch, query_pos=T - 1 - torch.arange(len(batch)) % 5)
    calib = task.sample(2, 4, seed=0, split="calibration")
    if spec is not None:
        compress_gemma3(model, spec, layers=layers)
    backend = backend_for(model)
    assert backend.incremental_ok() and kv_cache_fallback(backend) is None
    units = head_units(backend.cfg, "kv_head") + head_units(backend.cfg, "layer")
    assert_final_path_equals_hooks(backend, batch, units, calib)


def test_qk_norm_is_applied_for_qwen3_too():
    # Qwen3 has QK-norm like Gemma 3: the wrapper reads it from the layer (without it W = S = 1 differs)
    from phaseinterp.backends.kv_compression import compress_attention
    from phaseinterp.backends.tiny import tiny_qwen3

    qwen = tiny_qwen3(seed=0).eval()
    tokens = torch.randint(0, 100, (2, 30), generator=torch.Generator().manual_seed(1))
    ref = logits(qwen, tokens)
    compress_attention(qwen, KVCompression(1, 1, local=0))
    torch.testing.assert_close(logits(qwen, tokens), ref, atol=1e-5, rtol=1e-5)
    for attn in compressed_layers(qwen).values():
        attn.q_norm = attn.k_norm = None
    assert (logits(qwen, tokens) - ref).abs().max() > 1e-3
