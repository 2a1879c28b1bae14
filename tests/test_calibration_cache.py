"""The calibration cache: one forward per (weights, calibration batch), forgotten when weights change."""

import torch

from phaseinterp import HookedCompressedTransformer
from phaseinterp.interventions import calibrate, calibrate_cached, clear_calibrations, knockout_map
from phaseinterp.tasks import RecordLookup
from tests.helpers import tiny_cfg
from phaseinterp.config import CompressionConfig

torch.set_num_threads(1)


def _setup():
    model = HookedCompressedTransformer(tiny_cfg([CompressionConfig(window=4, stride=4, local_window=4)] * 2), seed=0).eval()
    task = RecordLookup(vocab_size=model.cfg.vocab_size, n_records=8, n_demos=2)
    return model, task.sample(2, 4, seed=0), task.sample(2, 4, seed=0, split="calibration")


def count_forwards(model):
    calls = []
    handle = model.blocks[0].register_forward_hook(lambda *a: calls.append(1))
    return calls, handle


def test_second_map_reuses_the_calibration_and_weight_edits_invalidate_it():
    clear_calibrations()
    model, batch, calib = _setup()
    first = calibrate_cached(model, calib)
    calls, handle = count_forwards(model)
    again = calibrate_cached(model, calib)
    assert again is first and not calls  # no forward
    torch.testing.assert_close(first.z, calibrate(model, calib).z)
    calls.clear()
    with torch.no_grad():
        model.blocks[0].attn.W_V.mul_(2.0)  # an in-place edit bumps the version counter
    edited = calibrate_cached(model, calib)
    handle.remove()
    assert calls and edited is not first
    assert not torch.allclose(edited.z[:, 0], first.z[:, 0])
    other = calibrate_cached(model, RecordLookup(vocab_size=model.cfg.vocab_size, n_records=8, n_demos=2).sample(
        2, 4, seed=1, split="calibration"))
    assert other is not edited and not torch.equal(other.z, edited.z)


def test_hooked_models_are_not_cached_and_maps_agree_with_an_explicit_calibration():
    clear_calibrations()
    model, batch, calib = _setup()
    with model.hooks(fwd_hooks=[("blocks.0.hook_resid_pre", lambda x, hook: x * 0.5)]):
        hooked = calibrate_cached(model, calib)
    plain = calibrate_cached(model, calib)
    assert not torch.allclose(hooked.z, plain.z)  # the hooked forward was not served from the cache
    a = knockout_map(model, batch, calib, n_boot=50)
    b = knockout_map(model, batch, calibrate(model, calib), n_boot=50)
    assert torch.equal(torch.as_tensor(a.values), torch.as_tensor(b.values))


def test_long_prompts_calibrate_in_forwards_of_at_most_forward_tokens(monkeypatch):
    """`calibrate` bounds each forward by `FORWARD_TOKENS` as well as `max_rows`: the same head outputs."""
    from phaseinterp.backends import prompts

    model, _, calib = _setup()
    whole = calibrate(model, calib)
    T = calib.tokens.shape[1]
    rows_seen: list[int] = []
    handle = model.blocks[0].register_forward_hook(lambda m, a, out: rows_seen.append(out.shape[0]))
    try:
        for budget, max_rows, chunks in ((2 * T + 1, None, [2, 2, 2, 2]), (3 * T, 2, [2, 2, 2, 2]), (T - 1, 5, [1] * 8)):
            rows_seen.clear()
            monkeypatch.setattr(prompts, "FORWARD_TOKENS", budget)
            got = calibrate(model, calib, max_rows=max_rows)
            assert rows_seen == chunks, (budget, max_rows)
            torch.testing.assert_close(got.z, whole.z, atol=1e-6, rtol=1e-6)
    finally:
        handle.remove()
