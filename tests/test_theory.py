"""Tests of the idealized retrieval model and its gradient flow (phaseinterp.theory, issue #7)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import plotly.graph_objects as go
import pytest
import torch
from beartype import beartype
from hypothesis import given, settings
from hypothesis import strategies as st
from jaxtyping import TypeCheckError, jaxtyped

from phaseinterp.theory import (
    FlowConfig,
    TheoryConfig,
    build_runs,
    evaluate,
    exact_static_loss,
    expected_random_coverage,
    flow_field,
    gate_probs,
    gate_table,
    gated_loss,
    init_table,
    integrate,
    make_embeddings,
    near_equiangular_gram,
    phase_accuracy,
    run_optimum,
    run_seeds,
    run_sweep,
    run_trajectory,
    sample_contexts,
    static_loss_mc,
    static_rule_survey,
    theorem1_loss,
    theorem1_rules,
)
from phaseinterp.theory.diagnostics import covered_positions
from phaseinterp.theory.model import query_losses
from phaseinterp.theory.task import RunData

TINY = TheoryConfig(m=2, S=4, L=3, N=24, kappa=0.5, gamma=3.0, beta=3.0)
TINY_FLOW = FlowConfig(n_contexts=4, n_eval_contexts=8, dt=5.0, n_steps=40, record_every=10)


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"m": 8, "S": 8}, r"m=8 out of range.*\[1, 7\]"),
        ({"m": 9, "S": 8}, r"m=9 out of range"),
        ({"m": 0}, r"m=0 out of range"),
        ({"N": 7, "S": 8, "distinct_context": False}, r"N=7 out of range.*N >= S = 8"),
        ({"N": 5, "S": 8}, r"N=5 out of range.*N >= L\*S = 32"),
        ({"N": 31, "S": 8, "L": 4}, r"N=31 out of range"),
        ({"eps": -0.01}, r"eps=-0.01 out of range.*\[0.0, 0.5\)"),
        ({"eps": 0.5}, r"eps=0.5 out of range"),
        ({"eps": 1.2}, r"eps=1.2 out of range"),
        ({"kappa": -0.1}, r"kappa=-0.1 out of range"),
        ({"gamma": 0.0}, r"gamma=0.0 out of range"),
        ({"beta": float("nan")}, r"beta=nan out of range"),
        ({"S": 1}, r"S=1 out of range"),
        ({"L": 1}, r"L=1 out of range"),
        ({"m": 2.0}, r"m=2.0 out of range: need an integer"),
    ],
)
def test_bad_theory_parameters_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        TheoryConfig(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"init_radius": 0.0}, r"init_radius=0.0 out of range"),
        ({"dt": -1.0}, r"dt=-1.0 out of range"),
        ({"n_steps": 0}, r"n_steps=0 out of range"),
        ({"n_contexts": 0}, r"n_contexts=0 out of range"),
        ({"method": "rk4"}, r"method='rk4'"),
        ({"onehot_threshold": 1.0}, r"onehot_threshold=1.0 out of range"),
    ],
)
def test_bad_flow_parameters_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        FlowConfig(**kwargs)


def test_eps_too_large_for_positive_definite_gram_raises():
    cfg = TheoryConfig(N=256, eps=0.3)  # in range, but a random +-0.3 perturbation of 256 vectors is not PSD
    with pytest.raises(ValueError, match=r"eps=0.3 too large for N=256"):
        make_embeddings(cfg, seed=0)


# ---------------------------------------------------------------- task


@settings(max_examples=15, deadline=None)
@given(N=st.integers(4, 40), kappa=st.floats(0.0, 3.0), eps=st.floats(0.0, 0.1), seed=st.integers(0, 10_000))
def test_embeddings_are_near_equiangular(N, kappa, eps, seed):
    cfg = TheoryConfig(m=1, S=2, L=2, N=N, kappa=kappa, eps=eps)
    X = make_embeddings(cfg, seed)
    gram = X @ X.T
    deviation = gram - kappa - torch.eye(N, dtype=gram.dtype)
    assert deviation.abs().max() <= eps + 1e-9
    assert torch.allclose(gram, near_equiangular_gram(N, kappa, eps, seed), atol=1e-9)
    if eps > 0.01 and N >= 8:  # the perturbation really is there, and uses the tolerance
        assert deviation.abs().max() > eps / 2


def test_contexts_are_distinct_and_seeded():
    cfg = TheoryConfig(N=40, S=8, L=4)
    a = sample_contexts(cfg, 6, seed=3)
    assert a.shape == (6, 4, 8)
    assert all(len(set(c.flatten().tolist())) == 32 for c in a)
    assert torch.equal(a, sample_contexts(cfg, 6, seed=3))
    assert not torch.equal(a, sample_contexts(cfg, 6, seed=4))
    assert not torch.equal(a, sample_contexts(cfg, 6, seed=3, stream="eval"))
    loose = dataclasses.replace(cfg, N=10, distinct_context=False)
    b = sample_contexts(loose, 50, seed=0)
    assert all(len(set(chunk.tolist())) == 8 for c in b for chunk in c)
    assert any(len(set(c.flatten().tolist())) < 32 for c in b)  # tokens repeat across chunks


# ---------------------------------------------------------------- model


def _reference_losses(c, X, tokens, cfg):
    """Direct, loop-based implementation of the model in d-dimensional vectors."""
    R, n, L, S = tokens.shape
    out = torch.zeros(R, n, L * (S - 1), dtype=X.dtype)
    for r in range(R):
        for i in range(n):
            x = X[r][tokens[r, i]]  # [L, S, d]
            keys, values = [], []
            for h in range(cfg.m):
                pk = torch.softmax(torch.stack([c[r, 0, h, s] @ x[:, s].T for s in range(S)], -1), -1)  # [L, S]
                pv = torch.softmax(torch.stack([c[r, 1, h, s] @ x[:, s].T for s in range(S)], -1), -1)
                keys.append((pk[..., None] * x).sum(1))  # [L, d]
                values.append((pv[..., None] * x).sum(1))
            q = 0
            for j in range(L):
                for s in range(S - 1):
                    xq = x[j, s]
                    o = sum(torch.softmax(cfg.gamma * keys[h] @ xq, 0) @ values[h] for h in range(cfg.m))
                    logits = cfg.beta * X[r] @ o
                    out[r, i, q] = torch.logsumexp(logits, 0) - logits[tokens[r, i, j, s + 1]]
                    q += 1
    return out


@pytest.mark.parametrize("variant", ["structured", "eps", "repeats"])
def test_model_matches_direct_reference(variant):
    cfg = {"structured": TINY, "eps": dataclasses.replace(TINY, eps=0.05),
           "repeats": dataclasses.replace(TINY, N=6, distinct_context=False)}[variant]
    data = build_runs(cfg, [0, 1], n_contexts=3)
    assert data.structured == (variant == "structured")
    g = torch.Generator().manual_seed(0)
    c = torch.randn(2, 2, cfg.m, cfg.S, cfg.N, generator=g, dtype=torch.float64)
    pk, pv = gate_probs(gate_table(c, data.X), data.tokens).unbind(1)
    got = query_losses(pk, pv, data, cfg)
    want = _reference_losses(c, data.X, data.tokens, cfg)
    assert torch.allclose(got, want, atol=1e-10)


def test_exact_shortcut_equals_full_vocabulary_softmax():
    cfg = TheoryConfig(m=2, S=5, L=3, N=40, kappa=0.7)
    fast = build_runs(cfg, [0, 1, 2], n_contexts=4)
    full = dataclasses.replace(fast, structured=False, _cache={})
    theta = 3 * torch.randn(3, 2, 2, 5, 40, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    assert torch.allclose(gated_loss(theta, fast, cfg), gated_loss(theta, full, cfg), atol=1e-11)
    assert torch.allclose(phase_accuracy(theta, fast, cfg), phase_accuracy(theta, full, cfg))


def test_exact_static_loss_equals_monte_carlo_at_eps_zero():
    cfg = TheoryConfig(m=3, S=6, L=4, N=64, kappa=1.3, gamma=2.5, beta=4.0)
    data = build_runs(cfg, [0, 1, 2, 3], n_contexts=3)
    g = torch.Generator().manual_seed(5)
    pk = torch.rand(4, 3, 6, generator=g, dtype=torch.float64).mul(4).softmax(-1)
    pv = torch.rand(4, 3, 6, generator=g, dtype=torch.float64).mul(4).softmax(-1)
    assert torch.allclose(static_loss_mc(pk, pv, data, cfg), exact_static_loss(pk, pv, cfg), atol=1e-10)
    with pytest.raises(ValueError, match="eps=0"):
        exact_static_loss(pk, pv, dataclasses.replace(cfg, eps=0.01))


# ---------------------------------------------------------------- Theorem 1


def test_distinct_onehot_beats_every_non_onehot_rule_tried():
    cfg = TheoryConfig()  # defaults: m=3, S=8, L=4, N=256, gamma=4, beta=3
    survey = static_rule_survey(cfg, n=20, seed=0, optimize_starts=4, optimize_steps=200)
    best = theorem1_loss(cfg)
    assert set(survey["kind"]) >= {"uniform", "random", "mixture", "split", "optimized"}
    non_onehot = survey[~survey["onehot"]]
    assert len(non_onehot) == 1 + 3 * 20 + 4  # uniform, random, mixture, split, optimized
    assert (non_onehot["loss"] > best).all()
    # ... and every other one-hot rule tried (not distinct, or value not at key+1) is worse too
    assert (survey[survey["onehot"]]["loss"] > best + 1e-6).all()
    # locally optimized static rules come back (near) one-hot at distinct pairs (r, r+1)
    opt = survey[survey["kind"] == "optimized"]
    assert (opt["excess"] < 1e-2).mean() >= 0.5


def test_all_distinct_assignments_tie_at_eps_zero():
    cfg = TheoryConfig(m=3, S=8)
    losses = [float(exact_static_loss(*theorem1_rules(cfg, k), cfg)) for k in ([0, 1, 2], [6, 3, 1], [4, 5, 6])]
    assert max(losses) - min(losses) < 1e-12
    worse = float(exact_static_loss(*theorem1_rules(cfg, [2, 2, 5]), cfg))
    assert worse > losses[0] + 0.1


def test_theorem1_fails_once_retrieval_saturates():
    """Documented limit: with beta * a(gamma) well above log N, splitting heads over two pairs wins."""
    cfg = TheoryConfig(beta=12.0)
    survey = static_rule_survey(cfg, n=20, seed=0, optimize_starts=0)
    assert survey[survey["kind"] == "split"]["loss"].min() < theorem1_loss(cfg)


# ---------------------------------------------------------------- gradient flow


def test_theta_flow_is_the_gradient_flow_on_c():
    """One Euler step on theta = c X^T with the G-preconditioned field equals one step on c."""
    for cfg in (TINY, dataclasses.replace(TINY, eps=0.05)):
        data = build_runs(cfg, [0, 1], n_contexts=3)
        c = torch.randn(2, 2, cfg.m, cfg.S, cfg.N, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
        c.requires_grad_(True)
        loss = gated_loss(gate_table(c, data.X), data, cfg)
        (grad_c,) = torch.autograd.grad(loss.sum(), c)
        _, field = flow_field(gate_table(c.detach(), data.X), data, cfg)
        dt = 0.7
        assert torch.allclose(gate_table(c.detach() - dt * grad_c, data.X),
                              gate_table(c.detach(), data.X) + dt * field, atol=1e-10)


def test_flow_loss_never_increases_with_a_small_step():
    cfg = TheoryConfig(m=3, S=6, L=3, N=128)
    res = integrate(cfg, FlowConfig(n_contexts=6, dt=5.0, n_steps=200, record_every=50), seeds=[0, 1, 2, 3])
    steps = np.diff(res.loss, axis=0)
    assert steps.max() <= 1e-13
    assert (res.loss[-1] < res.loss[0] - 0.1).all()  # and it does decrease, by a lot
    assert (res.loss_increases == 0).all()


def test_flow_is_deterministic_and_runs_are_independent():
    a = integrate(TINY, TINY_FLOW, seeds=[3, 5])
    b = integrate(TINY, TINY_FLOW, seeds=[5])
    assert torch.equal(a.theta[1], b.theta[0])
    assert np.array_equal(a.loss[:, 1], b.loss[:, 0])
    assert not torch.equal(a.theta[0], a.theta[1])


def test_rk45_tracks_the_small_step_flow():
    cfg = TheoryConfig(m=1, S=4, L=2, N=16, beta=3.0)
    euler = integrate(cfg, FlowConfig(n_contexts=4, dt=0.5, n_steps=400, record_every=100), seeds=[0])
    rk = integrate(cfg, FlowConfig(n_contexts=4, dt=0.5, n_steps=400, record_every=100, method="rk45"), seeds=[0])
    assert np.allclose(rk.record_times, euler.record_times)
    assert np.abs(rk.gates - euler.gates).max() < 5e-3
    assert abs(rk.loss[-1, 0] - euler.loss[-1, 0]) < 1e-3


def test_theorem_regime_heads_end_onehot_paired_and_static():
    """N >> L*S, small initialization: every head one-hot, value one after key, same position for
    every held-out input, in >= 95% of seeds (Theorem 2)."""
    cfg, flow = TheoryConfig(), FlowConfig()  # N=256 = 8 L*S, init radius 0.05
    seeds = list(range(20))
    res = integrate(cfg, flow, seeds)
    ev = evaluate(res.theta, cfg, flow, seeds)
    assert ev.seeds["all_onehot_paired"].mean() >= 0.95
    assert ev.seeds["all_static"].mean() >= 0.95
    assert ev.heads["key_position"].between(0, cfg.S - 2).all()
    # covered phases are retrieved, uncovered phases are not: accuracy = coverage
    assert np.allclose(ev.accuracy.mean(axis=1), ev.seeds["coverage"], atol=0.02)
    # and the end point is close to the one-hot limit at the learned positions
    assert (ev.seeds["loss"] - ev.seeds["onehot_limit_loss"]).between(0, 0.02).all()


def test_large_initialization_is_not_static():
    """Control: gate logits of size ~9 at the start make the gates depend on the chunk's content."""
    cfg = TheoryConfig()
    flow = FlowConfig(init_radius=100.0, n_steps=100)
    res = integrate(cfg, flow, [0, 1, 2, 3])
    ev = evaluate(res.theta, cfg, flow, res.seeds)
    assert ev.seeds["all_static"].mean() <= 0.5
    assert ev.heads["key_static_share"].mean() < 0.9


