"""Backend layer on our own model: units, nnsight edits equal TransformerLens hooks, batched invokes,
edits undone (also on error), gates and entries, the TL-named compatibility, and the one
intervention API: the same knockout and patching maps through TransformerLens hooks and nnsight."""

import numpy as np
import pytest
import torch

from phaseinterp.backends import (HookedNNsightBackend, Read, Replace, SetEntries, SetGate, Unit, backend_for)
from phaseinterp.interventions import (activation_patching, calibrate, head_units, knockout_logits,
                                       knockout_map, mapping_swap, phase_swap, planted_model)
from phaseinterp.interventions.knockout import knockout_edit
from phaseinterp.interventions.runner import run_units
from phaseinterp.measure import phase_sweep
from phaseinterp.tasks import RecordLookup
from tests.helpers import COMPRESSED_VARIANTS, noisy_model, tiny_cfg

SEPARATE = COMPRESSED_VARIANTS["w4s4-scalar"]
TIED = COMPRESSED_VARIANTS["csa-sink-partial"]


@pytest.fixture(scope="module")
def model():
    return noisy_model(tiny_cfg([SEPARATE, TIED, "full"]), seed=3)


@pytest.fixture(scope="module")
def tokens():
    return torch.randint(0, 97, (3, 40), generator=torch.Generator().manual_seed(0))


def no_torch_hooks(module: torch.nn.Module) -> bool:
    return all(not m._forward_hooks and not m._forward_pre_hooks for m in module.modules())


def test_units_and_config(model):
    b = HookedNNsightBackend(model)
    assert b.cfg.layer_strides == (4, 4, None) and b.cfg.strides == (4,) and b.cfg.residue_modulus == 4
    assert [u.name for u in b.units("gate")] == ["L0.G0", "L0.G1", "L1.G0"]
    assert [u.name for u in b.units("kv_head")] == ["L0.KV0", "L0.KV1", "L1.KV0", "L1.KV1", "L2.KV0", "L2.KV1"]
    assert b.heads_of(Unit("kv_head", 1, 1)) == [2, 3] and Unit.parse("L1.KV1") == Unit("kv_head", 1, 1)
    assert backend_for(model).cfg == b.cfg
    with pytest.raises(ValueError, match=r"layer=3 is out of range: allowed 0..2"):
        b.check_unit(Unit("kv_head", 3, 0))
    with pytest.raises(ValueError, match=r"kv_head index=2 is out of range: allowed 0..1"):
        b.check_unit(Unit("kv_head", 0, 2))
    with pytest.raises(ValueError, match=r"layer 2 has no compressor; gate units: \['L0.G0'"):
        b.check_unit(Unit("gate", 2, 0))
    with pytest.raises(ValueError, match="unit kind='neuron' is invalid"):
        Unit("neuron", 0, 1)
    with pytest.raises(ValueError, match=r"token id 97 is out of range: allowed 0..96"):
        b(torch.tensor([[1, 97]]))


def test_nnsight_knockout_equals_transformer_lens_hooks(model, tokens):
    b = HookedNNsightBackend(model)
    clean = b(tokens)
    value = torch.randn(2, 8, generator=torch.Generator().manual_seed(1))  # [heads of kv1, d_head]
    with b.intervene(Replace(Unit("kv_head", 1, 1), value=value, positions=(-1, 7))):
        knocked = b(tokens)

    def hook(z, hook):
        z[:, [39, 7], 2:4] = value
        return z

    with torch.no_grad():
        expected = model.run_with_hooks(tokens, fwd_hooks=[("blocks.1.attn.hook_z", hook)])
    assert torch.equal(knocked, expected)
    assert (knocked[:, 39] - clean[:, 39]).abs().max() > 1e-2
    assert torch.equal(knocked[:, :7], clean[:, :7])  # causal: nothing before the edit moves
    with torch.no_grad():  # the same attention path as the backend's (autograd takes the block path)
        assert torch.equal(b(tokens), clean) and torch.equal(model(tokens), clean)  # undone
    assert no_torch_hooks(model) and not any(hp.has_hooks() for hp in model.hook_dict.values())


