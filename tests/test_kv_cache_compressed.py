"""The final-position path through training-free compressed layers (`backends.compressed_final`):
equal to one full forward per unit for every rule, anchor, window geometry, sink and local size,
rows whose query positions differ (windows closing exactly at t and not), and compressed and plain
layers mixed; and the batched compressed layer equal to a dense reference."""

import dataclasses
import itertools
import warnings

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from phaseinterp.backends import KVCompression, compress_attention
from phaseinterp.backends.compressed_final import CompressedPrefix
from phaseinterp.families.compressed_hf.backend import CompressedHFBackend
from phaseinterp.backends.kv_cache import kv_cache_fallback
from phaseinterp.backends.kv_compression import compressed_layers, restore_attention
from phaseinterp.interventions import Pairing, activation_patching, head_units, knockout_map
from phaseinterp.tasks import RecordLookup
from tests.helpers import assert_final_path_equals_hooks

SIZES = dict(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=256)


def tiny_llama():
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**SIZES))
    with torch.no_grad():
        for p in model.parameters():  # larger weights: every head moves the logits
            p.normal_(std=0.3)
    return model.eval()


def staggered(batch, spread: int = 5):
    """Query positions T-1 .. T-spread by row: some rows' t closes a window, some do not."""
    T = batch.tokens.shape[1]
    return dataclasses.replace(batch, query_pos=T - 1 - torch.arange(len(batch)) % spread)


@pytest.fixture(scope="module")
def task():
    return RecordLookup(vocab_size=128, n_records=6, n_demos=1)


SPECS = [KVCompression(4, 4, "mean", local=4), KVCompression(4, 2, "score", "centre", local=3, sink=2),
         KVCompression(3, 3, "evict", "last", offset=2, local=1), KVCompression(5, 3, "score", "first", local=0, sink=1),
         KVCompression(4, 4, "evict", "post", offset=0, local=0), KVCompression(8, 8, "mean", local=16, layers=(0, 2))]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name + (f" layers{list(s.layers)}" if s.layers else ""))
def test_compressed_knockout_through_the_cache_equals_full_forwards(spec, task):
    model = compress_attention(tiny_llama(), spec)
    backend = CompressedHFBackend(model)
    assert backend.incremental_ok() and kv_cache_fallback(backend) is None
    batch = staggered(task.sample(2, 4, seed=0))
    calib = task.sample(2, 4, seed=0, split="calibration")
    units = head_units(backend.cfg, "kv_head") + head_units(backend.cfg, "layer")
    assert_final_path_equals_hooks(backend, batch, units, calib)
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())


def test_compressed_maps_and_patching_take_the_cache_path(task):
    model = compress_attention(tiny_llama(), KVCompression(4, 4, "score", "centre", local=3))
    batch, calib = task.sample(2, 4, seed=0), task.sample(2, 4, seed=0, split="calibration")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # random weights: accuracies near 0
        fast = knockout_map(model, batch, calib, n_boot=50, progress=False)
        slow = knockout_map(model, batch, calib, n_boot=50, method="hooks", progress=False)
    assert fast.meta["intervention"]["path"] == "kv_cache" and "fallback" not in slow.meta["intervention"]
    np.testing.assert_array_equal(fast.extras["acc_knockout"], slow.extras["acc_knockout"])
    pair = Pairing.custom(staggered(batch), staggered(task.sample(2, 4, seed=1)))
    kw = dict(unit="z", level="kv_head", rel_min=0, change="normalized", progress=False)
    p_fast = activation_patching(model, pair, **kw)
    p_slow = activation_patching(model, pair, method="hooks", **kw)
    assert p_fast.meta["intervention"]["path"] == "kv_cache"
    assert np.isfinite(p_fast.values).all() and np.abs(p_fast.values).max() > 0.05
    np.testing.assert_allclose(p_fast.values, p_slow.values, atol=1e-4, rtol=1e-3)


def test_the_prefix_plan_reads_what_position_t_sees():
    spec = KVCompression(4, 2, local=3, sink=2)  # windows end at 3, 5, 7, ...
    plan = CompressedPrefix.plan(spec, 7)  # entries ending at 3, 5 seen; the one ending at 7 is rebuilt
    assert (plan["n_old"], plan["new"]) == (2, 2)
    assert plan["positions"].tolist() == [0, 1, 5, 6, 4, 5, 6]  # sink 0, 1; local 5, 6; window 4..6
    plan = CompressedPrefix.plan(spec, 6)
    assert (plan["n_old"], plan["new"], plan["n_exact"]) == (2, None, 4)