# ---------------------------------------------------------------- diagnostics


def test_static_onehot_gates_retrieve_exactly_the_covered_phases():
    cfg = TheoryConfig(m=2, S=6, L=3, N=64)
    data = build_runs(cfg, [0], n_contexts=5, stream="eval")
    pk, pv = theorem1_rules(cfg, [1, 3])
    theta = 40.0 * torch.stack([pk, pv])[None, :, :, :, None].expand(1, 2, 2, 6, 64)  # static one-hot logits
    acc = phase_accuracy(theta, data, cfg)[0].tolist()
    assert acc == [0.0, 1.0, 0.0, 1.0, 0.0]


def test_coverage_counts_positions_held_by_a_paired_head():
    import pandas as pd

    heads = pd.DataFrame({"seed": [0, 0, 0, 1, 1, 1], "head": [0, 1, 2] * 2,
                          "key_position": [1, 1, 4, 0, 2, 5], "value_position": [2, 2, 5, 1, 4, 6],
                          "paired": [True, True, True, True, False, True]})
    assert covered_positions(heads, S=7) == {0: {1, 4}, 1: {0, 5}}
    rng = np.random.default_rng(0)
    picks = rng.integers(0, 7, size=(20000, 3))
    simulated = np.mean([len(set(p)) / 7 for p in picks])
    assert abs(expected_random_coverage(3, 8) - simulated) < 0.01


