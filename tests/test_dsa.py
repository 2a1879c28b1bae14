"""DeepSeek Sparse Attention backends (`deepseek_v32`, `glm_moe_dsa`) on tiny random configs: the family,
the indexer's scores and selection as sites, selection edits against reference computations, the
phase sweep, and the indexer's training loss."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from phaseinterp.backends import backend_for
from phaseinterp.families.dsa.backend import DSABackend, drop_keys, force_selection, recent_keys
from phaseinterp.families.dsa.indexer import additive, indexer_kl, indexer_scores, indices_of
from phaseinterp.families.dsa import tiny_dsa_spec
from phaseinterp.family import family_of_model
from phaseinterp.measure import phase_sweep
from phaseinterp.tasks import RecordLookup

T = 48


def _model(model_type="deepseek_v32", seed=0, **changes):
    hf = tiny_dsa_spec(128, model_type=model_type, n_ctx=64, **changes).build(seed=seed).hf.eval()
    with torch.no_grad():  # a random init at initializer_range 0.02 ranks keys by rounding noise: spread it
        for name, p in hf.named_parameters():
            if "indexer" in name and p.dim() == 2:
                p.normal_(0, 0.3, generator=torch.Generator().manual_seed(len(name)))
    return hf


@pytest.fixture(scope="module")
def tokens():
    return torch.randint(1, 128, (3, T), generator=torch.Generator().manual_seed(1))


def _logits(hf, tokens, **kw):
    with torch.no_grad():
        return hf(input_ids=tokens, use_cache=False, **kw).logits


@pytest.mark.parametrize("model_type", ["deepseek_v32", "glm_moe_dsa"])
def test_the_selected_set_is_the_topk_of_the_read_scores(model_type, tokens):
    hf = _model(model_type)
    backend = backend_for(hf)
    assert isinstance(backend, DSABackend) and family_of_model(hf).name == model_type.replace("_", "-")
    read = backend.read_indexer(tokens)
    assert sorted(read) == [0, 1]
    visible = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for r in read.values():
        scores, sel = r["scores"], r["selected"]
        assert scores.shape == sel.shape == (3, T, T)
        assert torch.equal(sel.sum(-1), visible.sum(-1).clamp(max=16).expand(3, -1))  # min(k, visible) per query
        assert not (sel & ~visible).any()
        best_left_out = scores.masked_fill(sel | ~visible, float("-inf")).amax(-1)
        worst_selected = scores.masked_fill(~sel, float("inf")).amin(-1)
        later = torch.arange(T) >= 16  # queries with more visible keys than k
        assert (worst_selected[:, later] >= best_left_out[:, later]).all()
        # ReLU scores tie at 0 (then top-k picks among equals), but most cut-offs are strict
        assert (worst_selected[:, later] > best_left_out[:, later]).float().mean() > 0.5


def test_glm_shared_layers_reuse_the_full_layers_selection(tokens):
    hf = _model("glm_moe_dsa", indexer_types=["full", "shared"])
    backend = DSABackend(hf)
    assert backend.indexer_layers == [0]
    with pytest.raises(ValueError, match=r"layers \[1\] are invalid: allowed layers with an indexer \[0\]"):
        backend.read_indexer(tokens, layers=[1])
    knocked = recent_keys()
    with backend.selecting({0: knocked}):  # the shared layer attends to the edited selection too
        edited = backend(tokens)
    clean = backend(tokens)
    assert not torch.allclose(edited, clean, atol=1e-4)


def test_replacing_a_key_equals_the_model_with_that_key_masked(tokens):
    hf = _model()
    backend = DSABackend(hf)
    j = 20
    keys = torch.zeros(3, T, dtype=torch.bool)
    keys[:, j] = True
    padding = torch.ones(3, T, dtype=torch.long)
    padding[:, j] = 0  # the indexer never sees key j; every query ranks the rest
    reference = _logits(hf, tokens, attention_mask=padding)
    with backend.selecting({0: drop_keys(keys, replace=True), 1: drop_keys(keys, replace=True)}):
        replaced = backend(tokens)
    with backend.selecting({0: drop_keys(keys), 1: drop_keys(keys)}):
        dropped = backend(tokens)
    clean = backend(tokens)
    torch.testing.assert_close(replaced, reference, atol=1e-5, rtol=1e-5)
    assert (replaced[:, j:] - clean[:, j:]).abs().max() > 1e-3  # the knockout did something
    assert torch.allclose(replaced[:, :j], clean[:, :j], atol=1e-6)  # earlier queries never saw key j
    assert (dropped[:, j + 16:] - replaced[:, j + 16:]).abs().max() > 1e-3  # dropping != refilling
    with backend.selecting({1: drop_keys(keys)}):
        read = backend.read_indexer(tokens)
    assert not read[1]["selected"][:, :, j].any() and read[0]["selected"][:, j:, j].any()


def test_dropping_a_key_in_a_dense_model_equals_masking_it(tokens):
    hf = _model(index_topk=64)  # every visible key selected: dropping and masking are the same
    backend = DSABackend(hf)
    keys = torch.zeros(3, T, dtype=torch.bool)
    keys[0, 5], keys[1, 30], keys[2, 47] = True, True, True
    padding = (~keys).long()
    with backend.selecting({0: drop_keys(keys), 1: drop_keys(keys)}):
        dropped = backend(tokens)
    torch.testing.assert_close(dropped, _logits(hf, tokens, attention_mask=padding), atol=1e-5, rtol=1e-5)


def test_forcing_the_sparse_selection_on_a_dense_copy_reproduces_the_sparse_model(tokens):
    sparse = _model()
    dense = _model(index_topk=64)  # the same weights: only index_topk differs
    read = DSABackend(sparse).read_indexer(tokens)
    backend = DSABackend(dense)
    with backend.selecting({layer: force_selection(read[layer]["selected"]) for layer in read}):
        forced = backend(tokens)
    torch.testing.assert_close(forced, _logits(sparse, tokens), atol=1e-5, rtol=1e-5)
    assert (_logits(dense, tokens) - forced).abs().max() > 1e-3


def test_knocking_out_the_indexer_keeps_the_most_recent_keys(tokens):
    backend = DSABackend(_model())
    with backend.selecting({1: recent_keys()}):
        sel = backend.read_indexer(tokens)[1]["selected"]
    q, k = torch.arange(T)[:, None], torch.arange(T)[None, :]
    assert torch.equal(sel, ((k <= q) & (k > q - 16)).expand(3, -1, -1))


def test_phase_sweep_with_and_without_the_value_token_selected():
    hf = _model()
    backend = DSABackend(hf)
    batch = RecordLookup(vocab_size=128, n_records=6, n_demos=1, seq_len=48).sample(2, 8, seed=0)
    curve = phase_sweep(backend, batch, progress=False, n_boot=20, n_perm=20)
    full = _logits(hf, batch.tokens)[torch.arange(len(batch)), batch.query_pos]
    assert np.array_equal(curve.correct, (full.argmax(-1)[:, None] == batch.answers).any(1).numpy())
    assert curve.period == 8 and len(curve.accuracy) == 8 and curve.config["model"]["kind"] == "dsa"
    value = torch.zeros_like(batch.tokens, dtype=torch.bool)
    value[torch.arange(len(batch)), batch.value_pos] = True
    with backend.selecting({1: drop_keys(value, query_pos=batch.query_pos, replace=True)}):
        knocked = backend.final_logits(batch.tokens, batch.query_pos)
        sel = backend.read_indexer(batch.tokens)[1]["selected"]
    assert not sel[torch.arange(len(batch)), batch.query_pos, batch.value_pos].any()
    assert (knocked - full).abs().amax(-1).max() > 1e-4


def test_bad_inputs_name_the_value_and_the_allowed_range(tokens):
    from phaseinterp.backends.tiny import tiny_qwen3

    with pytest.raises(ValueError, match="Qwen3ForCausalLM .*is invalid: allowed DeepseekV32ForCausalLM"):
        DSABackend(tiny_qwen3(seed=0))
    with pytest.raises(ValueError, match="model_type='llama' is invalid: allowed one of"):
        tiny_dsa_spec(model_type="llama")
    with pytest.raises(ValueError, match="row 0, query 1 is empty: allowed at least 1"):
        indices_of(torch.tensor([[[True, False], [False, False]]]), 2)
    with pytest.raises(ValueError, match="up to 2 keys per query: allowed at most index_topk=1"):
        indices_of(torch.tensor([[[True, False], [True, True]]]), 1)
    backend = DSABackend(_model())
    with pytest.raises(ValueError, match=r"keys of shape \(3, 5\) is invalid: allowed \[batch, key\]"):
        with backend.selecting({0: drop_keys(torch.zeros(3, 5, dtype=torch.bool))}):
            backend(tokens)


def test_the_indexer_learns_from_the_distillation_loss_only():
    model = tiny_dsa_spec(128, n_ctx=64).build(seed=0).train()
    x = torch.randint(1, 128, (4, 32), generator=torch.Generator().manual_seed(0))
    (model(x).sum() * 0).backward()  # no language-model gradient: what is left is the indexer loss's
    grads = {n: p.grad for n, p in model.named_parameters()}
    assert all(g is not None and g.norm() > 0 for n, g in grads.items() if "indexer" in n and "k_norm" not in n)
    assert all(g is None or g.norm() == 0 for n, g in grads.items() if "indexer" not in n)

    hf = model.hf
    attn, ind = hf.model.layers[1].self_attn, hf.model.layers[1].self_attn.indexer
    held = {}
    ind.register_forward_pre_hook(lambda m, a, k: held.update(inputs=a[:4]), with_kwargs=True)
    attn.register_forward_hook(lambda m, a, k, o: held.update(args=a, kwargs=k), with_kwargs=True)
    opt = torch.optim.Adam(ind.parameters(), lr=1e-2)
    kls = []
    for _ in range(15):
        model.eval()
        with torch.no_grad():
            model(x)
        hs, qr, pe, mask = held["inputs"]
        config, impl = attn.config, attn.config._attn_implementation
        config._attn_implementation = "eager"
        with torch.no_grad(), torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
            dense = _dense_probs(attn, held)
        config._attn_implementation = impl
        kl = indexer_kl(dense, indexer_scores(ind, hs, qr, pe, mask))
        opt.zero_grad()
        kl.backward()
        opt.step()
        kls.append(float(kl.detach()))
    assert kls[-1] < 0.8 * kls[0]


def _dense_probs(attn, held):
    """The main attention's probabilities with every visible key selected."""
    h = attn.indexer.register_forward_hook(
        lambda m, a, k, o: torch.arange(a[3].shape[-1], dtype=o.dtype).expand(*o.shape[:2], -1), with_kwargs=True)
    try:
        return attn(*held["args"], **{**held["kwargs"], "attention_mask": additive(held["kwargs"]["attention_mask"])})[1]
    finally:
        h.remove()
