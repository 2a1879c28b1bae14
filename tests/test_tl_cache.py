"""TransformerLens's ActivationCache helpers on our models, each checked against a direct
computation from the cached activations (not against TransformerLens itself)."""

import pytest
import torch

from phaseinterp import HookedCompressedTransformer, preset


@pytest.fixture(params=["tiny-w4s4", "tiny-full", "tiny-deepseek-csa"])
def run(request):
    model = HookedCompressedTransformer(preset(request.param), seed=0).eval()
    tokens = torch.randint(0, model.cfg.vocab_size, (2, 24), generator=torch.Generator().manual_seed(1))
    logits, cache = model.run_with_cache(tokens)
    return model, tokens, logits, cache


def test_decompositions_sum_to_the_residual_stream(run):
    model, _, _, cache = run
    L = model.cfg.n_layers
    final = cache[f"blocks.{L - 1}.hook_resid_post"]
    stack, labels = cache.decompose_resid(return_labels=True)
    assert labels == ["embed"] + [f"{l}_{part}" for l in range(L) for part in ("attn_out", "mlp_out")]
    torch.testing.assert_close(stack.sum(0), final, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(cache.accumulated_resid()[-1], final)
    full = cache.get_full_resid_decomposition(expand_neurons=False)
    torch.testing.assert_close(full.sum(0), final, atol=1e-5, rtol=1e-5)


def test_head_results_sum_to_the_attention_output(run):
    model, _, _, cache = run
    for layer in range(model.cfg.n_layers):
        heads = cache.stack_head_results(layer=layer + 1)[-model.cfg.n_heads:]  # this layer's heads
        z, W_O = cache[f"blocks.{layer}.attn.hook_z"], model.blocks[layer].attn.W_O
        torch.testing.assert_close(heads[1], z[:, :, 1] @ W_O[1])  # head 1's result, directly
        torch.testing.assert_close(heads.sum(0), cache[f"blocks.{layer}.hook_attn_out"], atol=1e-5, rtol=1e-5)


def test_ln_scaling_and_logit_attributions_match_the_logits(run):
    model, _, logits, cache = run
    L = model.cfg.n_layers
    resid = cache[f"blocks.{L - 1}.hook_resid_post"][:, -1]
    scaled = cache.apply_ln_to_stack(resid[None], pos_slice=-1)[0]
    torch.testing.assert_close(scaled, resid / (resid.pow(2).mean(-1, keepdim=True) + model.cfg.norm_eps).sqrt())
    answer, foil = torch.tensor([3, 4]), torch.tensor([5, 6])
    attrs = cache.logit_attrs(cache.decompose_resid(pos_slice=-1), tokens=answer, incorrect_tokens=foil, pos_slice=-1)
    rows = torch.arange(2)
    diff = logits[rows, -1, answer] - logits[rows, -1, foil]
    torch.testing.assert_close(attrs.sum(0), diff, atol=1e-4, rtol=1e-4)  # the components add up to the logit difference
    with pytest.raises(ValueError, match="token ids out of range: allowed 0..511"):
        model.tokens_to_residual_directions(torch.tensor([512]))


def test_patterns_read_by_layer_key(run):
    model, _, _, cache = run
    for layer in range(model.cfg.n_layers):
        assert torch.equal(cache[("pattern", layer)], cache[f"blocks.{layer}.attn.hook_pattern"])


def test_caching_the_norm_scale_leaves_the_output_unchanged():
    model = HookedCompressedTransformer(preset("tiny-w4s4"), seed=0).eval()
    x = torch.randn(2, 5, model.cfg.d_model)
    plain = model.ln_final(x)
    seen = []
    with model.hooks(fwd_hooks=[("ln_final.hook_scale", lambda s, hook: seen.append(s))]):
        hooked = model.ln_final(x)
    assert torch.equal(plain, hooked) and seen[0].shape == (2, 5, 1)
    with model.hooks(fwd_hooks=[("ln_final.hook_scale", lambda s, hook: 2 * s)]):  # an edit of the scale acts
        torch.testing.assert_close(model.ln_final(x), plain / 2)
