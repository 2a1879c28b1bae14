"""A TransformerLens `TransformerBridge` and an nnsight `LanguageModel` over tiny random Qwen3 and
DeepSeek-V4 models: the same phase curve (per example) and knockout map as the raw HF model, the
bridge's hooks hold what our sites hold, and the gate hooks added to the DeepSeek-V4 adapter fire
from the compressor's softmax."""

from __future__ import annotations

import copy
import warnings
from dataclasses import replace

import beartype  # noqa: F401  (before nnsight)
import numpy as np
import pytest
import torch
from nnsight import LanguageModel
from transformer_lens.model_bridge.sources._bridge_builder import build_bridge_from_module

from phaseinterp.backends import DeepseekV4Backend, HFCausalLMBackend, Read, SetGate, Unit, backend_for, resolve_model
from phaseinterp.families.bridges.backend import add_gate_hooks, bridge_hook_name
from phaseinterp.backends.tiny import tiny_qwen3, word_tokenizer
from phaseinterp.families import family_of_model
from phaseinterp.families.deepseek_v4 import tiny_deepseek_v4_spec
from phaseinterp.interventions import gate_cycling, knockout_logits, knockout_map
from phaseinterp.measure import phase_sweep
from phaseinterp.tasks import RecordLookup

torch.set_num_threads(1)
pytestmark = pytest.mark.filterwarnings("ignore:LanguageModel is deprecated")


def _louder(model: torch.nn.Module) -> torch.nn.Module:
    """Larger random weights, so that every unit moves the logits."""
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.2)
    return model.eval()


def _three(which: str):
    """(raw HF model, bridge over a copy, LanguageModel over another copy, architecture)."""
    if which == "qwen3":
        raw, arch = _louder(tiny_qwen3(seed=0)), "Qwen3ForCausalLM"
    else:
        raw, arch = _louder(tiny_deepseek_v4_spec().build(seed=0).hf), "DeepseekV4ForCausalLM"
    hf_for_bridge = copy.deepcopy(raw)  # the bridge replaces submodules of its model in place
    bridge = build_bridge_from_module(hf_for_bridge, arch, hf_config=hf_for_bridge.config)
    lm = LanguageModel(copy.deepcopy(raw), tokenizer=word_tokenizer(raw.config.vocab_size))
    return raw, bridge, lm, arch


@pytest.fixture(scope="module", params=["qwen3", "deepseek_v4"])
def models(request):
    return _three(request.param)


def _planted(raw, batch):
    """The batch with the raw model's own prediction as the answer of every other example: clean
    accuracy is about 50%, so knockouts flip rows and the maps are not all zero."""
    pred = backend_for(raw).final_logits(batch.tokens, batch.query_pos).argmax(-1)
    answers = batch.answers.clone()
    keep = batch.example_id % 2 == 0
    answers[keep, 0] = pred[keep]
    return replace(batch, answers=answers)


@pytest.fixture(scope="module")
def batches(models):
    raw = models[0]
    task = RecordLookup(vocab_size=raw.config.vocab_size, n_records=8, n_demos=1)
    batch = _planted(raw, task.sample(3, 8, seed=0))
    return batch, task.sample(2, 8, seed=0, split="calibration")


def test_each_wrapper_is_its_own_family_and_runs_behind_the_hf_backend(models):
    raw, bridge, lm, arch = models
    kind = DeepseekV4Backend if arch == "DeepseekV4ForCausalLM" else HFCausalLMBackend
    assert family_of_model(bridge).name == "transformer-lens-bridge"
    assert family_of_model(lm).name == "nnsight"
    for wrapper, hf in ((bridge, bridge.original_model), (lm, lm._module)):
        backend = resolve_model(wrapper)
        assert type(backend) is kind and backend.model is hf and backend.cfg == backend_for(raw).cfg


