"""Native Sparse Attention (issue 18): our step-by-step forward against the library's own
`SparseAttention.forward`, the hook sites, branch knockout, causality, the trainer and a shipped
checkpoint."""

import json
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from phaseinterp.model.nsa.config import NSAConfig

nsa_lib = pytest.importorskip("native_sparse_attention_pytorch")

from phaseinterp.model.nsa import NSATransformer  # noqa: E402

SHIPPED = Path(__file__).resolve().parents[1] / "assets" / "checkpoints" / "nsa"
CONFIGS = [(8, 8, 0), (8, 8, 1), (8, 8, 2), (16, 8, 2), (8, 4, 3)]


def tiny(W=8, S=8, k=2, seed=0, **kw) -> NSATransformer:
    cfg = NSAConfig(vocab_size=64, d_model=32, compress_block=W, compress_stride=S, num_selected=k,
                    sliding_window=8, compress_mlp_expand_factor=32 / (W * 16), **kw)
    model = NSATransformer(cfg, seed=seed).eval()
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():  # the library zero-initializes these; random values exercise every term
        for name, p in model.named_parameters():
            if any(s in name for s in ("intrablock", "mem_kv", "strategy_combine")):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
    return model


@pytest.mark.parametrize("W,S,k", CONFIGS)
@pytest.mark.parametrize("T", [64, 45, 7])
def test_forward_matches_library(W, S, k, T):
    attn = tiny(W, S, k).blocks[0].attn
    x = torch.randn(3, T, 32, generator=torch.Generator().manual_seed(T))
    with torch.no_grad():
        ours, theirs = attn(x), attn.nsa(x)
    assert theirs.abs().max() > 0.1
    torch.testing.assert_close(ours, theirs, rtol=0, atol=2e-6)