def test_per_row_positions_and_layer_units(model, tokens):
    b = HookedNNsightBackend(model)
    rows = torch.tensor([5, 20, 39])
    z = b.head_outputs(tokens, positions=rows)
    full = b.run(tokens, reads=[Read("head", 0)])[1]
    read = next(iter(full.values()))
    assert z.shape == (3, 3, 1, 4, 8) and torch.equal(z[:, 0, 0], read[torch.arange(3), rows])
    with b.intervene(Replace(Unit("layer", 2), value=0.0, positions=rows)):
        knocked = b(tokens)

    def hook(x, hook):
        x[torch.arange(3), rows] = 0.0
        return x

    with torch.no_grad():
        expected = model.run_with_hooks(tokens, fwd_hooks=[("blocks.2.hook_attn_out", hook)])
    assert torch.equal(knocked, expected)


def test_batched_invokes_equal_one_by_one(model, tokens):
    b = HookedNNsightBackend(model)
    variants = [[], [Replace(Unit("head", 0, 1))], [SetGate(Unit("gate", 1, 0), "uniform")],
                [Replace(Unit("kv_head", 2, 0)), SetEntries(Unit("gate", 0, 1), (0, -1), 0.0)]]
    qpos = torch.tensor([39, 30, 12])
    batched = b.run_batched(tokens, variants, positions=qpos, variants_per_forward=3)
    for i, edits in enumerate(variants):
        with b.intervene(*edits):
            one = b(tokens)[torch.arange(3), qpos]
        torch.testing.assert_close(batched[i], one, atol=1e-5, rtol=1e-5)
    assert all((batched[i] - batched[0]).abs().max() > 1e-3 for i in (1, 2, 3))


def test_gate_override_and_entries(model, tokens):
    b = HookedNNsightBackend(model)
    unit = Unit("gate", 1, 0)  # deepseek-csa layout: entry 0's first half is before position 0
    g = b.gate_weights(tokens, unit)
    assert g.shape == (3, 10, 8, 2, 8) and torch.allclose(g.sum(2), torch.ones(()))
    assert (g[:, 0, :4] == 0).all()
    clean = b(tokens)
    with b.intervene(SetGate(unit, 6)):
        read = b.run(tokens, reads=[Read("gate", 1, 0)])[1]
        changed = b(tokens)
    assert torch.equal(next(iter(read.values())), g)  # reads see the site before its own edit

    def one_hot(gate, hook):
        out = torch.zeros_like(gate)
        out[:, :, 6] = 1.0
        return out

    with torch.no_grad():
        expected = model.run_with_hooks(tokens, fwd_hooks=[("blocks.1.attn.compress_kv.hook_gate", one_hot)])
    assert torch.equal(changed, expected)
    assert (changed - clean).abs().max() > 1e-2 and torch.equal(b(tokens), clean)
    weights = torch.zeros(8)
    weights[1], weights[5] = 0.25, 0.75  # entry 0: slot 1 lies before position 0, slot 5 gets it all

    def expected_gate(gate, hook):
        out = torch.zeros_like(gate)
        out[:, :, 1], out[:, :, 5] = 0.25, 0.75
        out[:, 0, 1], out[:, 0, 5] = 0.0, 1.0
        return out

    with b.intervene(SetGate(unit, weights)):
        renormalized = b(tokens)
    with torch.no_grad():
        expected = model.run_with_hooks(tokens, fwd_hooks=[("blocks.1.attn.compress_kv.hook_gate", expected_gate)])
    torch.testing.assert_close(renormalized, expected, atol=1e-6, rtol=1e-6)
    e = b.entries(tokens, Unit("gate", 0, 1))
    assert e.shape == (3, 10, 2, 8)
    with b.intervene(SetEntries(Unit("gate", 0, 1), 2, torch.ones(3, 1, 2, 8))):
        patched = b.entries(tokens, Unit("gate", 0, 1))
        assert (b(tokens) - clean).abs().max() > 1e-3
    assert torch.equal(patched, e)  # read before the same site's edit
    with pytest.raises(ValueError, match=r"value of shape \(3, 2, 8\) does not broadcast to \(3, 1, 2, 8\)"):
        with b.intervene(SetEntries(Unit("gate", 0, 1), 2, e[:, 2])):
            b(tokens)
    with pytest.raises(ValueError, match="must sum to 1 over the offsets"):
        SetGate(unit, torch.ones(8))
    with pytest.raises(ValueError, match=r"SetGate offset=8 is out of range: allowed 0..7"):
        with b.intervene(SetGate(unit, 8)):
            b(tokens)
    with pytest.raises(ValueError, match=r"entry=10 is out of range: allowed integers in \[-10, 9\]"):
        with b.intervene(SetEntries(Unit("gate", 0, 0), 10)):
            b(tokens)


