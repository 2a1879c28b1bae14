"""Backends on tiny random HuggingFace models: DeepSeek-V4 (CSA and HCA compressors) and Qwen3;
knockout maps, patching maps and phase sweeps on them through the same calls as on our model."""

import warnings

import numpy as np
import pytest
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from phaseinterp.backends import (DeepseekV4Backend, HFCausalLMBackend, HookedBackend, Replace, SetEntries, SetGate,
                                  Unit, backend_for, load_pretrained)
from phaseinterp.backends.tiny import tiny_deepseek_v4
from phaseinterp.convert import compression_config_from_hf, from_hf_qwen3, load_hf_compressor
from phaseinterp.interventions import activation_patching, head_units, knockout_logits, knockout_map, mapping_swap, phase_swap
from phaseinterp.measure import phase_sweep
from phaseinterp.model.compressor import Compressor
from phaseinterp.model.layers import apply_rope, rope_angles
from phaseinterp.tasks import RecordLookup


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
    assert [u.name for u in b.units("gate")] == ["L1.G0", "L2.G0", "L3.G0"]
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


def _count_rows(model: torch.nn.Module, into: list[tuple[int, int]]):
    """A pre-hook appending (rows, dimensions of `logits_to_keep`) of each forward of `model` to `into`: the
    sweep's plain path keeps one list of positions for all rows (1), `final_logits` one per row (2)."""
    def record(m, args, kw):
        into.append((len(kw.get("input_ids", args[0] if args else None)), kw["logits_to_keep"].ndim))

    return model.register_forward_pre_hook(record, with_kwargs=True)


@pytest.mark.parametrize("which", ["deepseek", "qwen3"])
def test_a_sweep_runs_each_distinct_prompt_once_and_equals_final_logits(which, deepseek, tokens, qwen3):
    """Rows sharing a prompt (a multi-token answer's) share one plain forward; logits equal `final_logits`
    row by row; with an edit open the sweep takes the edit (final_logits' path)."""
    model = deepseek[1] if which == "deepseek" else qwen3
    backend = (DeepseekV4Backend if which == "deepseek" else HFCausalLMBackend)(model)
    rows = tokens[[0, 0, 0, 1, 1]] % model.config.vocab_size
    qpos, prompt_id = torch.tensor([40, 41, 42, 71, 30]), torch.tensor([5, 5, 5, 9, 9])
    batches = []
    handle = _count_rows(model, batches)
    try:
        got = backend.sweep_logits(rows, qpos, prompt_id)
    finally:
        handle.remove()
    assert batches == [(2, 1)]
    torch.testing.assert_close(got, backend.final_logits(rows, qpos), atol=1e-4, rtol=1e-4)
    with backend.intervene(*[Replace(u) for u in backend.units("kv_head")[:1]]):
        edited = backend.sweep_logits(rows, qpos, prompt_id)
        torch.testing.assert_close(edited, backend.final_logits(rows, qpos), atol=1e-4, rtol=1e-4)
    assert (edited - got).abs().max() > 1e-3
    batches.clear()  # one row per prompt, each at its own position: projecting every position would not pay
    handle = _count_rows(model, batches)
    try:
        alone = backend.sweep_logits(rows[[0, 3, 4]], qpos[[0, 3, 4]], torch.tensor([0, 1, 2]))
    finally:
        handle.remove()
    assert batches == [(3, 2)]  # final_logits' path
    torch.testing.assert_close(alone, got[[0, 3, 4]], atol=1e-4, rtol=1e-4)
    changed = rows.clone()
    changed[1, 5] = (changed[1, 5] + 1) % model.config.vocab_size  # row 1 still claims prompt 5
    with pytest.raises(ValueError, match="rows 0 and 1 share prompt_id=5 but not their tokens"):
        backend.sweep_logits(changed, qpos, prompt_id)


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


def _manual_patch(backend, pair, unit, layer):
    """Normalized logit difference restored per residue when `unit` gets its clean z at the query
    position, computed with `Replace` edits (not the TL-named path `activation_patching` uses)."""
    clean, corrupt = pair.clean, pair.corrupt
    heads = backend.heads_of(unit)
    z = backend.head_outputs(clean.tokens, positions=clean.query_pos, layers=[layer])[:, 0][:, :, heads]
    lc = backend.final_logits(clean.tokens, clean.query_pos)
    lk = backend.final_logits(corrupt.tokens, corrupt.query_pos)
    with backend.intervene(Replace(unit, value=z, positions=corrupt.query_pos)):
        lp = backend.final_logits(corrupt.tokens, corrupt.query_pos)
    rows = torch.arange(len(pair))
    ld = [(x[rows, clean.answer] - x[rows, pair.foil]).numpy() for x in (lc, lk, lp)]
    res = clean.residue.numpy()
    return np.array([(ld[2][res == r] - ld[1][res == r]).sum() / (ld[0][res == r] - ld[1][res == r]).sum()
                     for r in range(clean.modulus)])


