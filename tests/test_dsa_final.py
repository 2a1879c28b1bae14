"""DSA's final-position path (`families.dsa.final`): knockout and patching equal to one full forward per
unit on tiny random DeepseekV32 and GLM-MoE-DSA models (a shared-selection layer, an MoE layer, eager and
SDPA masks), prompts longer than `index_topk` so that the recomputed selection drops keys, rows at
different query positions (the indexer's ReLU scores tie at the k-th place, and a one-query row over t + 1 keys
instead of the full forward's T breaks those ties differently: logits off by ~1 at rows before T - 1); active
selection edits fall back."""

import dataclasses
import warnings

import numpy as np
import pytest
import torch

from phaseinterp.families.dsa import tiny_dsa_spec
from phaseinterp.families.dsa.backend import DSABackend, recent_keys
from phaseinterp.families.dsa.indexer import indexer_hooks
from phaseinterp.interventions import Pairing, activation_patching, head_units, knockout_logits, knockout_map
from phaseinterp.tasks import RecordLookup
from tests.helpers import assert_final_path_equals_hooks

CONFIGS = {
    "v32": dict(model_type="deepseek_v32", n_layers=3, first_k_dense_replace=2),  # layer 2 is MoE
    "v32-eager": dict(model_type="deepseek_v32", attn="eager"),  # additive float masks instead of boolean ones
    "glm": dict(model_type="glm_moe_dsa", n_layers=3, indexer_types=["full", "shared", "full"]),
}


def _backend(name: str) -> DSABackend:
    changes = dict(CONFIGS[name])
    attn = changes.pop("attn", None)
    hf = tiny_dsa_spec(128, n_ctx=64, **changes).build(seed=0).hf.eval()
    if attn is not None:
        hf.set_attn_implementation(attn)
    gen = torch.Generator().manual_seed(2)
    with torch.no_grad():  # larger weights: every head moves the logits, and the indexer ranks keys by more than rounding
        for p in hf.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.3, generator=gen)
    return DSABackend(hf)


@pytest.fixture(scope="module")
def task():
    return RecordLookup(vocab_size=128, n_records=12, n_demos=1)  # 39-token prompts: above index_topk = 16


def staggered(batch):
    """Query positions T-1, T-3, T-5, 9 by row: rows whose final positions differ, one with fewer visible keys
    than index_topk (it attends to every key)."""
    T = batch.tokens.shape[1]
    return dataclasses.replace(batch, query_pos=torch.tensor([T - 1, T - 3, T - 5, 9] * 4)[: len(batch)])


def torch_hooks(module: torch.nn.Module) -> int:
    """How many forward hooks the modules hold (a built spec holds the indexer's distillation hooks)."""
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in module.modules())


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_dsa_knockout_at_the_final_position_equals_full_forwards(name, task):
    backend = _backend(name)
    hooks = torch_hooks(backend.model)
    assert backend.incremental_ok() and backend.incremental_fallback() is None
    batch = staggered(task.sample(2, 4, seed=0))
    assert batch.tokens.shape[1] > 2 * backend.index_topk
    calib = task.sample(2, 4, seed=0, split="calibration")
    units = head_units(backend.cfg, "kv_head") + head_units(backend.cfg, "layer")
    assert_final_path_equals_hooks(backend, batch, units, calib)
    _, fast, _ = knockout_logits(backend, batch, units[:3], "self", replacement="zero", progress=False)
    _, slow, _ = knockout_logits(backend, batch, units[:3], "self", replacement="zero", method="hooks", progress=False)
    torch.testing.assert_close(fast, slow, atol=1e-4, rtol=1e-4)
    assert torch_hooks(backend.model) == hooks


def zeroed_at_query(hf, tokens, qpos, layer: int, read: dict | None = None) -> torch.Tensor:
    """Logits at `qpos` of one full forward with every head of `layer` zeroed there (the reference), the
    indexers' selections read into `read`."""
    rows = torch.arange(len(tokens))

    def zero_at_t(module, args):
        z = args[0].clone()
        z[rows, qpos] = 0
        return (z,)

    handle = hf.model.layers[layer].self_attn.o_proj.register_forward_pre_hook(zero_at_t)
    try:
        with torch.no_grad(), indexer_hooks(hf, read={} if read is None else read):
            return hf(input_ids=tokens, use_cache=False).logits[rows, qpos]
    finally:
        handle.remove()


