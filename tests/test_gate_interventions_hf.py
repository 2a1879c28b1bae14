"""Gate interventions (overrides, cycling, attribution) on the HF DeepSeek-V4 backend, CSA and HCA
layers, checked against our `Compressor` on equal weights (the layouts match: `convert`), against
a plain-torch gradient, and against our own model through TransformerLens hooks and through nnsight."""

import warnings

import numpy as np
import pytest
import torch
from transformers.models.deepseek_v4.modeling_deepseek_v4 import DeepseekV4CSACompressor, apply_rotary_pos_emb

from phaseinterp import HookedCompressedTransformer, preset
from phaseinterp.backends import (CycleGate, DeepseekV4Backend, HookedBackend, HookedNNsightBackend, Read, Unit,
                                  backend_for)
from phaseinterp.backends.tiny import tiny_deepseek_v4, tiny_qwen3
from phaseinterp.config import ModelConfig
from phaseinterp.convert import compression_config_from_hf, load_hf_compressor
from phaseinterp.interventions import (attribution_patching, cycled_gates, gate_attribution, gate_cycling,
                                       gate_override, gate_override_hooks, is_correct, override_values)
from phaseinterp.interventions.patching import logit_diff
from phaseinterp.model.layers import apply_rope, rope_angles
from phaseinterp.tasks import RecordLookup

LAYERS = {1: "CSA", 2: "HCA"}  # tiny_deepseek_v4: layer 1 CSA (m = 4, W = 8), layer 2 HCA (m = W = 16)


@pytest.fixture(scope="module")
def deepseek():
    model = tiny_deepseek_v4(index_topk=64)  # the indexer keeps every entry: no top-k flips between runs
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():  # larger weights: gates are far from uniform and move the logits
            p.add_(torch.randn(p.shape, generator=gen) * 0.2)
    return model


@pytest.fixture(scope="module")
def tokens():
    return torch.randint(0, 512, (2, 72), generator=torch.Generator().manual_seed(0))


def ours_like(model, layer: int):
    """Our one-layer model whose compressor holds the HF layer's compressor weights."""
    hf = model.config
    cc = compression_config_from_hf(hf, hf.layer_types[layer])
    ours = HookedCompressedTransformer(ModelConfig(vocab_size=64, d_model=hf.hidden_size, n_layers=1, n_heads=1,
                                                   n_kv_heads=1, d_head=hf.head_dim, layers=(cc,)), seed=0)
    load_hf_compressor(ours.blocks[0].attn.compress_kv, model.model.layers[layer].self_attn.compressor)
    return ours, cc


