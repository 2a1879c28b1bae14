"""Final-position knockout and patching on HF decoders through the KV cache (`backends.kv_cache`):
equal to one full forward per unit, and the models that cannot take it fall back (and say why)."""

import dataclasses
import warnings

import numpy as np
import pytest
import torch
from transformers import (GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM,
                          Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM)

from phaseinterp.backends import HFCausalLMBackend, Replace, Unit
from phaseinterp.backends.kv_cache import kv_cache_fallback
from phaseinterp.interventions import Pairing, activation_patching, head_units, knockout_logits, knockout_map
from phaseinterp.tasks import RecordLookup
from tests.helpers import assert_final_path_equals_hooks

SIZES = dict(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=256)


def _noisy(model):
    with torch.no_grad():
        for p in model.parameters():  # larger weights: every head moves the logits
            p.normal_(std=0.3)
    return model.eval()


def tiny(kind: str):
    torch.manual_seed(0)
    if kind == "llama":
        return _noisy(LlamaForCausalLM(LlamaConfig(**SIZES)))
    if kind == "qwen2":  # biased q/k/v projections
        return _noisy(Qwen2ForCausalLM(Qwen2Config(**SIZES)))
    if kind == "mistral":
        return _noisy(MistralForCausalLM(MistralConfig(**SIZES, sliding_window=None)))
    return _noisy(Qwen3ForCausalLM(Qwen3Config(**SIZES, head_dim=16)))


def no_torch_hooks(module: torch.nn.Module) -> bool:
    return all(not m._forward_hooks and not m._forward_pre_hooks for m in module.modules())


def staggered(batch):
    """The batch with query positions T-1, T-2, T-3 by row: rows of one forward whose final
    positions differ (the edit and the score move with them)."""
    T = batch.tokens.shape[1]
    return dataclasses.replace(batch, query_pos=T - 1 - torch.arange(len(batch)) % 3)


@pytest.fixture(scope="module")
def task():
    return RecordLookup(vocab_size=128, n_records=6, n_demos=1)


@pytest.mark.parametrize("kind", ["llama", "qwen3", "qwen2", "mistral"])
def test_kv_cache_knockout_equals_full_forwards(kind, task):
    model = tiny(kind)
    backend = HFCausalLMBackend(model)
    assert backend.incremental_ok() and kv_cache_fallback(backend) is None
    batch = staggered(task.sample(2, 4, seed=0))
    calib = task.sample(2, 4, seed=0, split="calibration")
    units = head_units(backend.cfg, "kv_head") + head_units(backend.cfg, "head") + head_units(backend.cfg, "layer")
    for replacement in ("mean", "resample", "zero"):
        c1, fast, m1 = knockout_logits(backend, batch, units, calib, replacement=replacement, max_rows=20, progress=False)
        c2, slow, m2 = knockout_logits(backend, batch, units, calib, replacement=replacement, method="hooks",
                                       progress=False)
        assert (m1, m2) == ("incremental", "hooks")
        torch.testing.assert_close(c1, c2, atol=1e-5, rtol=1e-5)
        assert (slow - c2[None]).abs().amax((1, 2)).min() > 1e-2  # every unit's edit moves the logits
        torch.testing.assert_close(fast, slow, atol=1e-4, rtol=1e-4)
    # calibration="self": the base run's own head outputs, no capture forward
    _, fast, _ = knockout_logits(backend, batch, units[:4], "self", progress=False)
    _, slow, _ = knockout_logits(backend, batch, units[:4], "self", method="hooks", progress=False)
    torch.testing.assert_close(fast, slow, atol=1e-4, rtol=1e-4)
    # one unit by hand: Replace at each row's query position
    run = backend.final_position_run(batch.tokens, batch.query_pos)
    value = torch.randn(len(batch), 2, 16, generator=torch.Generator().manual_seed(1))
    with backend.intervene(Replace(Unit("kv_head", 1, 1), value[:, None], positions=batch.query_pos)):
        assert not backend.incremental_ok()  # the path would ignore the active edit
        ref = backend.final_logits(batch.tokens, batch.query_pos)
    masks = torch.tensor([[False, False, True, True]])
    z = torch.zeros(1, len(batch), 4, 16)
    z[0, :, 2:] = value
    torch.testing.assert_close(run.run_z([1], masks, z)[0], ref, atol=1e-4, rtol=1e-4)
    assert no_torch_hooks(model)