def test_hooks_fire_with_consistent_values():
    model = tiny(8, 8, 2)
    T, S = 40, 8
    tokens = torch.randint(0, 64, (2, T), generator=torch.Generator().manual_seed(0))
    _, cache = model.run_with_cache(tokens)
    a = "blocks.1.attn."
    z = cache[a + "hook_z"]
    gates = cache[a + "hook_branch_gates"]
    assert z.shape == (2, T, 4, 16) and gates.shape == (2, T, 4, 3)
    assert cache[a + "compress_k.hook_out"].shape == (2, T // S, 2, 16)
    assert cache[a + "select.hook_scores"].shape == (2, T, 2, T // S)
    assert ((gates > 0) & (gates < 1)).all()
    # branches recombine through the gates into hook_z, and hook_z through combine_heads into hook_attn_out
    mix = sum(gates[..., i:i + 1] * cache[a + f"hook_z_{b}"] for i, b in enumerate(("compress", "select", "sliding")))
    torch.testing.assert_close(mix, z)
    torch.testing.assert_close(model.blocks[1].attn.nsa.combine_heads(z.flatten(2)), cache["blocks.1.hook_attn_out"])
    # chosen blocks: k per KV head, only complete blocks that end before the query, no repeats
    idx = cache[a + "select.hook_indices"]
    assert idx.shape == (2, T, 2, 2)
    t = torch.arange(T)[None, :, None, None].expand_as(idx)
    chosen = idx >= 0
    assert ((idx[chosen] + 1) * S - 1 < t[chosen]).all()
    assert chosen[:, 20:].all() and not chosen[:, :8].any()  # blocks exist from t = 8; at t >= 20 two are visible
    assert (idx[..., 0] != idx[..., 1])[:, 20:].all()
    # the compressed pattern: memory entry always visible, entry j only once t > (j + 1) S - 1
    pattern = cache[a + "hook_pattern_compress"]
    torch.testing.assert_close(pattern.sum(-1), torch.ones(2, 4, T))
    assert pattern[:, :, 15, 2:].max() < 1e-20 and pattern[:, :, 16, 2] .min() > 0


def test_nnsight_reads_the_same_hooks():
    import beartype  # noqa: F401  (before nnsight, RECIPES.md)
    from nnsight import NNsight

    model = tiny(8, 8, 1)
    tokens = torch.randint(0, 64, (2, 32), generator=torch.Generator().manual_seed(1))
    _, cache = model.run_with_cache(tokens)
    nn_model = NNsight(model)
    with torch.no_grad(), nn_model.trace(tokens):
        sel = nn_model.blocks[1].attn.hook_z_select.output.save()
        gates = nn_model.blocks[1].attn.hook_branch_gates.output.save()
    torch.testing.assert_close(sel, cache["blocks.1.attn.hook_z_select"])
    torch.testing.assert_close(gates, cache["blocks.1.attn.hook_branch_gates"])


def test_branch_knockout_changes_output_and_a_noop_warns():
    from phaseinterp.interventions.nsa_branches import branch_knockout, branch_logits
    from phaseinterp.tasks import RecordLookup

    model = tiny(8, 8, 2)
    batch = RecordLookup(vocab_size=64, n_records=6, n_demos=2, seq_len=48).sample(2, 8, seed=0)
    clean, edited = branch_logits(model, batch.tokens, batch.query_pos, [(1, "select"), (0, "compress")])
    assert (edited - clean[None]).abs().amax(dim=(1, 2)).min() > 1e-3
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m = branch_knockout(model, batch, n_boot=20)
    assert m.shape == (2, 3, 8) and m.coords["branch"] == ["compress", "select", "sliding"]
    assert m.p.shape == m.shape and ((m.p > 0) & (m.p <= 1)).all()  # per-cell bootstrap p-values, never 0
    pooled = m.pooled()  # one test per branch and layer: balanced rows, so the mean of its cells
    assert pooled["unit"].tolist()[:3] == ["L0.compress", "L0.select", "L0.sliding"]
    np.testing.assert_allclose(pooled["value"], m.values.mean(-1).reshape(-1))
    with torch.no_grad():  # close the compressed branch's gate everywhere: zeroing it is then a no-op
        for block in model.blocks:
            block.attn.nsa.to_strategy_combine[0].bias[0::3] = -1e4
    with pytest.warns(UserWarning, match=r"changed no output.*L0\.compress, L1\.compress"):
        branch_knockout(model, batch, branches=["compress"], n_boot=20)
    with pytest.raises(ValueError, match="branch='gates' is invalid"):
        branch_knockout(model, batch, branches=["gates"], n_boot=20)


@pytest.mark.parametrize("W,S,k", [(8, 8, 2), (16, 8, 1), (8, 8, 0)])
def test_future_tokens_do_not_change_past_outputs(W, S, k):
    model = tiny(W, S, k)
    gen = torch.Generator().manual_seed(2)
    a = torch.randint(0, 64, (2, 56), generator=gen)
    for t in (7, 8, 23, 24, 40):
        b = a.clone()
        b[:, t + 1:] = torch.randint(0, 64, (2, 55 - t), generator=gen)
        with torch.no_grad():
            la, lb = model(a), model(b)
        torch.testing.assert_close(la[:, :t + 1], lb[:, :t + 1], rtol=0, atol=1e-5)
        assert (la[:, t + 1:] - lb[:, t + 1:]).abs().max() > 1e-3


def test_edited_selection_cannot_read_the_future():
    model = tiny(8, 8, 1)
    gen = torch.Generator().manual_seed(3)
    a = torch.randint(0, 64, (1, 48), generator=gen)
    b = a.clone()
    b[:, 30:] = torch.randint(0, 64, (1, 18), generator=gen)

    def last_block(idx, hook):  # point every pick at the last block, which lies in most queries' future
        return torch.full_like(idx, 5)

    hooks = [(f"blocks.{i}.attn.select.hook_indices", last_block) for i in range(2)]
    with torch.no_grad():
        la, lb = (model.run_with_hooks(x, fwd_hooks=hooks) for x in (a, b))
    torch.testing.assert_close(la[:, :30], lb[:, :30], rtol=0, atol=1e-5)


def test_trainer_checkpoint_roundtrip_and_backend(tmp_path):
    from phaseinterp.backends import NSABackend, Replace, Unit, backend_for
    from phaseinterp.checkpoint import load, read_metadata
    from phaseinterp.train import Mixture, TrainConfig, train

    cfg = tiny().cfg
    mix = Mixture(vocab_size=64, seq_len=32, max_records=4, min_demos=0, max_demos=2)
    result = train(cfg, TrainConfig(steps=2, batch_size=2, warmup_steps=1, mixture=mix, device="cpu"), tmp_path / "run",
                   progress=False)
    assert read_metadata(result.checkpoint)["format"] == "phaseinterp-nsa-checkpoint-v1"
    loaded = load(result.checkpoint)
    tokens = torch.randint(0, 64, (2, 32))
    torch.testing.assert_close(loaded(tokens), result.model(tokens), rtol=0, atol=0)
    backend = backend_for(loaded)
    assert isinstance(backend, NSABackend) and backend.cfg.strides == (8,)
    with backend.intervene(Replace(Unit("kv_head", 1, 0))):
        knocked = backend(tokens)
    clean = loaded(tokens)
    assert (knocked[:, -1] - clean[:, -1]).abs().max() > 1e-4
    torch.testing.assert_close(knocked[:, :-1], clean[:, :-1])
    with pytest.raises(ValueError, match="mitigation=.*invalid for a model of family 'nsa'"):
        from phaseinterp.train.mitigation import Mitigation

        train(cfg, TrainConfig(steps=1, batch_size=2, warmup_steps=0, mixture=mix, device="cpu",
                               mitigation=Mitigation(entropy_weight=0.1)), tmp_path / "run2", progress=False)


def test_shipped_checkpoint_reproduces_its_card():
    from phaseinterp.checkpoint import load
    from phaseinterp.train.data import Mixture
    from phaseinterp.train.evaluate import phase_curve

    path = SHIPPED / "nsa-w8s8-k2-s0.safetensors"
    card = json.loads(path.with_suffix(".json").read_text())
    model = load(path)
    assert model.cfg.num_selected == 2 and model.cfg.sliding_window == 8
    task = card["phase_curve"]["task"]
    curve = phase_curve(model, Mixture.from_dict(card["data"]["mixture"]), modulus=task["modulus"],
                        n_per_residue=task["n_per_residue"], seed=task["seed"], seq_len=task["seq_len"])
    assert curve["accuracy"] == card["phase_curve"]["accuracy"]  # same prompts, same weights, same answers


def test_without_the_package_the_error_says_how_to_install(monkeypatch):
    from phaseinterp.model.nsa.attention import require_nsa

    monkeypatch.setitem(sys.modules, "native_sparse_attention_pytorch", None)
    with pytest.raises(ImportError, match=r"pip install 'phaseinterp\[nsa\]'"):
        require_nsa()
    with pytest.raises(ImportError, match=r"phaseinterp\[nsa\]"):
        NSATransformer(NSAConfig())


@pytest.mark.parametrize("field,value,allowed", [("compress_stride", 16, r"an integer in \[1, compress_block=8\]"),
                                                 ("n_kv_heads", 3, "a divisor of n_heads=4"),
                                                 ("num_selected", -1, "an integer >= 0")])
def test_config_errors_name_the_value_and_range(field, value, allowed):
    with pytest.raises(ValueError, match=f"{field}={value!r} is invalid: allowed {allowed}"):
        NSAConfig(**{field: value})
    assert NSAConfig.from_dict(NSAConfig(num_selected=1).to_dict()) == NSAConfig(num_selected=1)