def compressor_io(model, tokens, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(input hidden states, output entries [batch, 1, entry, head_dim]) of the HF compressor."""
    seen = {}
    handle = model.model.layers[layer].self_attn.compressor.register_forward_hook(
        lambda mod, args, out: seen.update(h=args[0].detach(), out=out[0].detach()))
    try:
        with torch.no_grad():
            model(tokens, use_cache=False)
    finally:
        handle.remove()
    return seen["h"], seen["out"]


def compressor_input(model, tokens, layer: int) -> torch.Tensor:
    return compressor_io(model, tokens, layer)[0]


def run_ours(ours, h, hooks=()):
    """(gate logits, gate weights, entries after RoPE at the entries' positions) of our compressor on h."""
    comp, got = ours.blocks[0].attn.compress_kv, {}
    comp.hook_gate_logits.add_hook(lambda x, hook: got.update(logits=x.detach()))
    comp.hook_gate.add_hook(lambda x, hook: got.update(gate=x.detach()))
    for name, fn in hooks:
        getattr(comp, name.rsplit(".", 1)[1]).add_hook(fn)
    try:
        with torch.no_grad():
            out = comp(h)
    finally:
        for hp in (comp.hook_gate_logits, comp.hook_gate, comp.hook_out):
            hp.remove_hooks()
    cc = comp.cc
    n = out.shape[1]
    rot = apply_rope(out, rope_angles(torch.arange(n) * cc.stride, cc.rope_dims, cc.rope_theta), cc.rope_style)
    return got["logits"], got["gate"], rot


def no_torch_hooks(module) -> bool:
    return all(not m._forward_hooks and not m._forward_pre_hooks for m in module.modules())


# ---- the description and the gate logits -----------------------------------------------------------------

@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_gate_logits_are_rebuilt_bit_for_bit_and_match_our_compressor(deepseek, tokens, layer):
    b = DeepseekV4Backend(deepseek)
    comp = b.compression(layer)
    assert comp.logits == "projection" and comp.cc == compression_config_from_hf(deepseek.config,
                                                                               deepseek.config.layer_types[layer])
    assert (comp.cc.window, comp.cc.stride) == ((8, 4) if LAYERS[layer] == "CSA" else (16, 16))
    name = f"blocks.{layer}.attn.compress_kv.hook_gate_logits"
    assert name in b.hook_names()
    logits = b.capture(tokens, [name])[name]
    weights = b.gate_weights(tokens, Unit("gate", layer, 0))
    assert torch.equal(logits.softmax(2), weights)  # the softmax of the rebuilt logits is HF's own gate
    ours, cc = ours_like(deepseek, layer)
    our_logits, our_gate, _ = run_ours(ours, compressor_input(deepseek, tokens, layer))
    assert torch.equal(torch.isinf(logits), torch.isinf(our_logits))
    finite = torch.isfinite(our_logits)
    torch.testing.assert_close(logits[finite], our_logits[finite], atol=1e-4, rtol=1e-5)
    if LAYERS[layer] == "CSA":  # entry 0's previous-block slots lie before position 0
        assert torch.isinf(logits[:, 0, :4]).all() and torch.isfinite(logits[:, 1:]).all()
    else:
        assert torch.isfinite(logits).all()
    with pytest.raises(ValueError, match=r"branch=1 is invalid for layer 1: allowed 0"):
        b.compression(1, 1)
    with pytest.raises(ValueError, match=r"layer 0 is 'sliding_attention': it has no compressor"):
        b.compression(0)


# ---- cycling ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("layer,delta", [(1, 1), (1, 3), (1, 6), (2, 1), (2, 9)])
def test_cycled_gates_and_entries_match_our_cycled_compressor(deepseek, tokens, layer, delta):
    b = DeepseekV4Backend(deepseek)
    unit = Unit("gate", layer, 0)
    reads = [Read("gate", layer), Read("entry", layer)]
    _, clean = b.run(tokens, reads=reads)
    _, cycled = b.run(tokens, [CycleGate(unit, delta)], reads=reads)
    ours, _ = ours_like(deepseek, layer)
    h = compressor_input(deepseek, tokens, layer)
    with cycled_gates(ours, delta):
        _, our_gate, our_entries = run_ours(ours, h)
    assert (cycled[reads[0]] - clean[reads[0]]).abs().max() > 0.05  # the cycle moved the gates
    torch.testing.assert_close(cycled[reads[0]], our_gate, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(cycled[reads[1]], our_entries, atol=1e-4, rtol=1e-4)
    if LAYERS[layer] == "CSA":
        assert (cycled[reads[0]][:, 0, :4] == 0).all()  # slots before position 0 stay masked


def test_cycled_gates_on_the_backend_change_the_logits_and_leave_nothing_behind(deepseek, tokens):
    b = DeepseekV4Backend(deepseek)
    state = {k: v.clone() for k, v in deepseek.state_dict().items()}
    clean = b(tokens)
    with cycled_gates(b, 1, layers=[1, 3]):
        both = b(tokens)
    with b.intervene(CycleGate(Unit("gate", 1, 0), 1), CycleGate(Unit("gate", 3, 0), 1)):
        direct = b(tokens)
    assert (both - clean).abs().max() > 1e-3 and torch.equal(both, direct)
    assert torch.equal(b(tokens), clean)
    assert all(torch.equal(v, state[k]) for k, v in deepseek.state_dict().items()) and no_torch_hooks(deepseek)
    with pytest.raises(ValueError, match=r"delta=16 is invalid for layer 2 \(W=16\): allowed delta != 0 mod W"):
        with cycled_gates(b, 16, layers=[2]):
            pass
    with pytest.raises(ValueError, match=r"CycleGate\(L1.G0\) delta=8 is invalid \(W=8\)"):
        b.run(tokens, [CycleGate(Unit("gate", 1, 0), 8)])
    with pytest.raises(ValueError, match=r"CycleGate delta=1.5 is invalid: allowed an integer"):
        CycleGate(Unit("gate", 1, 0), 1.5)


def test_gate_cycling_on_the_backend_scores_the_cycled_curve(deepseek):
    b = DeepseekV4Backend(deepseek)
    batch = RecordLookup(vocab_size=512, n_records=8, n_demos=2).sample(1, 4, seed=0)
    (res,) = gate_cycling(b, batch, deltas=[1], layers=[1, 3], n_boot=20)
    with b.intervene(CycleGate(Unit("gate", 1, 0), 1), CycleGate(Unit("gate", 3, 0), 1)):
        logits = b.final_logits(batch.tokens, batch.query_pos)
    assert np.array_equal(res.cycled.correct, is_correct(logits, batch.answers).numpy())
    assert res.stride == 4 and res.meta["layers"] == [1, 3] and res.meta["branches"] == ["kv"]
    assert res.meta["model"]["kind"] == "deepseek_v4"
    with pytest.raises(ValueError, match=r"cycled layers have strides \[4, 16\]"):
        gate_cycling(b, batch, deltas=[1])


# ---- overrides -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("layer", sorted(LAYERS))
@pytest.mark.parametrize("kind,target", [("uniform", "weights"), ("one_hot", "weights"), ("one_hot", "logits"),
                                         ("uniform", "logits"), ("tensor", "weights"), ("tensor", "logits")])
def test_overrides_give_the_entries_our_compressor_gives(deepseek, tokens, layer, kind, target):
    b = DeepseekV4Backend(deepseek)
    W = b.compression(layer).cc.window
    tensor = None
    if kind == "tensor":
        t = torch.rand(W, generator=torch.Generator().manual_seed(layer)) + 0.1
        tensor = t / t.sum() if target == "weights" else t.log()
    kw = dict(target=target, layers=[layer], offset=2 if kind == "one_hot" else None, tensor=tensor)
    read = Read("entry", layer)
    _, clean = b.run(tokens, reads=[read])
    _, edited = b.run(tokens, [b.hook_edit(n, fn) for n, fn in gate_override_hooks(b, kind, **kw)], reads=[read])
    ours, _ = ours_like(deepseek, layer)
    hooks = gate_override_hooks(ours, kind, **{**kw, "layers": [0]})  # our one-layer model: layer 0
    _, _, our_entries = run_ours(ours, compressor_input(deepseek, tokens, layer), hooks)
    assert (edited[read] - clean[read]).abs().max() > 1e-3  # the override moved the entries
    torch.testing.assert_close(edited[read], our_entries, atol=1e-4, rtol=1e-4)


def test_tensor_overrides_keep_slots_before_position_0_masked(deepseek, tokens):
    b = DeepseekV4Backend(deepseek)
    comp = b.compression(1)
    base = torch.full((8,), 1 / 8)
    moved = base.clone()
    moved[:4] = torch.tensor([0.2, 0.0, 0.05, 0.0])  # differs only on entry 0's invalid slots 0..3
    moved[4:] = (1 - moved[:4].sum()) / 4
    entries, read = [], Read("entry", 1)
    for t in (base, moved):
        hooks = gate_override_hooks(b, "tensor", layers=[1], tensor=t)
        entries.append(b.run(tokens, [b.hook_edit(n, fn) for n, fn in hooks], reads=[read])[1][read])
    assert torch.equal(entries[0][:, 0], entries[1][:, 0])  # entry 0 never reads its invalid slots
    assert (entries[0][:, 1:] - entries[1][:, 1:]).abs().max() > 1e-3  # later entries do read them
    act = torch.rand(2, 3, 8, 1, 64)
    w = override_values(comp, act, "tensor", tensor=moved)
    assert (w[:, 0, :4] == 0).all() and torch.allclose(w.sum(2), torch.ones(()))
    assert torch.equal(w[:, 1:], moved.view(1, 1, 8, 1, 1).expand_as(w[:, 1:]))  # untouched where all are valid
    lg = override_values(comp, act, "tensor", target="logits", tensor=torch.rand(8))
    assert torch.isinf(lg[:, 0, :4]).all() and torch.isfinite(lg[:, 1:]).all()


def test_gate_override_on_the_backend_is_undone_and_refuses_a_raw_hf_model(deepseek, tokens):
    b = DeepseekV4Backend(deepseek)
    clean = b(tokens)
    for kw in ({"layers": [1]}, {"layers": [2], "target": "logits"}, {}):
        with gate_override(b, "uniform", **kw):
            edited = b(tokens)
        assert (edited - clean).abs().max() > 1e-3, kw
    assert torch.equal(b(tokens), clean) and no_torch_hooks(deepseek)
    with pytest.raises(ValueError, match=r"offset=8 is invalid: allowed 0\.\.7"):
        with gate_override(b, "one_hot", offset=8, layers=[1]):
            b(tokens)
    assert torch.equal(b(tokens), clean)  # removed after the error too
    with pytest.raises(ValueError, match=r"model of type DeepseekV4ForCausalLM is invalid: allowed a "
                                         r"HookedCompressedTransformer or a backend with gates"):
        with gate_override(deepseek, "uniform"):
            pass
    with pytest.raises(ValueError, match=r"target='scores' is invalid: allowed one of \['weights', 'logits'\]"):
        gate_override_hooks(b, "uniform", target="scores")


# ---- attribution -----------------------------------------------------------------------------------------

def hf_entries(comp, h: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The HF compressor's entries [batch, 1, entry, head_dim] rebuilt in plain torch from gate weights
    w [batch, entry, W, head_dim] (its forward, with the softmax replaced by w)."""
    B, T, _ = h.shape
    m, d = comp.compress_rate, comp.head_dim
    n = T // m
    kv = comp.kv_proj(h)[:, : n * m].view(B, n, m, -1)
    if isinstance(comp, DeepseekV4CSACompressor):
        slots = kv.new_zeros(B, n, 2 * m, d)
        slots[:, :, m:] = kv[..., d:]
        slots[:, 1:, :m] = kv[:, :-1, :, :d]
    else:
        slots = kv
    out = comp.kv_norm((slots * w).sum(2))
    cos, sin = comp.rotary_emb(out, position_ids=(torch.arange(n) * m)[None].expand(B, -1), layer_type="compress")
    return apply_rotary_pos_emb(out.unsqueeze(1), cos, sin)


@pytest.mark.parametrize("layer", sorted(LAYERS))
@pytest.mark.parametrize("target", ["weights", "logits"])
def test_attribution_is_source_minus_base_times_the_plain_torch_gradient(deepseek, tokens, layer, target):
    b = DeepseekV4Backend(deepseek)
    comp = deepseek.model.layers[layer].self_attn.compressor
    qpos = torch.tensor([71, 60])
    answer, foil = torch.tensor([5, 9]), torch.tensor([7, 11])
    metric = lambda lg: logit_diff(lg, answer, foil)  # noqa: E731
    name = f"blocks.{layer}.attn.compress_kv.hook_{'gate' if target == 'weights' else 'gate_logits'}"
    real = b.capture(tokens, [name])[name]
    source = override_values(b.compression(layer), real, "uniform", target=target)
    attr, m_base = attribution_patching(b, tokens, qpos, {name: source}, metric)
    # the reference: the HF model run in plain torch with the compressor's gate replaced by a leaf
    leaf = real[..., 0, :].clone().requires_grad_(True)
    weights = leaf if target == "weights" else leaf.softmax(2)
    h, own = compressor_io(deepseek, tokens, layer)
    with torch.no_grad():
        rebuilt = hf_entries(comp, h, weights.detach())
    torch.testing.assert_close(rebuilt, own, atol=1e-6, rtol=1e-5)  # the rebuild is the HF forward
    handle = comp.register_forward_hook(lambda mod, args, out: (hf_entries(mod, args[0], weights), out[1]))
    try:
        logits = deepseek(tokens, use_cache=False).logits[torch.arange(2), qpos]
    finally:
        handle.remove()
    m = metric(logits)
    (grad,) = torch.autograd.grad(m.sum(), leaf)
    delta = torch.where(torch.isfinite(source[..., 0, :]) & torch.isfinite(leaf), source[..., 0, :] - leaf, 0.0)
    expected = (delta * grad).detach()
    torch.testing.assert_close(m_base, m.detach(), atol=1e-5, rtol=1e-5)
    assert expected.abs().max() > 1e-4  # a real signal, not zeros on both sides
    torch.testing.assert_close(attr[name][..., 0, :], expected, atol=1e-5, rtol=1e-3)
    assert no_torch_hooks(deepseek)


def test_gate_attribution_on_the_backend_agrees_with_its_exact_interventions(deepseek):
    b = DeepseekV4Backend(deepseek)
    batch = RecordLookup(vocab_size=512, n_records=8, n_demos=2).sample(1, 16, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        ga = gate_attribution(deepseek, batch, override="uniform", mode="noise", layers=[1, 2])  # a raw model: wrapped
    a, e = ga.attribution, ga.exact
    assert a.dims == ("layer", "branch", "kv_head", "offset", "residue") and a.coords["layer"] == [1, 2]
    assert a.coords["branch"] == ["kv"] and a.shape == (2, 1, 1, 16, 16)
    assert np.isfinite(a.values[0, 0, 0, :8]).all() and np.isnan(a.values[0, 0, 0, 8:]).all()  # CSA has W = 8
    assert ga.spearman > 0.5 and np.isfinite(e.values).sum() == np.isfinite(a.values).sum()
    # one exact cell, by hand: the uniform weight written into offset 5 of layer 1, every entry
    name = "blocks.1.attn.compress_kv.hook_gate"
    real = b.capture(batch.tokens, [name])[name]
    uni = override_values(b.compression(1), real, "uniform")

    def write(x, hook):
        x = x.clone()
        x[:, :, 5] = uni[:, :, 5]
        return x

    base = b.final_logits(batch.tokens, batch.query_pos)
    edited = b.final_logits(batch.tokens, batch.query_pos, [(name, write)])
    from phaseinterp.interventions.patching import top_other
    foil = top_other(base, batch.answers)
    d = (logit_diff(edited, batch.answer, foil) - logit_diff(base, batch.answer, foil)).numpy()
    by_res = np.array([d[batch.residue.numpy() == r].mean() for r in range(16)])
    np.testing.assert_allclose(e.sel(layer=1, branch="kv", kv_head=0, offset=5), by_res, atol=1e-4, rtol=1e-4)
    with pytest.raises(ValueError, match=r"no compression branch matches layers=None, branches=None \(compressed "
                                         r"layers: \[\]\)"):
        gate_attribution(backend_for(tiny_qwen3(seed=0)), batch, override="uniform")


# ---- our model: TransformerLens hooks (HookedBackend) and the generic nnsight engine agree ------------

@pytest.mark.parametrize("name", ["tiny-w4s4", "tiny-deepseek-csa"])
def test_our_model_gives_the_same_results_through_both_engines(name):
    model = HookedCompressedTransformer(preset(name), seed=0)
    b = HookedNNsightBackend(model)
    batch = RecordLookup(vocab_size=model.cfg.vocab_size, n_records=8, n_demos=2).sample(2, model.cfg.residue_modulus,
                                                                                         seed=0)
    t = batch.tokens
    comps = b.compression(0), b.compression(0, len(b.cfg.gate_branches[0]) - 1)
    assert all(c.logits == "hook" and c.cc == model.cfg.compression(0) for c in comps)
    for kw in ({"kind": "uniform"}, {"kind": "one_hot", "offset": 1, "target": "logits"}):
        with gate_override(model, **kw):
            direct = model(t)
        with gate_override(b, **kw):
            via = b(t)
        torch.testing.assert_close(via, direct, atol=1e-5, rtol=1e-5)
    for delta in (1, 2):
        with cycled_gates(model, delta):
            direct = model(t)
        with cycled_gates(b, delta):
            via = b(t)
        assert (via - model(t)).abs().max() > 1e-4
        torch.testing.assert_close(via, direct, atol=1e-4, rtol=1e-4)
    for target in ("weights", "logits"):
        d = gate_attribution(model, batch, override="uniform", target=target)
        v = gate_attribution(b, batch, override="uniform", target=target)
        assert d.attribution.coords == v.attribution.coords
        np.testing.assert_allclose(v.attribution.values, d.attribution.values, atol=1e-4, rtol=1e-3)
        np.testing.assert_allclose(v.exact.values, d.exact.values, atol=1e-4, rtol=1e-3)
    assert not any(hp.has_hooks() for hp in model.hook_dict.values())


def test_cycling_a_uniform_gate_names_what_is_missing():
    cfg = preset("tiny-w4s4")
    uniform = ModelConfig(**{**cfg.__dict__, "layers": tuple(
        type(s)(**{**s.__dict__, "gate": "uniform"}) if not isinstance(s, str) else s for s in cfg.layers)})
    b = HookedBackend(HookedCompressedTransformer(uniform, seed=0))
    with pytest.raises(ValueError, match=r"CycleGate\(L0.G0\): gate='uniform' has no gate parameters to cycle"):
        b.run(torch.zeros(1, 16, dtype=torch.long), [CycleGate(Unit("gate", 0, 0), 1)])
    with pytest.raises(ValueError, match=r"gate cycling changes nothing in"):
        with cycled_gates(b, 1):
            pass