# ---------------------------------------------------------------- experiments and CLI


def test_experiments_return_tables_figures_and_provenance(tmp_path):
    seeds = [0, 1, 2]
    a = run_trajectory(TINY, TINY_FLOW, seed=1)
    b = run_seeds(TINY, TINY_FLOW, seeds)
    c = run_sweep(TINY, TINY_FLOW, seeds, grid={"m": [1, 2], "init_radius": [0.05, 5.0]})
    d = run_optimum(TINY, TINY_FLOW, seeds, survey_size=3)
    assert set(a.tables["gates"].columns) == {"t", "branch", "head", "position", "p"}
    sums = a.tables["gates"].groupby(["t", "branch", "head"])["p"].sum()
    assert np.allclose(sums, 1.0)
    assert len(b.tables["heads"]) == len(seeds) * TINY.m
    assert b.tables["phase_summary"]["accuracy"].between(0, 1).all()
    assert list(c.tables["sweep"]["param"]) == ["m", "m", "init_radius", "init_radius"]
    assert len(c.tables["runs"]) == 4 * len(seeds)
    assert d.tables["summary"]["theorem1_is_best_rule_tried"].item()
    for exp in (a, b, c, d):
        assert exp.figures and all(isinstance(f, go.Figure) for f in exp.figures.values())
        assert exp.meta["theory_config"] == TINY.to_dict()
        assert exp.meta["versions"]["torch"].startswith(torch.__version__.split("+")[0])
        assert exp.meta["seeds"] == ([1] if exp is a else seeds)
        assert exp.meta["monte_carlo"]["train_queries_per_seed"] == TINY_FLOW.n_contexts * TINY.n_queries
    paths = b.save(tmp_path / "b")
    html = (tmp_path / "b" / "coverage.html").read_text()
    assert 'src="plotly.min.js"' in html and (tmp_path / "b" / "plotly.min.js").stat().st_size > 1_000_000  # offline, one copy
    assert json.loads((tmp_path / "b" / "meta.json").read_text())["seeds"] == seeds
    assert {p.suffix for p in paths} == {".csv", ".json", ".html"}


