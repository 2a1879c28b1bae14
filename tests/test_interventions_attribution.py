"""Attribution patching: exact on a model that is linear in the patched activation, first-order
elsewhere; sign convention (source - base) * grad at the base run."""

import pytest
import torch

from phaseinterp import CompressionConfig
from phaseinterp.interventions import Pairing, attribution_patching, logit_diff, run_units
from phaseinterp.interventions.runner import capture, final_logits
from phaseinterp.model.layers import RMSNorm
from phaseinterp.tasks import RecordLookup
from tests.helpers import noisy_model, tiny_cfg


def linear_model():
    """One compressed layer whose logits are linear in z and in the value-gate weights: every
    RMSNorm is a constant scale (eps = 1e8 dwarfs mean(x^2); weights 1e4 undo the 1e-4), the MLP
    writes nothing, and value gates do not touch the attention pattern (separate K/V)."""
    cc = CompressionConfig(window=4, stride=4, local_window=3)
    model = noisy_model(tiny_cfg([cc], norm_eps=1e8), seed=5)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, RMSNorm):
                m.weight.fill_(1e4)
        model.blocks[0].mlp.W_out.zero_()
    return model


@pytest.fixture(scope="module")
def pair():
    task = RecordLookup(vocab_size=97, n_records=8, n_demos=2)
    return Pairing.custom(task.sample(2, 4, seed=0), task.sample(2, 4, seed=1))


def slot_edit(source, index):
    def edit(x):
        x = x.clone()
        x[index] = source[index]
        return x
    return edit


def check(model, pair, name, units):
    """Attribution summed over each unit's elements equals the exact patching effect per row."""
    clean, corrupt = pair.clean, pair.corrupt
    answer, foil = clean.answer, corrupt.answer
    metric = lambda lg: logit_diff(lg, answer, foil)  # noqa: E731
    src = capture(model, clean.tokens, [name])[name]
    attr, base = attribution_patching(model, corrupt.tokens, corrupt.query_pos, {name: src}, metric)
    torch.testing.assert_close(base, metric(final_logits(model, corrupt.tokens, corrupt.query_pos)))
    est = torch.stack([attr[name][idx].flatten(1).sum(1) for idx in units])
    exact = metric(run_units(model, corrupt.tokens, corrupt.query_pos, [{name: slot_edit(src, i)} for i in units]))
    return est, exact - base[None]


def test_attribution_equals_exact_patching_when_the_metric_is_linear(pair):
    model = linear_model()
    heads = [(slice(None), slice(None), h) for h in range(4)]  # z of one query head at all positions
    est, exact = check(model, pair, "blocks.0.attn.hook_z", heads)
    assert exact.abs().max() > 0.1
    torch.testing.assert_close(est, exact, atol=1e-3 * float(exact.abs().max()), rtol=1e-3)
    slots = [(slice(None), slice(None), o, h) for o in range(4) for h in range(2)]  # value gate (offset, kv head)
    est, exact = check(model, pair, "blocks.0.attn.compress_v.hook_gate", slots)
    assert exact.abs().max() > 0.01
    torch.testing.assert_close(est, exact, atol=1e-3 * float(exact.abs().max()), rtol=1e-3)


def test_attribution_is_only_first_order_through_the_softmax(pair):
    model = linear_model()
    slots = [(slice(None), slice(None), o, h) for o in range(4) for h in range(2)]
    est, exact = check(model, pair, "blocks.0.attn.compress_k.hook_gate", slots)  # keys enter the softmax
    assert (est - exact).abs().max() > 1e-3 * float(exact.abs().max())
    assert torch.corrcoef(torch.stack([est.flatten(), exact.flatten()]))[0, 1] > 0.5


def test_sign_convention_is_source_minus_base(pair):
    model = linear_model()
    clean, corrupt = pair.clean, pair.corrupt
    name = "blocks.0.attn.hook_z"
    metric = lambda lg: logit_diff(lg, clean.answer, corrupt.answer)  # noqa: E731
    src = capture(model, clean.tokens, [name])[name]
    base = capture(model, corrupt.tokens, [name])[name]
    forward, _ = attribution_patching(model, corrupt.tokens, corrupt.query_pos, {name: src}, metric)
    backward, _ = attribution_patching(model, corrupt.tokens, corrupt.query_pos, {name: 2 * base - src}, metric)
    torch.testing.assert_close(forward[name], -backward[name])  # reflecting the source flips the sign
    total = forward[name].flatten(1).sum(1)  # all of z at once: exact by linearity, with its sign
    base_m = metric(final_logits(model, corrupt.tokens, corrupt.query_pos))
    patched = metric(run_units(model, corrupt.tokens, corrupt.query_pos, [{name: lambda x: src.clone()}]))[0]
    assert (patched - base_m).abs().max() > 0.1
    torch.testing.assert_close(total, patched - base_m, atol=1e-3 * float((patched - base_m).abs().max()), rtol=1e-3)
