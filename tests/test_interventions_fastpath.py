"""The incremental final-position path gives the numbers of full hooked forwards, on every
compressor variant and full attention, including queries whose own window just closed."""

import pytest
import torch

from phaseinterp.backends.incremental import FinalPositionRun
from phaseinterp.interventions import (calibrate, final_logits, head_units, is_correct,
                                       knockout_logits, run_units)
from phaseinterp.tasks import RecordLookup
from tests.helpers import COMPRESSED_VARIANTS, noisy_model, tiny_cfg

VARIANTS = {**COMPRESSED_VARIANTS, "full": "full"}


def z_edit(layer, mask, values, qpos):
    rows = torch.arange(len(qpos))

    def edit(z):
        z = z.clone()
        zt = z[rows, qpos]
        zt[:, mask] = values[:, mask]
        z[rows, qpos] = zt
        return z
    return {f"blocks.{layer}.attn.hook_z": edit}


def resid_edit(layer, values, qpos):
    rows = torch.arange(len(qpos))

    def edit(x):
        x = x.clone()
        x[rows, qpos] = values
        return x
    return {f"blocks.{layer}.hook_resid_pre": edit}


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_incremental_equals_hooked_forwards(name):
    spec = VARIANTS[name]
    model = noisy_model(tiny_cfg(["full", spec, spec]), seed=3)
    gen = torch.Generator().manual_seed(7)
    T = 25
    tokens = torch.randint(0, 97, (6, T), generator=gen)
    # last token; windows closing at t (23: W4S4, W8S4, csa; 21: W6S4; 24: HCA W5); csa entry 0 closes at 3
    qpos = torch.tensor([T - 1, 23, 21, 3, 11, T - 1])
    run = FinalPositionRun(model, tokens, qpos)
    torch.testing.assert_close(run.logits, final_logits(model, tokens, qpos), atol=1e-5, rtol=1e-5)
    layers = [0, 1, 2, 2]
    masks = torch.tensor([[1, 0, 0, 0], [0, 1, 1, 0], [1, 1, 1, 1], [0, 0, 0, 1]], dtype=torch.bool)
    values = torch.randn(4, 6, 4, 8, generator=gen)
    fast = run.run_z(layers, masks, values, max_rows=12)  # 2 units per chunk
    slow = run_units(model, tokens, qpos, [z_edit(l, m, v, qpos) for l, m, v in zip(layers, masks, values)])
    torch.testing.assert_close(fast, slow, atol=1e-4, rtol=1e-4)
    assert (slow - run.logits).abs().amax() > 1e-2  # the edits do change the output
    rvals = torch.randn(3, 6, 32, generator=gen)
    fast_r = run.run_resid([0, 1, 2], rvals)
    slow_r = run_units(model, tokens, qpos, [resid_edit(l, v, qpos) for l, v in zip([0, 1, 2], rvals)])
    torch.testing.assert_close(fast_r, slow_r, atol=1e-4, rtol=1e-4)


def test_base_activations_match_the_cache():
    model = noisy_model(tiny_cfg([COMPRESSED_VARIANTS["w4s4-scalar"]] * 2), seed=1)
    tokens = torch.randint(0, 97, (3, 20), generator=torch.Generator().manual_seed(0))
    qpos = torch.tensor([19, 15, 7])
    run = FinalPositionRun(model, tokens, qpos)
    _, cache = model.run_with_cache(tokens)
    rows = torch.arange(3)
    torch.testing.assert_close(run.base_z(1), cache["blocks.1.attn.hook_z"][rows, qpos])
    torch.testing.assert_close(run.base_resid(1), cache["blocks.1.hook_resid_pre"][rows, qpos])


@pytest.mark.parametrize("spec", ["full", COMPRESSED_VARIANTS["w8s4-vector-tied"]], ids=["full", "w8s4-tied"])
def test_knockout_fast_and_naive_paths_agree(spec):
    model = noisy_model(tiny_cfg([spec, spec], vocab_size=128), seed=2)
    task = RecordLookup(vocab_size=128, n_records=8, n_demos=2)
    batch, calib = task.sample(4, 4, seed=0), calibrate(model, task.sample(4, 4, seed=0, split="calibration"))
    units = head_units(model.cfg, "kv_head") + head_units(model.cfg, "head")
    for replacement in ("mean", "resample"):
        c1, fast, m1 = knockout_logits(model, batch, units, calib, replacement=replacement, method="incremental")
        c2, slow, m2 = knockout_logits(model, batch, units, calib, replacement=replacement, method="hooks")
        assert (m1, m2) == ("incremental", "hooks")
        torch.testing.assert_close(fast, slow, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(c1, c2, atol=1e-5, rtol=1e-5)
        margin = slow.topk(2, -1).values.diff(dim=-1).abs()[..., 0] > 1e-3  # ignore near-ties
        assert torch.equal(is_correct(fast, batch.answers)[margin], is_correct(slow, batch.answers)[margin])


def test_patching_fast_and_hooks_paths_agree():
    import numpy as np

    from phaseinterp.interventions import Pairing, activation_patching

    model = noisy_model(tiny_cfg([COMPRESSED_VARIANTS["w8s4-vector-tied"], "full"], vocab_size=128), seed=4)
    task = RecordLookup(vocab_size=128, n_records=8, n_demos=2)
    pair = Pairing.custom(task.sample(4, 4, seed=0), task.sample(4, 4, seed=1))
    for unit, kw in [("z", {"level": "head"}), ("resid", {"positions": ["final"]})]:
        fast = activation_patching(model, pair, unit=unit, method="incremental", rel_min=0, **kw, change="normalized")
        slow = activation_patching(model, pair, unit=unit, method="hooks", rel_min=0, **kw, change="normalized")
        assert fast.meta["intervention"]["method"] == "incremental"
        assert np.isfinite(fast.values).all() and np.abs(fast.values).max() > 0.05
        np.testing.assert_allclose(fast.values, slow.values, atol=1e-4, rtol=1e-3)