@pytest.mark.parametrize("kind", ["llama", "qwen3"])
def test_kv_cache_maps_equal_full_forward_maps(kind, task):
    model = tiny(kind)
    batch, calib = task.sample(2, 4, seed=0), task.sample(2, 4, seed=0, split="calibration")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # random weights: accuracies near 0
        fast = knockout_map(model, batch, calib, n_boot=50, progress=False)
        slow = knockout_map(model, batch, calib, n_boot=50, method="hooks", progress=False)
    assert fast.meta["intervention"]["method"] == "incremental" and fast.meta["intervention"]["path"] == "kv_cache"
    assert slow.meta["intervention"]["path"] == "full_forward" and "fallback" not in slow.meta["intervention"]
    np.testing.assert_array_equal(fast.extras["acc_knockout"], slow.extras["acc_knockout"])
    # patching: clean head outputs into the corrupt run, rows at staggered final positions
    pair = Pairing.custom(staggered(batch), staggered(task.sample(2, 4, seed=1)))
    kw = dict(unit="z", level="kv_head", rel_min=0, change="normalized", progress=False)
    p_fast = activation_patching(model, pair, **kw)
    p_slow = activation_patching(model, pair, method="hooks", **kw)
    assert p_fast.meta["intervention"]["path"] == "kv_cache" and p_slow.meta["intervention"]["path"] == "full_forward"
    assert np.isfinite(p_fast.values).all() and np.abs(p_fast.values).max() > 0.05
    np.testing.assert_allclose(p_fast.values, p_slow.values, atol=1e-4, rtol=1e-3)
    assert no_torch_hooks(model)


def test_models_without_the_cache_path_fall_back_and_say_why(task):
    batch, calib = task.sample(1, 4, seed=0), task.sample(1, 4, seed=0, split="calibration")
    units = head_units(HFCausalLMBackend(tiny("llama")).cfg, "kv_head")[:2]
    sliding = _noisy(Qwen3ForCausalLM(Qwen3Config(**SIZES, head_dim=16, sliding_window=8, max_window_layers=1,
                                                  use_sliding_window=True)))
    gpt2 = _noisy(GPT2LMHeadModel(GPT2Config(vocab_size=128, n_embd=64, n_layer=2, n_head=4, n_positions=64)))
    cases = [(HFCausalLMBackend(sliding), "sliding-window attention"),
             (HFCausalLMBackend(gpt2), r"model_type 'gpt2' has no final-position KV-cache path: allowed \['llama'")]
    for backend, why in cases:
        assert not backend.incremental_ok()
        assert kv_cache_fallback(backend) is not None and backend.incremental_fallback() == kv_cache_fallback(backend)
        _, _, used = knockout_logits(backend, batch, units, calib, progress=False)
        assert used == "hooks"
        with pytest.raises(ValueError, match=why):
            knockout_logits(backend, batch, units, calib, method="incremental", progress=False)
        with pytest.raises(ValueError, match=why):
            backend.final_position_run(batch.tokens, batch.query_pos)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = knockout_map(cases[0][0], batch, calib, layers=[0], n_boot=20, progress=False)
    assert m.meta["intervention"]["path"] == "full_forward"
    assert "sliding-window" in m.meta["intervention"]["fallback"]


