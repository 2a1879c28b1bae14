"""Backends on tiny random HuggingFace models: DeepSeek-V4 (CSA and HCA compressors) and Qwen3."""

import pytest
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from phaseinterp.backends import (DeepseekV4Backend, HFCausalLMBackend, HookedBackend, Replace, SetEntries, SetGate,
                                  Unit, backend_for, load_pretrained)
from phaseinterp.backends.tiny import tiny_deepseek_v4
from phaseinterp.convert import compression_config_from_hf, from_hf_qwen3, load_hf_compressor
from phaseinterp.model.compressor import Compressor
from phaseinterp.model.layers import apply_rope, rope_angles


def no_torch_hooks(module: torch.nn.Module) -> bool:
    return all(not m._forward_hooks and not m._forward_pre_hooks for m in module.modules())


@pytest.fixture(scope="module")
def deepseek():
    model = tiny_deepseek_v4(index_topk=64)  # >= entries: no near-tie top-k flips between batch shapes
    cfg = model.config
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():  # larger weights: every path (gates, heads) moves the logits
            p.add_(torch.randn(p.shape, generator=gen) * 0.2)
    return cfg, model


@pytest.fixture(scope="module")
def tokens():
    return torch.randint(0, 512, (2, 72), generator=torch.Generator().manual_seed(0))


def test_deepseek_units_and_strides(deepseek):
    _, model = deepseek
    b = backend_for(model)
    assert isinstance(b, DeepseekV4Backend)
    assert b.cfg.layer_strides == (None, 4, 16, 4) and b.cfg.gate_windows == (None, 8, 16, 8)
    assert [u.name for u in b.units("gate")] == ["L1.gate0", "L2.gate0", "L3.gate0"]
    assert b.cfg.n_kv_heads == 1 and b.heads_of(Unit("kv_head", 2, 0)) == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="layer 0 has no compressor"):
        b.check_unit(Unit("gate", 0, 0))


@pytest.mark.parametrize("layer", [1, 2])
def test_deepseek_gate_readout_is_what_the_hf_compressor_computes(deepseek, tokens, layer):
    cfg, model = deepseek
    b = DeepseekV4Backend(model)
    hf = model.model.layers[layer].self_attn.compressor
    seen = {}
    handle = hf.register_forward_hook(lambda mod, args, out: seen.update(h=args[0].detach(), out=out[0].detach()))
    try:
        gates = b.gate_weights(tokens, Unit("gate", layer, 0))
    finally:
        handle.remove()
    entries = b.entries(tokens, Unit("gate", layer, 0))
    assert torch.equal(entries[:, :, 0], seen["out"][:, 0])  # the entries the HF module returned
    cc = compression_config_from_hf(cfg, cfg.layer_types[layer])
    ours = Compressor(cc, cfg.hidden_size, 1, cfg.head_dim, cfg.rms_norm_eps)
    load_hf_compressor(ours, hf)
    with torch.no_grad():
        got = {}
        ours.hook_gate.add_hook(lambda x, hook: got.update(g=x.detach()))
        out = ours(seen["h"])
        ours.hook_gate.remove_hooks()
    n = tokens.shape[1] // cc.stride
    assert gates.shape == (2, n, cc.window, 1, cfg.head_dim) and got["g"].shape == gates.shape
    torch.testing.assert_close(gates, got["g"], atol=1e-5, rtol=1e-5)  # an independent implementation
    assert torch.allclose(gates.sum(2), torch.ones(())) and (gates.amax(2) < 0.999).any()
    if layer == 1:
        assert (gates[:, 0, : cc.stride] == 0).all()  # CSA entry 0: previous block is before position 0
    # entries = RoPE(RMSNorm(sum_i gate_i * payload_i)): the read-out gates rebuild them
    rope = apply_rope(out, rope_angles(torch.arange(n) * cc.stride, cc.rope_dims, cc.rope_theta), cc.rope_style)
    torch.testing.assert_close(rope, entries, atol=1e-5, rtol=1e-5)


def test_deepseek_gate_override_and_head_knockout_change_and_are_undone(deepseek, tokens):
    _, model = deepseek
    b = DeepseekV4Backend(model)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    clean = b(tokens)
    for edit in (SetGate(Unit("gate", 1, 0), "uniform"), SetGate(Unit("gate", 2, 0), 3),
                 Replace(Unit("head", 3, 2)), Replace(Unit("kv_head", 2, 0), positions=(-1, 40)),
                 SetEntries(Unit("gate", 3, 0), (0, 5), 0.0)):
        with b.intervene(edit):
            changed = b(tokens)
        assert (changed - clean).abs().max() > 1e-3, edit
        assert torch.equal(b(tokens), clean), edit
    assert torch.equal(model(tokens, use_cache=False).logits, clean)
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())
    assert no_torch_hooks(model)