def dense_reference(attn, h, cos, sin):
    """The compressed layer written out position by position (the definition in kv_compression's
    docstring): pooled entries visible once complete, sink and local keys, one softmax."""
    spec, d, G = attn.spec, attn.head_dim, attn.group
    b, T, _ = h.shape
    rot = lambda x, c, s: x * c[:, :, None] + torch.cat([-x[..., d // 2:], x[..., :d // 2]], -1) * s[:, :, None]  # noqa: E731
    q, k, v = (proj(h).view(b, T, -1, d) for proj in (attn.q_proj, attn.k_proj, attn.v_proj))
    q_rot, k_rot = rot(q, cos, sin), rot(k, cos, sin)
    K = k.shape[2]
    z = torch.zeros(b, T, K * G, d)
    ent_k, ent_v, ends = [], [], []
    for j in range(spec.n_entries(T)):
        w = torch.arange(j * spec.stride, j * spec.stride + spec.window)
        if spec.rule == "mean":
            a = torch.full((b, spec.window, K), 1 / spec.window)
        elif spec.rule == "evict":
            a = torch.zeros(b, spec.window, K)
            a[:, spec.kept_offset] = 1
        else:
            s = torch.einsum("bkgd,bwkd->bkgw", q_rot[:, w[-1]].view(b, K, G, d), k_rot[:, w]) * attn.scaling
            a = s.softmax(-1).mean(2).transpose(1, 2)
        src = k_rot if spec.anchor == "post" else k
        ek = torch.einsum("bwk,bwkd->bkd", a, src[:, w])
        if spec.anchor != "post":
            c, s_ = attn.rotary(ek, (w[:1].float() + attn.anchor_shift)[None])
            ek = rot(ek[:, None], c, s_)[:, 0]
        ent_k.append(ek)
        ent_v.append(torch.einsum("bwk,bwkd->bkd", a, v[:, w]))
        ends.append(int(w[-1]))
    for t in range(T):
        keys = [ent_k[j] for j in range(len(ends)) if ends[j] <= t]
        vals = [ent_v[j] for j in range(len(ends)) if ends[j] <= t]
        exact = [p for p in range(spec.sink) if p < t - spec.local + 1] + list(range(max(t - spec.local + 1, 0), t + 1))
        keys += [k_rot[:, p] for p in exact]
        vals += [v[:, p] for p in exact]
        if not keys:
            continue
        ks, vs = torch.stack(keys, 1), torch.stack(vals, 1)  # [b, n, K, d]
        s = torch.einsum("bkgd,bnkd->bkgn", q_rot[:, t].view(b, K, G, d), ks) * attn.scaling
        z[:, t] = torch.einsum("bkgn,bnkd->bkgd", s.softmax(-1), vs).reshape(b, K * G, d)
    return z


def test_the_batched_compressed_layer_equals_the_dense_definition():
    model = tiny_llama()
    h = torch.randn(2, 23, 64, generator=torch.Generator().manual_seed(0))
    cos, sin = model.model.rotary_emb(h, torch.arange(23)[None])
    worst = 0.0
    for (W, S), rule, anchor, L, sink in itertools.product([(1, 1), (4, 1), (4, 3), (6, 6)], ["mean", "score", "evict"],
                                                           ["post", "centre"], [0, 1, 5, 30], [0, 2]):
        compress_attention(model, KVCompression(W, S, rule, anchor, local=L, sink=sink, layers=(0,)))
        attn = compressed_layers(model)[0]
        got: dict = {}
        handle = attn.hook_z.register_forward_hook(lambda m, i, o, got=got: got.update(z=o))
        with torch.no_grad():
            attn(h, position_embeddings=(cos, sin))
            want = dense_reference(attn, h, cos, sin)
        handle.remove()
        worst = max(worst, float((got["z"] - want).abs().max()))
    restore_attention(model)
    assert worst < 1e-5


def test_decoding_from_a_cache_is_refused_but_a_prefill_is_not():
    model = compress_attention(tiny_llama(), KVCompression(4, 4, layers=(1,)))
    tokens = torch.randint(0, 128, (1, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        out = model(input_ids=tokens, use_cache=True)
        torch.testing.assert_close(out.logits, model(input_ids=tokens, use_cache=False).logits)
        with pytest.raises(ValueError, match="runs full sequences only"):
            model(input_ids=tokens[:, -1:], cache=out.past_key_values, use_cache=True)
