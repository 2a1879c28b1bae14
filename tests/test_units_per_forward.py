"""Interventions that stack one copy of the batch per unit (knockout, patching, `run_units` through full forwards)
bound each forward by `backends.prompts.FORWARD_TOKENS` tokens as well as `max_rows` rows, so long prompts do not
put thousands of rows into one forward; the final-position paths forward one position per row and keep `max_rows`
alone. Same logits either way."""

import pytest
import torch

from phaseinterp.backends import backend_for, prompts
from phaseinterp.backends.prompts import units_per_forward
from phaseinterp.backends.tiny import tiny_qwen3
from phaseinterp.interventions import knockout_logits, run_units
from phaseinterp.tasks import RecordLookup
from phaseinterp.units import head_units
from tests.helpers import COMPRESSED_VARIANTS, noisy_model, tiny_cfg


def test_units_per_forward_bounds_rows_and_tokens(monkeypatch):
    assert units_per_forward(8, 2048) == 256
    assert units_per_forward(8, 2048, seq_len=4096) == 65536 // 4096 // 8 == 2
    assert units_per_forward(3, 2048, seq_len=64) == 1024 // 3
    assert units_per_forward(100, 50, seq_len=10) == 1  # a batch above both bounds still runs whole
    monkeypatch.setattr(prompts, "FORWARD_TOKENS", 40)
    assert units_per_forward(2, 100, seq_len=10) == 2  # 4 rows of 10 tokens
    assert units_per_forward(2, 100, seq_len=41) == 1  # longer than the budget: one unit
    assert units_per_forward(2, 100) == 50  # final-position paths: rows only


def rows_per_forward(module: torch.nn.Module, call) -> tuple[object, list[int]]:
    seen: list[int] = []
    handle = module.register_forward_hook(lambda m, a, out: seen.append((out[0] if isinstance(out, tuple) else out).shape[0]))
    try:
        return call(), seen
    finally:
        handle.remove()


@pytest.fixture(scope="module")
def ours():
    model = noisy_model(tiny_cfg(["full", COMPRESSED_VARIANTS["w4s4-scalar"], "full"]), seed=1)
    task = RecordLookup(vocab_size=97, n_records=6, n_demos=1)
    return model, task.sample(2, 4, seed=0), task.sample(2, 4, seed=0, split="calibration")


def test_hooks_knockout_forwards_at_most_the_token_budget(ours, monkeypatch):
    model, batch, calib = ours
    units = head_units(model.cfg, "kv_head")  # 6 units
    B, T = batch.tokens.shape
    call = lambda: knockout_logits(model, batch, units, calib, method="hooks", progress=False)[1]  # noqa: E731
    whole, seen = rows_per_forward(model.blocks[0], call)
    assert seen[-1] == B * len(units)  # default budget: every unit in one forward after the clean run
    monkeypatch.setattr(prompts, "FORWARD_TOKENS", 2 * B * T)
    chunked, seen = rows_per_forward(model.blocks[0], call)
    assert seen[1:] == [2 * B] * 3, seen  # the clean run, then 2 units per forward
    torch.testing.assert_close(chunked, whole, atol=1e-5, rtol=1e-5)
    edits = [{"blocks.1.attn.hook_z": lambda z: z * 0}] * 5  # the backend's own chunking, no bar around it
    _, seen = rows_per_forward(model.blocks[0], lambda: backend_for(model).run_units(batch.tokens, batch.query_pos, edits))
    assert seen == [2 * B, 2 * B, B], seen
    incremental = lambda: knockout_logits(model, batch, units, calib, method="incremental", progress=False)[1]  # noqa: E731
    torch.testing.assert_close(incremental(), whole, atol=1e-4, rtol=1e-4)


def test_hf_run_units_forwards_at_most_the_token_budget(monkeypatch):
    hf = tiny_qwen3()
    backend = backend_for(hf)
    tokens = torch.randint(0, 512, (3, 24), generator=torch.Generator().manual_seed(0))
    qpos = torch.tensor([23, 20, 17])
    zero = lambda layer: {f"blocks.{layer}.attn.hook_z": lambda z: torch.zeros_like(z)}  # noqa: E731
    edits = [{}, zero(0), zero(1), zero(0) | zero(1), zero(1)]
    call = lambda: run_units(backend, tokens, qpos, edits, progress=False)  # noqa: E731
    whole, seen = rows_per_forward(hf.model.layers[0], call)
    assert seen == [3 * 5]
    monkeypatch.setattr(prompts, "FORWARD_TOKENS", 2 * 3 * 24 + 5)
    chunked, seen = rows_per_forward(hf.model.layers[0], call)
    assert seen == [6, 6, 3], seen
    assert rows_per_forward(hf.model.layers[0], lambda: backend.run_units(tokens, qpos, edits))[1] == [6, 6, 3]
    torch.testing.assert_close(chunked, whole, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(whole[1], whole[0])  # the edits change the logits
