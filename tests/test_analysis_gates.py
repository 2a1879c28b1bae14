"""Gate statistics: effective numbers of offsets on known distributions, profiles, dynamics over
checkpoints, and their figures."""

import numpy as np
import plotly.graph_objects as go
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from phaseinterp import CompressionConfig
from phaseinterp.analysis import effective_offsets, gate_dynamics, gate_profiles, gate_statistics
from phaseinterp.checkpoint import save_model
from phaseinterp.interventions import planted_model
from phaseinterp.plot import gate_dynamics_figure, gate_plane_figure, gate_profile_figure
from tests.helpers import noisy_model, tiny_cfg


def test_effective_offsets_on_known_gates():
    W = 4
    uniform = torch.full((10, W), 1 / W)
    fixed = torch.zeros(10, W)
    fixed[:, 2] = 1
    rotating = torch.eye(W).repeat(3, 1)
    half = torch.tensor([[0.5, 0.5, 0, 0]]).repeat(5, 1)
    for a, (s, p) in [(uniform, (4, 4)), (fixed, (1, 1)), (rotating, (4, 1)), (half, (2, 2))]:
        static, per = effective_offsets(a)
        assert (float(static), float(per)) == pytest.approx((s, p))
    wide = torch.zeros(10, 8)
    wide[:3] = 1 / 8
    wide[3:, 2] = 1  # 30% uniform windows, 70% one-hot on offset 2: per-window > static (no fixed order)
    static, per = effective_offsets(wide)
    mean = np.array([0.3 / 8] * 7 + [0.7 + 0.3 / 8])
    assert float(per) == pytest.approx(0.3 * 8 + 0.7) and float(static) == pytest.approx(np.exp(-(mean * np.log(mean)).sum()))
    assert float(static) < float(per)


@settings(max_examples=25, deadline=None)
@given(st.integers(2, 8), st.integers(1, 20), st.floats(0.05, 5.0), st.integers(0, 1000))
def test_effective_offsets_lie_in_one_to_w(W, n, alpha, seed):
    a = torch.distributions.Dirichlet(torch.full((W,), alpha)).sample((n, 3))  # [window, channel, offset]
    static, per = effective_offsets(a.movedim(-1, 1))
    assert static.shape == per.shape == (3,)
    tol = 1e-5 * W  # exp(entropy) in float32: a uniform gate gives W up to rounding
    assert ((static >= 1 - tol) & (static <= W + tol)).all() and ((per >= 1 - tol) & (per <= W + tol)).all()


def test_statistics_and_profiles_of_vector_and_csa_gates():
    csa = CompressionConfig(window=8, stride=4, gate="vector", kv="tied", layout="deepseek-csa", local_window=4)
    model = noisy_model(tiny_cfg([csa, CompressionConfig(window=6, stride=3, local_window=4)]))
    tokens = torch.randint(0, 97, (2, 30), generator=torch.Generator().manual_seed(0))
    stats = gate_statistics(model, tokens)
    assert list(zip(stats.layer, stats.branch)) == [(0, "kv"), (0, "kv"), (1, "key"), (1, "key"), (1, "value"), (1, "value")]
    assert (stats.windows == [12, 12, 18, 18, 18, 18]).all()  # 2 rows x (7 - entry 0, which starts before 0) csa
    assert ((stats.static >= 1) & (stats.static <= stats.window)).all()
    prof = gate_profiles(model, tokens)
    assert set(prof.phase) == {0, 1, 2, 3} | {0, 1, 2}
    sums = prof.groupby(["layer", "branch", "kv_head"]).mass.sum()
    np.testing.assert_allclose(sums.values, 1.0, atol=1e-6)  # the gate mass is spread over the S phases
    assert (prof[prof.branch == "value"].rolled).all() and not (prof[prof.branch != "value"].rolled).any()


def test_dynamics_over_checkpoints_reads_steps(tmp_path):
    paths = []
    for step, logit in [(300, 8.0), (0, 0.0), (100, 2.0)]:
        model = planted_model(32, gate_logit=logit)
        paths.append(save_model(model, tmp_path / f"step_{step}.safetensors", extra={"step": step}))
    tokens = torch.randint(1, 32, (2, 24), generator=torch.Generator().manual_seed(0))
    dyn = gate_dynamics(paths, tokens)
    assert sorted(dyn.step.unique()) == [0, 100, 300]
    key0 = dyn[(dyn.branch == "key") & (dyn.kv_head == 0)].sort_values("step")
    assert key0.static.iloc[0] == pytest.approx(4.0) and key0.static.iloc[-1] < 1.05  # uniform -> one-hot
    assert (np.diff(key0.static.values) < 0).all()
    fig = gate_dynamics_figure(dyn)
    assert isinstance(fig, go.Figure) and len(fig.data) == 5  # 4 gates + the diagonal


def test_gate_figures():
    model = planted_model(32)
    tokens = torch.randint(1, 32, (2, 24), generator=torch.Generator().manual_seed(0))
    plane = gate_plane_figure(gate_statistics(model, tokens))
    assert [t.name for t in plane.data] == ["key", "value", "y = x"]
    assert list(plane.data[0].text) == ["0.0", "0.1"]
    prof = gate_profile_figure(gate_profiles(model, tokens))
    assert list(prof.data[0].y) == ["0.key.0", "0.key.1", "0.value.0", "0.value.1"]
    assert np.array(prof.data[0].z)[0].round(2).tolist() == [4.0, 0.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="lacks columns"):
        gate_plane_figure(gate_profiles(model, tokens))