def test_an_edit_below_changes_the_selection_the_path_recomputes(task):
    """The reference for the test above is meaningful: zeroing layer 0's heads at the query changes which
    keys the indexers above select there (the path must rerun them, not reuse the base selection)."""
    backend = _backend("v32")
    hf = backend.model
    batch = task.sample(2, 4, seed=0)
    rows, qpos = torch.arange(len(batch)), batch.query_pos
    base, edited = {}, {}
    with torch.no_grad(), indexer_hooks(hf, read=base):
        hf(input_ids=batch.tokens, use_cache=False)
    ref = zeroed_at_query(hf, batch.tokens, qpos, 0, edited)
    for layer in (1, 2):
        before, after = base[layer]["selected"][rows, qpos], edited[layer]["selected"][rows, qpos]
        assert (before != after).any(-1).all()  # every row's selection moves
        assert (after.sum(-1) == backend.index_topk).all()  # and keeps index_topk of T keys: selection drops keys
    run = backend.final_position_run(batch.tokens, qpos)
    fast = run.run_z([0], torch.ones(1, 4, dtype=torch.bool), torch.zeros(1, len(batch), 4, 16))[0]
    torch.testing.assert_close(fast, ref, atol=1e-4, rtol=1e-4)


def test_dsa_maps_and_patching_take_the_final_position_path(task):
    backend = _backend("glm")
    hooks = torch_hooks(backend.model)
    batch, calib = task.sample(2, 4, seed=0), task.sample(2, 4, seed=0, split="calibration")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # random weights: accuracies near 0
        fast = knockout_map(backend, batch, calib, n_boot=50, progress=False)
        slow = knockout_map(backend, batch, calib, n_boot=50, method="hooks", progress=False)
    assert fast.meta["intervention"]["method"] == "incremental"
    assert fast.meta["intervention"]["path"] == "final_position" and "fallback" not in fast.meta["intervention"]
    assert slow.meta["intervention"]["path"] == "full_forward"
    np.testing.assert_array_equal(fast.extras["acc_knockout"], slow.extras["acc_knockout"])
    np.testing.assert_allclose(fast.values, slow.values, atol=1e-4, equal_nan=True)
    pair = Pairing.custom(staggered(batch), staggered(task.sample(2, 4, seed=1)))
    kw = dict(unit="z", level="kv_head", rel_min=0, change="normalized", progress=False)
    p_fast = activation_patching(backend, pair, **kw)
    p_slow = activation_patching(backend, pair, method="hooks", **kw)
    assert p_fast.meta["intervention"]["path"] == "final_position"
    assert np.isfinite(p_fast.values).all() and np.abs(p_fast.values).max() > 0.05
    np.testing.assert_allclose(p_fast.values, p_slow.values, atol=1e-4, rtol=1e-3)
    assert torch_hooks(backend.model) == hooks


def test_selection_edits_fall_back_to_full_forwards(task):
    backend = _backend("v32-eager")
    batch, calib = task.sample(1, 4, seed=0), task.sample(1, 4, seed=0, split="calibration")
    units = head_units(backend.cfg, "kv_head")[:2]
    with backend.selecting({1: recent_keys()}):
        assert not backend.incremental_ok()  # the path would ignore the edit
        _, _, used = knockout_logits(backend, batch, units, calib, progress=False)
        assert used == "hooks"
        with pytest.raises(ValueError, match="ignores active edits"):
            backend.final_position_run(batch.tokens, batch.query_pos)
    assert backend.incremental_ok()


@pytest.mark.parametrize("name", ["v32", "glm"])
def test_query_positions_with_an_empty_or_tiny_prefix(name):
    backend = _backend(name)
    tokens = torch.randint(1, 128, (4, 30), generator=torch.Generator().manual_seed(3))
    qpos = torch.tensor([0, 1, 29, 16])
    run = backend.final_position_run(tokens, qpos)
    for layer in range(backend.cfg.n_layers):
        fast = run.run_z([layer], torch.ones(1, 4, dtype=torch.bool), torch.zeros(1, 4, 4, 16))[0]
        torch.testing.assert_close(fast, zeroed_at_query(backend.model, tokens, qpos, layer), atol=1e-4, rtol=1e-4)


def test_rows_of_one_prompt_share_one_forward(task):
    """Rows with equal tokens at different query positions (a multi-token answer's rows) run as one row of the
    base forward, one row repeated exactly included; knockout still equals full forwards."""
    backend = _backend("v32")
    batch = task.sample(1, 4, seed=0)
    T = batch.tokens.shape[1]
    idx = torch.cat([torch.arange(len(batch)).repeat(3), torch.tensor([1])])
    rows = dataclasses.replace(batch[idx], query_pos=torch.tensor([T - 1, T - 3, T - 5])[torch.arange(len(idx)) // len(batch) % 3])
    seen = []
    hook = backend.model.model.embed_tokens.register_forward_hook(lambda m, a, out: seen.append(a[0].shape[0]))
    try:
        backend.final_position_run(rows.tokens, rows.query_pos)
    finally:
        hook.remove()
    assert seen == [len(batch)]
    calib = task.sample(2, 4, seed=0, split="calibration")
    assert_final_path_equals_hooks(backend, rows, head_units(backend.cfg, "kv_head"), calib)
