"""Final-position knockout and patching through the decoding cache (`families.deepseek_v4.decode_final`):
DeepSeek-V4 (sliding, CSA with the lightning indexer choosing among the prefix's entries, HCA) and
DSA equal to one full forward per unit, with query positions where CSA and HCA windows close."""

import dataclasses
import warnings

import numpy as np
import pytest
import torch

from phaseinterp.backends import DeepseekV4Backend
from phaseinterp.backends.tiny import tiny_deepseek_v4
from phaseinterp.families.deepseek_v4.decode_final import tile_cache
from phaseinterp.interventions import Pairing, activation_patching, head_units, knockout_logits, knockout_map
from phaseinterp.tasks import RecordLookup
from tests.helpers import assert_final_path_equals_hooks


@pytest.fixture(scope="module")
def task():
    return RecordLookup(vocab_size=512, n_records=12, n_demos=1)  # 39-token prompts


@pytest.fixture(scope="module")
def v4():
    model = tiny_deepseek_v4(seed=0, index_topk=4)  # fewer than the prefix's CSA entries: the indexer chooses
    with torch.no_grad():
        for p in model.parameters():  # larger weights: every head moves the logits. The indexer's and the
            p.mul_(2)  # experts' top-k are discrete: a near tie can flip under float noise (~1e-5) as between
            # any two exact implementations; this seed and scale have none
    return DeepseekV4Backend(model)


def closing(batch):
    """Query positions 31 (a CSA m=4 and an HCA m=16 window close there), 35 (CSA closes), 32..38."""
    return dataclasses.replace(batch, query_pos=torch.tensor([31, 35, 38, 32, 36, 33, 34, 37])[: len(batch)])


def test_v4_knockout_through_the_decoding_cache_equals_full_forwards(v4, task):
    assert v4.incremental_ok() and v4.incremental_fallback() is None
    batch = closing(task.sample(2, 4, seed=0))
    calib = task.sample(2, 4, seed=0, split="calibration")
    units = head_units(v4.cfg, "kv_head") + head_units(v4.cfg, "head")
    assert_final_path_equals_hooks(v4, batch, units, calib, clean_atol=1e-4, moved=1e-1)
    _, fast, _ = knockout_logits(v4, batch, units[:2], "self", progress=False)  # the decoded run's own z
    _, slow, _ = knockout_logits(v4, batch, units[:2], "self", method="hooks", progress=False)
    torch.testing.assert_close(fast, slow, atol=1e-4, rtol=1e-4)
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in v4.model.modules())


def test_v4_maps_and_patching_record_the_decode_path(v4, task):
    batch, calib = task.sample(2, 4, seed=0), task.sample(2, 4, seed=0, split="calibration")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # random weights: accuracies near 0
        fast = knockout_map(v4, batch, calib, n_boot=50, progress=False)
        slow = knockout_map(v4, batch, calib, n_boot=50, method="hooks", progress=False)
    assert fast.meta["intervention"]["path"] == "decode_cache" and slow.meta["intervention"]["path"] == "full_forward"
    np.testing.assert_array_equal(fast.extras["acc_knockout"], slow.extras["acc_knockout"])
    pair = Pairing.custom(closing(batch), closing(task.sample(2, 4, seed=1)))
    kw = dict(unit="z", level="kv_head", rel_min=0, change="normalized", progress=False)
    p_fast = activation_patching(v4, pair, **kw)
    p_slow = activation_patching(v4, pair, method="hooks", **kw)
    assert p_fast.meta["intervention"]["path"] == "decode_cache"
    assert np.isfinite(p_fast.values).all()
    np.testing.assert_allclose(p_fast.values, p_slow.values, atol=1e-4, rtol=1e-3)


def test_a_tiled_cache_leaves_the_base_state_alone(v4, task):
    tokens = task.sample(1, 4, seed=0).tokens[:2, :20]
    with torch.no_grad():
        cache = v4.model(input_ids=tokens, use_cache=True).cache
    before = [{k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in vars(layer).items()} for layer in cache.layers]
    tiled = tile_cache(cache, 3)
    with torch.no_grad():
        v4.model(input_ids=tokens[:, :1].repeat(3, 1), cache=tiled, use_cache=True,
                 position_ids=torch.full((6, 1), 20))
    for layer, old in zip(cache.layers, before):
        for k, v in old.items():
            if isinstance(v, torch.Tensor):
                assert torch.equal(getattr(layer, k), v), k
    assert tiled.layers[0].keys.shape[0] == 6 and cache.layers[0].keys.shape[0] == 2