def test_edits_undone_on_error_and_bad_input(model, tokens):
    b = HookedNNsightBackend(model)
    clean = b(tokens)
    with pytest.raises(RuntimeError, match="boom"):
        with b.intervene(Replace(Unit("kv_head", 0, 0))):
            raise RuntimeError("boom")
    assert b._active == [] and torch.equal(b(tokens), clean)

    def fail(z):
        raise RuntimeError("inside the trace")

    with pytest.raises(RuntimeError, match="inside the trace"):
        b.run_units(tokens, torch.full((3,), 39), [{"blocks.0.attn.hook_z": fail}])
    assert torch.equal(b(tokens), clean) and no_torch_hooks(model)
    with pytest.raises(ValueError, match=r"position=40 is out of range: allowed integers in \[-40, 39\]"):
        with b.intervene(Replace(Unit("head", 0, 0), positions=(40,))):
            b(tokens)
    with pytest.raises(ValueError, match=r"does not broadcast to \(3, 1, 2, 8\)"):
        with b.intervene(Replace(Unit("kv_head", 0, 0), value=torch.zeros(3, 8))):
            b(tokens)
    with pytest.raises(ValueError, match="hook name 'blocks.0.attn.hook_q' is not available"):
        b.capture(tokens, ["blocks.0.attn.hook_q"])
    with pytest.raises(ValueError, match="batched invokes need equal sequence lengths"):
        with b.nn.trace() as tracer:
            with tracer.invoke(tokens):
                pass
            with tracer.invoke(tokens[:, :5]):
                pass


def test_pattern_read_restores_fused_attention(model, tokens):
    b = HookedNNsightBackend(model)
    p = b.attention_pattern(tokens, 1)
    with torch.no_grad():  # the backend's grad mode, hence its attention path in layer 0
        _, cache = model.run_with_cache(tokens, names_filter="blocks.1.attn.hook_pattern")
    assert torch.equal(p, cache["blocks.1.attn.hook_pattern"])
    assert not any(blk.attn.explicit for blk in model.blocks)


def test_the_engines_traces_stay_fused_and_a_users_trace_reads_patterns(model, tokens):
    """The backend's own traces (`engine_trace`) never read patterns, so no layer builds them there; a trace of
    the user's through `backend.nn` may, so every layer does, and the pattern it reads is the hook's."""
    b = HookedNNsightBackend(model)
    asked = []
    originals = [blk.attn.needs_explicit for blk in model.blocks]
    for blk, original in zip(model.blocks, originals):
        blk.attn.needs_explicit = lambda original=original: asked.append(original()) or asked[-1]
    try:
        with b.intervene(Replace(Unit("head", 0, 0))):
            b(tokens)
        assert asked and not any(asked)
        asked.clear()
        with torch.no_grad(), b.nn.trace(tokens):
            pattern = b.nn.blocks[1].attn.hook_pattern.output.save()
        assert asked and all(asked)
    finally:
        for blk in model.blocks:
            del blk.attn.needs_explicit
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens, names_filter="blocks.1.attn.hook_pattern")
    torch.testing.assert_close(pattern, cache["blocks.1.attn.hook_pattern"])


def test_tl_named_runner_equals_interventions_runner(model, tokens):
    b = HookedNNsightBackend(model)
    qpos = torch.tensor([39, 25, 30])
    units = head_units(model.cfg, "kv_head")
    values = torch.randn(3, 1, 4, 8, generator=torch.Generator().manual_seed(2))
    edits = [knockout_edit(u, values, qpos[:, None], cfg=model.cfg) for u in units]
    edits.append({"blocks.0.attn.compress_k.hook_gate": lambda g: torch.full_like(g, 0.25)})
    expected = run_units(model, tokens, qpos, edits, max_rows=6)
    got = b.run_units(tokens, qpos, edits, max_rows=6)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    names = ["blocks.0.attn.compress_k.hook_gate", "blocks.1.attn.compress_kv.hook_out"]
    cap = b.capture(tokens, names)
    with torch.no_grad():  # the backend's grad mode, hence its attention path
        _, cache = model.run_with_cache(tokens, names_filter=names)
    for name, value in cap.items():
        assert torch.equal(value, cache[name])