def test_cli_writes_outputs_and_rejects_bad_parameters(tmp_path, capsys):
    from phaseinterp.cli import main

    args = ["theory", "--experiment", "seeds", "--m", "1", "--S", "4", "--L", "2", "--N", "16", "--seeds", "2",
            "--steps", "20", "--contexts", "2", "--eval-contexts", "4", "--out", str(tmp_path)]
    assert main(args) == 0
    assert (tmp_path / "seeds" / "summary.csv").exists()
    assert (tmp_path / "seeds" / "phase_accuracy.html").exists()
    assert main(["theory", "--m", "4", "--S", "4", "--out", str(tmp_path)]) == 2
    assert "m=4 out of range" in capsys.readouterr().err


def test_public_functions_satisfy_their_jaxtyping_annotations():
    cfg = TINY
    data = build_runs(cfg, [0, 1], n_contexts=2)
    checked = {f.__name__: jaxtyped(typechecker=beartype)(f) for f in
               (init_table, gated_loss, gate_probs, exact_static_loss, static_loss_mc)}
    theta = checked["init_table"](cfg, TINY_FLOW, data)
    checked["gated_loss"](theta, data, cfg)
    p = checked["gate_probs"](theta, data.tokens)
    pk, pv = theorem1_rules(cfg)
    checked["exact_static_loss"](pk, pv, cfg)
    checked["static_loss_mc"](pk.expand(2, -1, -1), pv.expand(2, -1, -1), data, cfg)
    assert p.shape == (2, 2, cfg.m, 2, cfg.L, cfg.S)
    with pytest.raises(TypeCheckError):
        checked["gate_probs"](theta, data.tokens[0])  # missing the run axis
    with pytest.raises(TypeCheckError):
        checked["exact_static_loss"](pk, pv[:, :2], cfg)  # S mismatch between key and value rules
    assert isinstance(data, RunData)