@pytest.mark.parametrize("which", ["deepseek", "qwen3"])
def test_knockout_and_patching_run_on_hf_models_through_the_same_call(which, deepseek, qwen3):
    model = deepseek[1] if which == "deepseek" else qwen3
    backend = backend_for(model)
    V = model.config.vocab_size
    task = RecordLookup(vocab_size=V, n_records=6, n_demos=1)
    batch, calib = task.sample(1, 4, seed=0), task.sample(1, 4, seed=0, split="calibration")
    n_layers, n_kv = backend.cfg.n_layers, backend.cfg.n_kv_heads
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # random weights: accuracy 0, nan relative changes
        kmap = knockout_map(model, batch, calib, n_boot=20)  # the raw HF model, wrapped by backend_for
        lmap = knockout_map(backend, batch, calib, level="layer", n_boot=20)
    assert kmap.dims == ("layer", "kv_head", "residue") and kmap.shape == (n_layers, n_kv, 4)
    assert lmap.dims == ("layer", "heads", "residue") and lmap.coords["layer"] == list(range(n_layers))
    assert kmap.meta["intervention"]["engine"] == "nnsight" and kmap.meta["model"]["kind"] == backend.cfg.kind
    # the knocked-out logits are those of Replace(calibration mean) at the query positions
    units = head_units(backend.cfg, "kv_head")
    clean, ko, used = knockout_logits(model, batch, units, calib)
    mean_z = backend.head_outputs(calib.tokens, positions=calib.query_pos).mean(0)  # [layer, 1, head, d]
    assert used == "incremental" and ko.shape == (len(units), len(batch), V)
    # DeepSeek-V4 decodes the final position from a prefilled cache; Qwen3 recomputes it through the KV cache
    assert kmap.meta["intervention"]["path"] == ("decode_cache" if which == "deepseek" else "kv_cache")
    for i in (0, len(units) - 1):
        u = units[i]
        edit = Replace(u, value=mean_z[u.layer][:, list(u.heads(backend.cfg))],
                       positions=batch.query_pos)
        with backend.intervene(edit):
            ref = backend.final_logits(batch.tokens, batch.query_pos)
        assert (ref - clean).abs().max() > 1e-3
        torch.testing.assert_close(ko[i], ref, atol=1e-4, rtol=1e-4)
    # patching: head outputs at the final position, every level, both pairings
    pair = mapping_swap(batch)
    pmap = activation_patching(model, pair, unit="z", level="kv_head", rel_min=0, change="normalized")
    assert pmap.dims == ("layer", "kv_head", "residue") and pmap.meta["intervention"]["engine"] == "nnsight"
    assert np.isfinite(pmap.values).all() and np.abs(pmap.values).max() > 0.05
    for layer in (0, n_layers - 1):
        np.testing.assert_allclose(pmap.values[layer, 0], _manual_patch(backend, pair, Unit("kv_head", layer, 0), layer),
                                   atol=1e-3, rtol=1e-3)
    for level in ("head", "layer"):
        m = activation_patching(backend, phase_swap(batch, 1), unit="z", level=level, rel_min=0)
        assert m.shape == (n_layers, backend.cfg.n_heads if level == "head" else 1, 4)
    if which == "deepseek":  # compressed layers: gate and entry patching too
        g = activation_patching(backend, pair, unit="gates", rel_min=0)
        assert g.dims == ("layer", "branch", "kv_head", "residue") and g.coords["layer"] == [1, 2, 3]
        assert g.coords["branch"] == ["kv"] and np.isfinite(g.values).any()
    curve = phase_sweep(model, batch, period=4, progress=False, n_boot=20, n_perm=20)
    full = model(batch.tokens, use_cache=False).logits[torch.arange(len(batch)), batch.query_pos]
    assert np.array_equal(curve.correct, (full.argmax(-1)[:, None] == batch.answers).any(1).numpy())
    assert curve.config["model"]["kind"] == backend.cfg.kind and curve.period == 4
    assert no_torch_hooks(model)


def test_bad_input_on_hf_models_names_the_value_and_the_range(qwen3):
    task = RecordLookup(vocab_size=128, n_records=6, n_demos=1)
    batch, calib = task.sample(1, 4, seed=0), task.sample(1, 4, seed=0, split="calibration")
    pair = mapping_swap(batch)
    with pytest.raises(ValueError, match=r"layer=2 is invalid: allowed 0\.\.1"):
        knockout_map(qwen3, batch, calib, layers=[2])
    with pytest.raises(ValueError, match=r"method='incremental' needs positions='final' .* got positions='all' on "
                                         r"HFCausalLMBackend\(Qwen3ForCausalLM\)"):
        knockout_map(qwen3, batch, calib, method="incremental", positions="all")
    with pytest.raises(ValueError, match=r"unit='resid' is invalid on HFCausalLMBackend\(Qwen3ForCausalLM\) .* "
                                         r"allowed \['z', 'entries', 'gates'\]"):
        activation_patching(qwen3, pair, unit="resid")
    with pytest.raises(ValueError, match=r"unit='gates' needs compressed layers; layers \[0, 1\] have none"):
        activation_patching(qwen3, pair, unit="gates")
    with pytest.raises(ValueError, match=r"level='query' is invalid: allowed"):
        activation_patching(qwen3, pair, level="query")
    wide = RecordLookup(vocab_size=1000, n_records=6, n_demos=1).sample(1, 4, seed=0, split="calibration")
    with pytest.raises(ValueError, match=r"token id \d+ is out of range: allowed 0\.\.127"):
        knockout_map(qwen3, batch, wide)
    with pytest.raises(ValueError, match=r"model of type dict is invalid: allowed a phaseinterp.backends Backend or a model of a registered family"):
        activation_patching({"weights": 0}, pair)
    assert no_torch_hooks(qwen3)