def test_knockout_map_and_phase_sweep_through_the_backend():
    model = planted_model(64, stride=4, key_offsets=(0, 2))  # KV head h owns phase 2h
    task = RecordLookup(vocab_size=64, n_records=8, n_demos=2)
    batch, calib = task.sample(6, 4, seed=1), task.sample(6, 4, seed=1, split="calibration")
    b = HookedNNsightBackend(model)
    curve = phase_sweep(b, batch, progress=False, n_boot=50, n_perm=50)  # query positions only
    assert curve.accuracy.tolist() == [1.0, 0.0, 1.0, 0.0] and curve.period == 4
    assert curve.config["logits"]["positions"] == "query positions only"
    direct = phase_sweep(model, batch, progress=False, n_boot=50, n_perm=50)  # full forwards
    assert np.array_equal(direct.correct, curve.correct) and "logits" not in direct.config
    assert curve.config["model"]["kind"] == "hooked" and direct.config["model"]["n_kv_heads"] == 2
    # one call, three ways: nnsight (backend), TransformerLens hooks, the incremental fast path
    m = knockout_map(b, batch, calib, n_boot=50)
    hooks = knockout_map(model, batch, calib, n_boot=50, method="hooks")
    fast = knockout_map(model, batch, calib, n_boot=50)
    assert (m.meta["intervention"]["engine"], hooks.meta["intervention"]["engine"]) == ("nnsight", "transformer_lens")
    assert (m.meta["intervention"]["method"], fast.meta["intervention"]["method"]) == ("hooks", "incremental")
    for other in (hooks, fast):
        np.testing.assert_array_equal(m.values, other.values)
        np.testing.assert_array_equal(m.lo, other.lo)
        np.testing.assert_array_equal(m.hi, other.hi)
        assert m.clean == other.clean
    assert m.values[0, 0, 0] == -100 and m.values[0, 0, 2] == 0 and m.values[0, 1, 2] == -100
    units = head_units(model.cfg, "head")
    for replacement in ("zero", "mean", "resample"):
        clean, ko, used = knockout_logits(b, batch, units, calib, replacement=replacement, per_residue=True)
        ref_clean, ref_ko, _ = knockout_logits(model, batch, units, calib, replacement=replacement, per_residue=True,
                                               method="hooks")
        assert used == "hooks" and torch.equal(clean, ref_clean) and torch.equal(ko, ref_ko)
    assert torch.equal(calibrate(b, calib, "all").z, calibrate(model, calib, "all").z)


@pytest.mark.parametrize("kind", ["mapping_swap", "phase_swap"])
def test_patching_map_identical_through_transformer_lens_hooks_and_nnsight(model, kind):
    task = RecordLookup(vocab_size=97, n_records=8, n_demos=2)
    batch = task.sample(2, 4, seed=0)
    pair = mapping_swap(batch) if kind == "mapping_swap" else phase_swap(batch, 1)
    b = HookedNNsightBackend(model)
    for level in ("kv_head", "head", "layer"):
        via_nnsight = activation_patching(b, pair, unit="z", level=level, rel_min=0, change="normalized")
        via_hooks = activation_patching(model, pair, unit="z", level=level, rel_min=0, method="hooks",
                                        change="normalized")
        fast = activation_patching(model, pair, unit="z", level=level, rel_min=0, change="normalized")
        assert via_nnsight.meta["intervention"]["engine"] == "nnsight"
        assert fast.meta["intervention"]["method"] == "incremental"
        assert via_nnsight.dims == via_hooks.dims and via_nnsight.coords == via_hooks.coords
        assert np.isfinite(via_hooks.values).all() and np.abs(via_hooks.values).max() > 0.05
        np.testing.assert_array_equal(via_nnsight.values, via_hooks.values)
        np.testing.assert_allclose(via_nnsight.values, fast.values, atol=1e-4, rtol=1e-4)
        for key in ("clean", "corrupt"):
            np.testing.assert_array_equal(via_nnsight.meta["logit_diff"][key], via_hooks.meta["logit_diff"][key])
    for unit, kw in [("z", {"positions": "all", "level": "kv_head"}), ("entries", {}), ("gates", {})]:
        a = activation_patching(b, pair, unit=unit, rel_min=0, **kw, change="normalized")
        e = activation_patching(model, pair, unit=unit, rel_min=0, **kw, change="normalized")
        assert a.coords == e.coords
        np.testing.assert_array_equal(a.values, e.values)
    assert no_torch_hooks(model) and not any(hp.has_hooks() for hp in model.hook_dict.values())


