"""Mitigation options change what they claim to change and leave causality intact."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from phaseinterp import CompressionConfig
from phaseinterp.interventions import knockout_map
from phaseinterp.model.compressor import window_positions
from phaseinterp.tasks import RecordLookup
from phaseinterp.train import Mixture, TrainConfig, train
from phaseinterp.train.mitigation import (Mitigation, check_mitigation, coverage_penalty, draw_offsets,
                                          mitigated_forward, recorded_key_gates, shifted_grid,
                                          static_entropy_penalty)
from tests.helpers import noisy_model, tiny_cfg

W4S4 = CompressionConfig(window=4, stride=4, local_window=6)


def _gates(model, tokens, branch="compress_k"):
    _, cache = model.run_with_cache(tokens, names_filter=[f"blocks.0.attn.{branch}.hook_gate"])
    return cache[f"blocks.0.attn.{branch}.hook_gate"]


@pytest.mark.parametrize("offset", [1, 2, 3])
def test_shifted_grid_moves_window_boundaries_and_is_undone(offset):
    model = noisy_model(tiny_cfg([W4S4, W4S4]))
    tokens = torch.randint(0, 97, (2, 20), generator=torch.Generator().manual_seed(0))
    before = model(tokens)
    with shifted_grid(model, offset):
        gate = _gates(model, tokens)
        assert model.blocks[0].attn.cc.grid_offset == offset
        shifted = model(tokens)
    # the first window now starts at -offset: exactly `offset` slots carry no weight
    assert torch.equal((gate[:, 0] == 0).all(-1).all(0), torch.arange(4) < offset)
    assert (gate[:, 1:] > 0).all()
    assert not torch.allclose(shifted, before)
    torch.testing.assert_close(model(tokens), before, atol=0, rtol=0)
    assert model.blocks[0].attn.compress_k.cc.grid_offset == 0


def test_chunkings_keep_k_entries_per_stride_each_from_its_own_maps():
    cc = dataclasses.replace(W4S4, chunkings=2)
    model = noisy_model(tiny_cfg([cc]))
    comp = model.blocks[0].attn.compress_k
    tokens = torch.randint(0, 97, (2, 33), generator=torch.Generator().manual_seed(1))
    out = lambda: model.run_with_cache(tokens, names_filter=["blocks.0.attn.compress_k.hook_out"])[1][  # noqa: E731
        "blocks.0.attn.compress_k.hook_out"]
    assert out().shape[1] == cc.n_entries(33) == (33 - 4) // 2 + 1 == 15  # windows every S/k = 2 tokens
    assert cc.entries_per_token == 0.5 and W4S4.entries_per_token == 0.25
    assert comp.W_C.shape[0] == 2 * 4 and comp.b_Z.shape[0] == 2 * 4
    with torch.no_grad():
        comp.W_C[4:] = 0  # chunking 1's payload maps
    e = out()
    assert (e[:, 1::2] == 0).all() and (e[:, 0::2].abs() > 0).all()
    starts = window_positions(cc, 33)[:, 0]
    assert starts.tolist() == list(range(0, 29, 2))


def test_bad_mitigation_options_raise_clear_errors():
    with pytest.raises(ValueError, match=r"grid_offset=4 is invalid"):
        dataclasses.replace(W4S4, grid_offset=4)
    with pytest.raises(ValueError, match=r"chunkings=3 is invalid: allowed a divisor of stride \(4\)"):
        dataclasses.replace(W4S4, chunkings=3)
    with pytest.raises(ValueError, match=r"coverage_weight=-1 is invalid"):
        Mitigation(coverage_weight=-1)
    with pytest.raises(ValueError, match=r"offset=-1 is invalid"):
        with shifted_grid(noisy_model(tiny_cfg([W4S4])), -1):
            pass
    one_unit = noisy_model(tiny_cfg([W4S4, "full"], n_kv_heads=1))
    with pytest.raises(ValueError, match=r"needs at least two learned key-gate units"):
        check_mitigation(one_unit, Mitigation(coverage_weight=0.1))
    with pytest.raises(ValueError, match=r"without compressed layers: it changes nothing"):
        check_mitigation(noisy_model(tiny_cfg(["full"])), Mitigation(random_offsets=True))
    uniform = dataclasses.replace(W4S4, gate="uniform")
    with pytest.raises(ValueError, match=r"uniform gates have no parameters"):
        check_mitigation(noisy_model(tiny_cfg([uniform])), Mitigation(entropy_weight=0.1))


def test_random_offsets_forward_each_row_in_its_own_grid():
    model = noisy_model(tiny_cfg([W4S4, W4S4]))
    tokens = torch.randint(0, 97, (6, 20), generator=torch.Generator().manual_seed(2))
    offsets = np.array([0, 3, 1, 3, 2, 0])
    logits, reg = mitigated_forward(model, model, tokens, Mitigation(random_offsets=True), offsets)
    assert reg == 0.0
    for i, o in enumerate(offsets):
        with shifted_grid(model, int(o)):
            torch.testing.assert_close(logits[i], model(tokens[i:i + 1])[0], atol=1e-5, rtol=1e-5)
    drawn = np.concatenate([draw_offsets(4, 0, step, 32) for step in range(3)])
    assert set(drawn) == {0, 1, 2, 3} and np.array_equal(draw_offsets(4, 0, 1, 32), draw_offsets(4, 0, 1, 32))


def _two_heads_same_gate(eps: float, peak: float = 2.0) -> torch.nn.Module:
    """One W4/S4 layer, 2 KV heads whose key gates are identical up to `eps`, peaked on offset 1."""
    model = noisy_model(tiny_cfg([W4S4], n_kv_heads=2), seed=3)
    comp = model.blocks[0].attn.compress_k
    with torch.no_grad():
        comp.W_Z.mul_(0.05)
        comp.W_Z[..., 1] = comp.W_Z[..., 0]
        comp.b_Z.zero_()
        comp.b_Z[1] = peak
        comp.b_Z[:, 1] += eps * torch.tensor([1.0, -1.0, 0.5, -0.5])
    return model


def _profiles(model, tokens):
    with recorded_key_gates(model) as gates:
        model(tokens)
    from phaseinterp.train.mitigation import _phase_profiles

    comp, gate = gates[0]
    return torch.stack(_phase_profiles(gate, comp)).detach(), gates


def test_coverage_regularizer_pushes_two_identical_heads_apart():
    model = _two_heads_same_gate(eps=1e-3)
    tokens = torch.randint(0, 97, (4, 32), generator=torch.Generator().manual_seed(4))
    comp = model.blocks[0].attn.compress_k
    opt = torch.optim.SGD([comp.W_Z, comp.b_Z], lr=2.0)
    p0, _ = _profiles(model, tokens)
    start_distance = float((p0[0] - p0[1]).abs().sum())
    start_overlap = float(p0[0] @ p0[1])
    for _ in range(150):
        _, gates = _profiles(model, tokens)
        loss = coverage_penalty(gates)
        opt.zero_grad()
        loss.backward()
        opt.step()
    p1, _ = _profiles(model, tokens)
    assert start_distance < 0.01
    assert float((p1[0] - p1[1]).abs().sum()) > 50 * start_distance
    assert float(p1[0] @ p1[1]) < 0.5 * start_overlap


def test_entropy_regularizer_spreads_a_statically_concentrated_gate():
    model = _two_heads_same_gate(eps=0.0, peak=4.0)
    tokens = torch.randint(0, 97, (4, 32), generator=torch.Generator().manual_seed(5))
    comp = model.blocks[0].attn.compress_k
    opt = torch.optim.SGD([comp.W_Z, comp.b_Z], lr=1.0)
    values = []
    for _ in range(40):
        with recorded_key_gates(model) as gates:
            model(tokens)
        loss = static_entropy_penalty(gates)
        values.append(float(loss.detach()))
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert values[0] > 0.5 and values[-1] < 0.5 * values[0]


def test_regularized_and_offset_training_runs_and_records_its_mitigation(tmp_path):
    cfg = tiny_cfg([W4S4, W4S4], vocab_size=64, n_ctx=32)
    mix = Mixture(vocab_size=64, seq_len=32, max_records=4, min_demos=0, max_demos=2)
    mit = Mitigation(random_offsets=True, coverage_weight=0.5, entropy_weight=0.5)
    tcfg = TrainConfig(steps=3, batch_size=4, warmup_steps=1, mixture=mix, device="cpu", mitigation=mit,
                       log_every=1)
    result = train(cfg, tcfg, tmp_path / "run", progress=False)
    assert result.step == 3 and all(np.isfinite(m["loss"]) for m in result.metrics)
    import json

    assert json.loads((tmp_path / "run" / "run.json").read_text())["train_config"]["mitigation"] == mit.to_dict()
    with pytest.raises(ValueError, match=r"field 'mitigation.coverage_weight' is 0.5 in the checkpoint but 0.0"):
        train(cfg, tcfg.replace(mitigation=Mitigation()), tmp_path / "run", resume="latest", progress=False)


@pytest.mark.parametrize("cc", [dataclasses.replace(W4S4, grid_offset=2, chunkings=2),
                                CompressionConfig(window=8, stride=4, gate="vector", kv="tied", grid_offset=1,
                                                  local_window=5)])
def test_fast_knockout_equals_hooked_knockout_on_shifted_and_multi_offset_grids(cc):
    model = noisy_model(tiny_cfg([cc, cc], vocab_size=128), seed=6)
    task = RecordLookup(vocab_size=128, n_records=4, n_demos=1, seq_len=32)
    batch = task.sample(4, 4, seed=0)
    calib = task.sample(4, 4, seed=0, split="calibration")
    fast = knockout_map(model, batch, calib, method="incremental", n_boot=10)
    slow = knockout_map(model, batch, calib, method="hooks", n_boot=10)
    np.testing.assert_allclose(fast.extras["acc_knockout"], slow.extras["acc_knockout"])


def test_gate_cycling_rolls_each_chunkings_bias_on_its_own():
    from phaseinterp.interventions import cycled_gates

    model = noisy_model(tiny_cfg([dataclasses.replace(W4S4, chunkings=2)]))
    comp = model.blocks[0].attn.compress_k
    before = comp.b_Z.detach().clone()
    with cycled_gates(model, 1):
        rolled = comp.b_Z.detach().clone()
    torch.testing.assert_close(rolled[:4], torch.roll(before[:4], 1, 0))
    torch.testing.assert_close(rolled[4:], torch.roll(before[4:], 1, 0))
    torch.testing.assert_close(comp.b_Z.detach(), before)


def test_weak_phases_of_a_trained_model_move_with_its_chunk_grid():
    """Shifting the grid back by o turns residue r + o's accuracy into residue r's: the weak phases
    are tied to window boundaries, which is what random offsets during training randomize."""
    import json
    from pathlib import Path

    import phaseinterp
    from phaseinterp.measure import phase_sweep

    ckpt = Path(__file__).resolve().parents[1] / "assets" / "checkpoints" / "w4s4.safetensors"
    model = phaseinterp.load(ckpt).eval()
    task = RecordLookup(**json.loads(ckpt.with_suffix(".json").read_text())["data"]["eval_task"])
    batch = task.sample(16, 8, seed=0)
    base = phase_sweep(model, batch, n_boot=10, n_perm=10, progress=False).accuracy
    assert base.max() - base.min() > 0.8
    for o in (1, 2, 3):
        with shifted_grid(model, o):
            acc = phase_sweep(model, batch, n_boot=10, n_perm=10, progress=False).accuracy
        assert np.abs(acc - np.roll(base, -o)).max() < 0.15, o