def test_rows_of_one_prompt_share_one_forward_and_one_cache(task):
    """Rows with equal tokens (a multi-token answer's rows, `token_rows`) run as one row of the base forward,
    and a group holding every prompt once reads a view of the cache; the logits equal full forwards."""
    backend = HFCausalLMBackend(tiny("qwen3"))
    batch = task.sample(2, 4, seed=0)
    T = batch.tokens.shape[1]
    idx = torch.cat([torch.arange(len(batch)).repeat(3), torch.tensor([0])])  # each prompt 3 times, row 0 once more
    rows = dataclasses.replace(batch[idx], query_pos=T - 1 - torch.arange(len(idx)) // len(batch) % 3)
    seen = []
    hook = backend.model.model.embed_tokens.register_forward_hook(lambda m, a, out: seen.append(a[0].shape[0]))
    try:
        run = backend.final_position_run(rows.tokens, rows.query_pos)
    finally:
        hook.remove()
    assert seen == [len(batch)] and run.n_forward_rows == len(batch)
    keys = {t: prefix[0][0] for t, _, prefix in run.groups}  # layer 0's keys of the rows sharing t
    assert keys[T - 2].untyped_storage().data_ptr() == keys[T - 3].untyped_storage().data_ptr()  # views of one cache
    assert keys[T - 1].shape[0] == len(batch) + 1  # every prompt and row 0 again: a copy
    calib = task.sample(2, 4, seed=0, split="calibration")
    assert_final_path_equals_hooks(backend, rows, head_units(backend.cfg, "kv_head"), calib)


def _mixed(kind: str):
    """Compressed and plain layers side by side: Llama with layers 0 and 2 compressed; Gemma 3 with its
    global layers compressed beside plain sliding ones (8-token window)."""
    from phaseinterp.backends import KVCompression, compress_attention
    from phaseinterp.families.gemma3 import tiny_gemma3
    from phaseinterp.families.gemma3.attention import compress_gemma3

    if kind == "llama":
        return compress_attention(tiny("llama"), KVCompression(4, 2, "score", "centre", local=3, sink=2, layers=(0, 2)))
    model = _noisy(tiny_gemma3(seed=0))
    return compress_gemma3(model, KVCompression(4, 4, "mean", local=4), layers="global")


@pytest.mark.parametrize("kind", ["plain qwen3", "compressed llama", "compressed gemma3"])
def test_a_base_run_in_chunks_of_prompts_equals_one_forward(kind, task):
    """Long prompts: the base run forwards its prompts in chunks of at most `base_tokens` tokens; the logits,
    the kept activations and every unit's recomputation equal those of one forward over all prompts."""
    from phaseinterp.backends import backend_for
    from phaseinterp.backends.kv_cache import KVCacheFinalRun

    model = tiny("qwen3") if kind == "plain qwen3" else _mixed(kind.split()[1])
    backend = backend_for(model)
    batch = staggered(task.sample(2, 4, seed=0))  # 8 prompts, query positions T-1 .. T-3
    rows = batch[torch.cat([torch.arange(len(batch)), torch.tensor([0, 3])])]  # rows 0 and 3 twice: 8 prompts
    T = rows.tokens.shape[1]
    whole = KVCacheFinalRun(backend, rows.tokens, rows.query_pos)
    assert whole.n_base_forwards == 1 and whole.n_forward_rows == len(batch)
    cfg, n_layers = backend.cfg, len(whole.layers)
    gen = torch.Generator().manual_seed(2)
    masks = torch.rand(n_layers, cfg.n_heads, generator=gen) < 0.5
    values = torch.randn(n_layers, len(rows), cfg.n_heads, cfg.d_head, generator=gen)
    ref = whole.run_z(list(range(n_layers)), masks, values)
    assert (ref - whole.logits[None]).abs().amax() > 1e-2  # the edits move the logits
    seen: list[int] = []
    for base_tokens, chunks in ((T, [1] * 8), (2 * T + 1, [2] * 4), (3 * T, [3, 3, 2])):
        seen.clear()
        hook = model.model.embed_tokens.register_forward_hook(lambda m, a, out: seen.append(a[0].shape[0]))
        try:
            run = KVCacheFinalRun(backend, rows.tokens, rows.query_pos, base_tokens=base_tokens)
        finally:
            hook.remove()
        assert seen == chunks and run.n_base_forwards == len(chunks)
        torch.testing.assert_close(run.logits, whole.logits, atol=1e-5, rtol=1e-5)
        for m in range(n_layers):
            torch.testing.assert_close(run.base_z(m), whole.base_z(m), atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(run.base_resid(m), whole.base_resid(m), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(run.run_z(list(range(n_layers)), masks, values), ref, atol=1e-4, rtol=1e-4)
    assert no_torch_hooks(model)
    for bad in (0, -5, 2.5, True):
        with pytest.raises(ValueError, match=rf"base_tokens={bad!r} out of range: must be an integer >= 1"):
            KVCacheFinalRun(backend, rows.tokens, rows.query_pos, base_tokens=bad)