def test_bad_input_to_the_one_api_names_the_value_and_the_range(model):
    b = HookedNNsightBackend(model)
    task = RecordLookup(vocab_size=97, n_records=8, n_demos=2)
    batch, calib = task.sample(1, 4, seed=0), task.sample(1, 4, seed=0, split="calibration")
    pair = mapping_swap(batch)
    T = batch.tokens.shape[1]
    with pytest.raises(ValueError, match=r"model of type str is invalid: allowed a phaseinterp.backends Backend or a model of a registered family"):
        knockout_map("w4s4", batch, calib)
    with pytest.raises(ValueError, match=r"method='incremental' needs positions='final' and a backend with the final-position path "
                                         r".* on HookedNNsightBackend"):
        knockout_map(b, batch, calib, method="incremental")
    with pytest.raises(ValueError, match=r"layer=3 is invalid: allowed 0\.\.2"):
        knockout_map(b, batch, calib, layers=[3])
    with pytest.raises(ValueError, match=rf"position 999 is invalid: allowed 0\.\.{T - 1}"):
        knockout_map(b, batch, calib, positions=[999])
    with pytest.raises(ValueError, match=r"L0\.H4: head index=4 is out of range: allowed 0\.\.3"):
        knockout_logits(b, batch, [Unit("head", 0, 4)], calib)
    with pytest.raises(ValueError, match=r"unit Unit\(kind='gate', .* is invalid: allowed a layer, kv_head or head Unit"):
        knockout_logits(b, batch, [Unit("gate", 0, 0)], calib)
    with pytest.raises(ValueError, match=r"unit='resid' is invalid on HookedNNsightBackend\(HookedCompressedTransformer\)"):
        activation_patching(b, pair, unit="resid")
    with pytest.raises(ValueError, match=r"method='incremental' applies to .* on HookedNNsightBackend"):
        activation_patching(b, pair, method="incremental")
    with pytest.raises(ValueError, match=r"level='neuron' is invalid: allowed"):
        activation_patching(b, pair, level="neuron")
    with pytest.raises(ValueError, match=r"max_rows=0 out of range"):
        activation_patching(b, pair, max_rows=0)
    small = calibrate(noisy_model(tiny_cfg(["full"])), calib)  # one layer
    with pytest.raises(ValueError, match=r"calibration z of shape .* allowed layers, heads, d_head = \(3, 4, 8\)"):
        knockout_map(b, batch, small)


def test_relative_change_broadcasts_under_runtime_type_checks():
    from jaxtyping import jaxtyped
    from beartype import beartype as bt

    from phaseinterp.interventions.stats import relative_change

    checked = jaxtyped(typechecker=bt)(relative_change)
    clean, edited = np.array([0.5, 0.0, 1.0]), np.array([[0.25, 0.5, 1.0], [0.5, 0.0, 0.0]])
    for c in (clean, clean[None]):
        out = checked(c, edited)
        assert out.shape == (2, 3)
        np.testing.assert_array_equal(out, [[-50.0, np.nan, 0.0], [0.0, np.nan, -100.0]])
    assert checked(np.float64(0.5), 0.25) == -50.0 and checked(0.5, edited).shape == (2, 3)
    with pytest.raises(Exception, match="clean"):
        checked(np.array([1, 0]), np.array([1.0, 2.0]))  # integers are not accuracies