def test_deepseek_head_knockout_is_the_o_a_proj_input_head(deepseek, tokens):
    cfg, model = deepseek
    b = DeepseekV4Backend(model)
    o_a = model.model.layers[3].self_attn.o_a_proj
    head, d = 3, cfg.head_dim  # 2 heads per o group: head 3 is group 1, slot 1

    def zero_head(mod, args):
        x = args[0].clone()
        x[:, -1, 1, d : 2 * d] = 0.0
        return (x,)

    handle = o_a.register_forward_pre_hook(zero_head)
    try:
        with torch.no_grad():
            expected = model(tokens, use_cache=False).logits
    finally:
        handle.remove()
    with b.intervene(Replace(Unit("head", 3, head))):
        got = b(tokens)
    assert torch.equal(got, expected)
    z = b.head_outputs(tokens, positions=(-1,), layers=[3])
    assert z.shape == (2, 1, 1, 4, cfg.head_dim)


def test_deepseek_batched_variants_equal_one_by_one(deepseek, tokens):
    _, model = deepseek
    b = DeepseekV4Backend(model)
    variants = [[], [Replace(Unit("layer", 1))], [SetGate(Unit("gate", 1, 0), 7)]]
    qpos = torch.tensor([71, 50])
    out = b.run_batched(tokens, variants, positions=qpos)
    for i, edits in enumerate(variants):
        with b.intervene(*edits):
            torch.testing.assert_close(out[i], b(tokens)[torch.arange(2), qpos], atol=1e-5, rtol=1e-5)


def test_final_logits_with_chunked_prefill_equal_one_forward(deepseek, tokens):
    _, model = deepseek
    qpos = torch.tensor([71, 30])
    full = model(tokens, use_cache=False).logits[torch.arange(2), qpos]
    for chunk in (None, 16, 40):
        got = DeepseekV4Backend(model, prefill_chunk=chunk).final_logits(tokens, qpos)
        torch.testing.assert_close(got, full, atol=1e-4, rtol=1e-4)
    with pytest.raises(ValueError, match="prefill_chunk=0 is invalid"):
        DeepseekV4Backend(model, prefill_chunk=0)


@pytest.fixture(scope="module")
def qwen3():
    cfg = Qwen3Config(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=256)
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(std=0.3)
    return model


def test_qwen3_knockouts_match_our_converted_model(qwen3):
    tokens = torch.randint(0, 128, (2, 48), generator=torch.Generator().manual_seed(3))
    hf = HFCausalLMBackend(qwen3, stride=4)
    ours = HookedBackend(from_hf_qwen3(qwen3))
    assert hf.cfg.strides == (4,) and (hf.layers_path, hf.attn_name, hf.out_name) == ("model.layers", "self_attn", "o_proj")
    clean = hf(tokens)
    torch.testing.assert_close(clean, ours(tokens), atol=1e-4, rtol=1e-4)
    value = torch.randn(2, 16, generator=torch.Generator().manual_seed(4))
    for edit in (Replace(Unit("kv_head", 1, 1), value), Replace(Unit("head", 0, 2), 0.0, (-1, 10)),
                 Replace(Unit("layer", 0), 0.0)):
        with hf.intervene(edit), ours.intervene(edit):
            a, o = hf(tokens), ours(tokens)
        assert (a - clean).abs().max() > 1e-2
        torch.testing.assert_close(a, o, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(hf.head_outputs(tokens, (5, -1)), ours.head_outputs(tokens, (5, -1)), atol=1e-5, rtol=1e-5)
    assert torch.equal(hf(tokens), clean) and no_torch_hooks(qwen3)
    chunked = HFCausalLMBackend(qwen3, prefill_chunk=10).final_logits(tokens, torch.tensor([47, 20]))
    torch.testing.assert_close(chunked, clean[[0, 1], [47, 20]], atol=1e-4, rtol=1e-4)
    with pytest.raises(ValueError, match="has no compressor"):
        hf.check_unit(Unit("gate", 0, 0))
    with pytest.raises(ValueError, match="stride=0 is invalid"):
        HFCausalLMBackend(qwen3, stride=0)


def test_load_pretrained_path_offline(qwen3, tmp_path):
    qwen3.save_pretrained(tmp_path / "qwen3")
    b = load_pretrained(str(tmp_path / "qwen3"), dtype=torch.float32, device_map="cpu", stride=4)
    tokens = torch.randint(0, 128, (1, 20), generator=torch.Generator().manual_seed(5))
    assert isinstance(b, HFCausalLMBackend) and b.cfg.strides == (4,)
    torch.testing.assert_close(b(tokens), HFCausalLMBackend(qwen3)(tokens), atol=1e-5, rtol=1e-5)