def test_every_nnsight_wrapper_runs_behind_its_module():
    from nnsight import NNsight
    from nnsight.modeling.transformers import TransformersModel

    hf = tiny_qwen3(seed=0)
    for wrapper in (NNsight(hf), TransformersModel(hf, tokenizer=word_tokenizer(hf.config.vocab_size))):
        assert family_of_model(wrapper).name == "nnsight"
        assert type(backend_for(wrapper)) is HFCausalLMBackend and backend_for(wrapper).model is hf
    with pytest.raises(ValueError, match=r"Envoy over Qwen3DecoderLayer is invalid: allowed an nnsight LanguageModel"):
        backend_for(NNsight(hf).model.layers[0])


def test_same_phase_curve_per_example(models, batches):
    raw, bridge, lm, _ = models
    batch, _ = batches
    curves = [phase_sweep(m, batch, period=4, n_boot=20, n_perm=20, progress=False) for m in (raw, bridge, lm)]
    assert 0 < curves[0].correct.mean() < 1  # planted answers: some rows right, some wrong
    for curve in curves[1:]:
        assert np.array_equal(curve.correct, curves[0].correct)
        np.testing.assert_allclose(curve.accuracy, curves[0].accuracy)


def test_same_knockout_map_and_logits(models, batches):
    raw, bridge, lm, _ = models
    batch, calib = batches
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # random weights: some units change nothing at some residues
        maps = [knockout_map(m, batch, calib, n_boot=20, progress=False) for m in (raw, bridge, lm)]
    assert np.abs(np.nan_to_num(maps[0].values)).max() > 0
    # the bridge's components replace HF's layers: its map runs full forwards, and says why
    path = maps[1].meta["intervention"]
    assert path["path"] == "full_forward" and path.get("fallback"), path
    if maps[0].meta["intervention"]["path"] == "kv_cache":  # Qwen3: only the bridge falls back
        assert "bridge" in path["fallback"], path
    units = backend_for(raw).units("kv_head")
    ref_clean, ref_ko, _ = knockout_logits(raw, batch, units, calib)
    for m, wrapper in zip(maps[1:], (bridge, lm)):
        assert m.shape == maps[0].shape and m.coords == maps[0].coords
        np.testing.assert_allclose(m.values, maps[0].values, atol=1e-5, equal_nan=True)
        clean, ko, _ = knockout_logits(wrapper, batch, units, calib)
        torch.testing.assert_close(clean, ref_clean, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(ko, ref_ko, atol=1e-5, rtol=1e-5)


def _canonical(site: str, value: torch.Tensor, backend) -> torch.Tensor:
    """A bridge hook's tensor in our site's layout (the table of `backends.bridge`)."""
    if site == "head":
        return value.reshape(*value.shape[:2], backend.cfg.n_heads, backend.cfg.d_head)
    if site == "entry":
        return value.permute(0, 2, 1, 3)
    if site in ("gate", "gate_logits"):
        return value.unsqueeze(3)
    return value


def test_the_bridge_hook_of_each_site_holds_what_the_backend_reads(models, batches):
    _, bridge, _, arch = models
    backend, tokens = backend_for(bridge), batches[0].tokens[:4]
    compressed = arch == "DeepseekV4ForCausalLM"
    if compressed:
        assert len(add_gate_hooks(bridge)) == 2 * len(backend.units("gate"))
    for layer in range(backend.cfg.n_layers):
        sites = ("head", "layer") + (("entry", "gate", "gate_logits") if backend.cfg.gate_branches[layer] else ())
        for site in sites:
            name = bridge_hook_name(bridge, site, layer)
            _, cache = bridge.run_with_cache(tokens, names_filter=[name])
            read = Read(site, layer, 0)
            ours = backend.run(tokens, reads=[read])[1][read]
            torch.testing.assert_close(_canonical(site, cache[name], backend), ours, atol=1e-5, rtol=1e-5)
    unit = Unit("gate", 1, 0) if compressed else Unit("kv_head", 1, 0)
    assert bridge_hook_name(bridge, unit) == bridge_hook_name(bridge, "gate" if compressed else "head", 1)


def test_a_tl_hook_on_the_added_gate_site_is_our_gate_edit():
    raw, bridge, _, _ = _three("deepseek_v4")
    add_gate_hooks(bridge)
    add_gate_hooks(bridge)  # idempotent
    backend = backend_for(raw)
    tokens = torch.randint(0, raw.config.vocab_size, (2, 64), generator=torch.Generator().manual_seed(0))

    def uniform(gate, hook):  # 1/W over the window slots at positions >= 0, as SetGate "uniform"
        valid = backend.gate_valid(1, gate.shape[1]).to(gate.dtype)[None, :, :, None]
        return (valid / valid.sum(2, keepdim=True)).expand_as(gate)

    edited = bridge.run_with_hooks(tokens, fwd_hooks=[("blocks.1.attn.compressor.hook_gate", uniform)])
    with backend.intervene(SetGate(Unit("gate", 1, 0), "uniform")):
        ours = backend(tokens)
    assert (ours - backend(tokens)).abs().max() > 1e-3
    torch.testing.assert_close(edited, ours, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(bridge(tokens), backend(tokens), atol=1e-5, rtol=1e-5)  # the hook is gone
    with bridge.hooks(fwd_hooks=[("blocks.1.attn.compressor.hook_gate", uniform)]):
        # the bridge's HF model is what its backend runs: a hook attached to the bridge acts there too
        torch.testing.assert_close(backend_for(bridge)(tokens), ours, atol=1e-5, rtol=1e-5)
    assert all(not bridge.hook_dict[n]._forward_hooks for n in bridge.hook_dict if "hook_gate" in n)


def test_gate_cycling_on_the_bridge_equals_the_raw_model():
    raw, bridge, lm, _ = _three("deepseek_v4")
    batch = _planted(raw, RecordLookup(vocab_size=raw.config.vocab_size, n_records=8, n_demos=1).sample(2, 8, seed=0))
    ref = gate_cycling(raw, batch, deltas=[1], layers=[1], n_boot=20, progress=False)[0]  # the CSA layer
    assert (ref.cycled.correct != ref.baseline.correct).any()
    for wrapper in (bridge, lm):
        got = gate_cycling(wrapper, batch, deltas=[1], layers=[1], n_boot=20, progress=False)[0]
        assert np.array_equal(got.cycled.correct, ref.cycled.correct)
        np.testing.assert_allclose(got.cycled.accuracy, ref.cycled.accuracy)
    with lm.trace(batch.tokens[:2]):  # the LanguageModel still traces after our gate edits on its module
        out = lm.output.save()
    torch.testing.assert_close(out.logits, raw(batch.tokens[:2], use_cache=False).logits, atol=1e-5, rtol=1e-5)


def test_bad_bridge_sites_name_the_value_and_the_allowed_ones():
    _, bridge, _, _ = _three("qwen3")
    with pytest.raises(ValueError, match=r"site='gate' is invalid for a Qwen3ForCausalLM bridge: allowed \['head', 'layer'\]"):
        bridge_hook_name(bridge, "gate", 0)
    with pytest.raises(ValueError, match=r"layer=2 is out of range: allowed 0..1"):
        bridge_hook_name(bridge, "head", 2)
    with pytest.raises(ValueError, match=r"allowed a bridge with DeepSeek-V4 compressors"):
        add_gate_hooks(bridge)
    _, v4, _, _ = _three("deepseek_v4")
    with pytest.raises(ValueError, match=r"call add_gate_hooks\(bridge\) first"):
        bridge_hook_name(v4, "gate", 1)


def test_a_bridge_in_compatibility_mode_runs_its_processed_weights():
    """`enable_compatibility_mode` writes TransformerLens's processed weights (folded norms, centred
    unembedding) into the HF modules: the backend computes what the bridge computes, and the raw
    model's logits up to a per-position constant."""
    raw, bridge, _, _ = _three("qwen3")
    bridge.enable_compatibility_mode(disable_warnings=True)
    tokens = torch.randint(0, raw.config.vocab_size, (2, 24), generator=torch.Generator().manual_seed(0))
    ours, theirs, plain = backend_for(bridge)(tokens), bridge(tokens), raw(input_ids=tokens, use_cache=False).logits
    torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=1e-6)
    assert (ours - plain).abs().max() > 1e-4  # processed, not the raw weights
    centred = lambda x: x - x.mean(-1, keepdim=True)  # noqa: E731
    torch.testing.assert_close(centred(ours), centred(plain), atol=1e-5, rtol=1e-5)
