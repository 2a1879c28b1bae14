"""One model over several devices: a tiny Qwen3 and DeepSeek-V4 dispatched with accelerate's
`device_map` (layers split between "cpu" and "disk" offload, the embeddings and the head offloaded
too) give the same logits, phase curve, knockout map and gate edits as the undispatched model."""

from __future__ import annotations

import copy
from pathlib import Path
import warnings

import beartype  # noqa: F401  (before nnsight)
import numpy as np
import pytest
import torch
from accelerate import dispatch_model

from phaseinterp.backends import Read, SetGate, Unit, backend_for
from phaseinterp.backends.tiny import tiny_qwen3
from phaseinterp.families.deepseek_v4 import tiny_deepseek_v4_spec
from phaseinterp.interventions import knockout_logits, knockout_map
from phaseinterp.measure import phase_sweep
from phaseinterp.tasks import RecordLookup
from tests.test_bridges import _louder, _planted

torch.set_num_threads(1)


def split_map(model: torch.nn.Module) -> dict[str, str]:
    """Layer 0 in memory, layer 1, the embeddings and the head offloaded to disk, the rest in memory."""
    offloaded = {"model.embed_tokens", "model.layers.1", "lm_head"}
    names = ["lm_head"] + [f"model.{n}" for n, _ in model.model.named_children() if n != "layers"]
    names += [f"model.layers.{i}" for i in range(len(model.model.layers))]
    return {n: "disk" if n in offloaded else "cpu" for n in names}


@pytest.fixture(scope="module", params=["qwen3", "deepseek_v4"])
def pair(request, tmp_path_factory):
    raw = _louder(tiny_qwen3(seed=0) if request.param == "qwen3" else tiny_deepseek_v4_spec().build(seed=0).hf)
    dispatched = dispatch_model(copy.deepcopy(raw), device_map=split_map(raw),
                                offload_dir=str(tmp_path_factory.mktemp("offload")))
    return raw, dispatched


def test_the_map_really_offloads(pair):
    _, dispatched = pair
    assert dispatched.model.embed_tokens.weight.device.type == "meta"  # loaded from disk at each call
    assert all(p.device.type == "meta" for p in dispatched.model.layers[1].parameters())
    assert all(p.device.type == "cpu" for p in dispatched.model.layers[0].parameters())
    assert backend_for(dispatched).device == torch.device("cpu")


def test_sweep_and_knockout_map_equal_the_undispatched_model(pair):
    raw, dispatched = pair
    task = RecordLookup(vocab_size=raw.config.vocab_size, n_records=8, n_demos=1)
    batch, calib = _planted(raw, task.sample(2, 8, seed=0)), task.sample(2, 8, seed=0, split="calibration")
    curves = [phase_sweep(m, batch, period=4, n_boot=20, n_perm=20, progress=False) for m in (raw, dispatched)]
    assert 0 < curves[0].correct.mean() < 1 and np.array_equal(curves[1].correct, curves[0].correct)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # random weights: some units change nothing at some residues
        maps = [knockout_map(m, batch, calib, n_boot=20, progress=False) for m in (raw, dispatched)]
    assert np.abs(np.nan_to_num(maps[0].values)).max() > 0
    np.testing.assert_allclose(maps[1].values, maps[0].values, atol=1e-5, equal_nan=True)
    # the dispatched model keeps its own path (Qwen3: the KV cache; DeepSeek-V4: full forwards)
    assert maps[1].meta["intervention"]["path"] == maps[0].meta["intervention"]["path"]
    units = backend_for(raw).units("kv_head")
    for a, b in zip(knockout_logits(raw, batch, units, calib)[:2], knockout_logits(dispatched, batch, units, calib)[:2]):
        torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-5)


def test_reads_and_gate_edits_on_an_offloaded_layer(pair):
    raw, dispatched = pair
    ref, got = backend_for(raw), backend_for(dispatched)
    tokens = torch.randint(0, raw.config.vocab_size, (2, 48), generator=torch.Generator().manual_seed(0))
    reads = [Read("head", 1, 0), Read("layer", 1, 0)]
    edits = []
    if got.cfg.gate_branches[1]:  # DeepSeek-V4: the offloaded layer's compressor too
        reads += [Read("gate", 1, 0), Read("gate_logits", 1, 0), Read("entry", 1, 0)]
        edits = [SetGate(Unit("gate", 1, 0), "uniform")]
    logits_ref, values_ref = ref.run(tokens, edits, reads)
    logits, values = got.run(tokens, edits, reads)
    torch.testing.assert_close(logits, logits_ref, atol=1e-5, rtol=1e-5)
    for r in reads:
        torch.testing.assert_close(values[r], values_ref[r], atol=1e-5, rtol=1e-5)


def test_the_remote_recipe_of_the_docs_runs_under_nnsights_local_simulation(tmp_path):
    """docs/devices.md's two-trace knockout, run as written but with `remote="local"` (nnsight
    serializes each trace as for NDIF and runs it here), equals `knockout_logits`."""
    from nnsight import LanguageModel

    from phaseinterp.backends.tiny import word_tokenizer

    doc = (Path(__file__).resolve().parents[1] / "docs" / "devices.md").read_text()
    code = doc.split("<!-- remote recipe -->", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    assert code.count("remote=True") == 2
    raw = _louder(tiny_qwen3(seed=0))
    task = RecordLookup(vocab_size=raw.config.vocab_size, n_records=8, n_demos=1)
    batch, calib = task.sample(1, 8, seed=0), task.sample(1, 8, seed=0, split="calibration")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # LanguageModel is deprecated in nnsight 0.8 (TransformersModel)
        lm = LanguageModel(copy.deepcopy(raw), tokenizer=word_tokenizer(raw.config.vocab_size))
    cfg = backend_for(raw).cfg
    scope = {"lm": lm, "batch": batch, "calib": calib, "layer": 1, "kv_head": 1, "d_head": cfg.d_head,
             "group": cfg.n_heads // cfg.n_kv_heads}
    recipe = tmp_path / "recipe.py"  # nnsight reads a trace's source back from its file
    recipe.write_text(code.replace("remote=True", 'remote="local"'))
    exec(compile(recipe.read_text(), str(recipe), "exec"), scope)
    clean, ko, _ = knockout_logits(raw, batch, [Unit("kv_head", 1, 1)], calib)
    assert (ko[0] - clean).abs().max() > 1e-3
    torch.testing.assert_close(scope["knocked"], ko[0], atol=1e-5, rtol=1e-5)
