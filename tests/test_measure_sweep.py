"""phase_sweep and PhaseCurve on stand-in models with known phase curves."""

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from phaseinterp.measure import PhaseCurve, evaluate_correct, phase_sweep
from phaseinterp.measure.oracle import induction_oracle
from phaseinterp.tasks import RecordLookup

V = 256


class StandIn(torch.nn.Module):
    """An nn.Module with a `cfg`, wrapping the induction oracle and counting forwarded prompts."""

    def __init__(self, strides=(4,), weak=(3,)):
        super().__init__()
        self.cfg = SimpleNamespace(vocab_size=V, n_ctx=1024, strides=strides)
        self.fn = induction_oracle(V, weak_phases=weak, period=strides[0] if strides else 1)
        self.w = torch.nn.Parameter(torch.zeros(1))
        self.seen = 0
        self.modes = []

    def forward(self, tokens):
        self.seen += len(tokens)
        self.modes.append(self.training)
        return self.fn(tokens)


@pytest.fixture(scope="module")
def batch():
    return RecordLookup(vocab_size=V, n_records=16, n_demos=2, protocol="insequence").sample(12, 8, seed=0)


def test_sweep_recovers_a_planted_weak_phase(batch):
    model = StandIn(weak=(3,)).train()
    curve = phase_sweep(model, batch, progress=False, n_boot=200, n_perm=200, label="planted")
    expect = [0.0 if r % 4 == 3 else 1.0 for r in range(8)]
    assert curve.accuracy.tolist() == expect
    assert curve.period == 4 and curve.n.tolist() == [12] * 8
    assert curve.gap_pp == 100 and curve.worst_residue == 3 and curve.mean == 0.75
    assert curve.periodicity_pp == 0 and curve.spectral_share == pytest.approx(1.0)
    assert curve.p_value < 0.01 and curve.p_periodic == 1.0
    assert curve.verdict() == "phase effect, consistent with period 4"
    assert model.training and model.modes and not any(model.modes)  # evaluated in eval mode, mode restored
    assert curve.wilson_lo[0] == pytest.approx(12 / (12 + 1.959964**2)) and curve.boot_lo[0] == 1.0


def test_sweep_of_a_phase_free_model(batch):
    curve = phase_sweep(StandIn(weak=()), batch, progress=False, n_boot=50, n_perm=50)
    assert (curve.accuracy == 1).all() and curve.gap_pp == 0 and curve.p_value == 1.0
    assert curve.verdict() == "no detectable phase effect"


def test_periodicity_flags_period_that_is_not_the_stride(batch):
    """Weak residue 3 only (mod 8): a phase effect that period 4 does not explain."""
    correct = batch.residue != 3
    curve = PhaseCurve.from_correct(correct, batch, period=4, n_boot=100, n_perm=200)
    assert curve.p_value < 0.01 and curve.p_periodic < 0.01
    assert curve.periodicity_pp == pytest.approx(100 * 2 / 8)
    assert curve.verdict() == "phase effect, not explained by period 4"


def test_precomputed_correct_matches_the_model_path(batch):
    model = StandIn()
    a = phase_sweep(model, batch, progress=False, n_boot=100, n_perm=100, seed=1)
    correct = evaluate_correct(model, batch, batch_size=7, progress=False)
    b = phase_sweep(correct, batch, period=4, n_boot=100, n_perm=100, seed=1)
    for name in ("accuracy", "boot_lo", "boot_hi", "wilson_lo"):
        assert np.array_equal(getattr(a, name), getattr(b, name))
    assert a.p_value == b.p_value and a.gap_interval == b.gap_interval
    with pytest.raises(ValueError, match=r"must be bool of shape \(96,\)"):
        phase_sweep(correct[:-1], batch)


def test_queries_sharing_a_prompt_share_a_forward():
    b = RecordLookup.variant("multiquery", vocab_size=V, n_records=16, n_demos=1).sample(4, 4)
    model = StandIn(strides=(2,), weak=())
    correct = evaluate_correct(model, b, batch_size=8, progress=False)
    assert correct.all() and model.seen == len(b) // 4


def test_hf_style_outputs_and_bad_outputs(batch):
    fn = induction_oracle(V)
    hf = lambda t: SimpleNamespace(logits=fn(t))  # noqa: E731
    assert evaluate_correct(hf, batch[:8], progress=False).all()
    with pytest.raises(ValueError, match=r"logits \[batch, pos, vocab\]; got \(8, 10\)"):
        evaluate_correct(lambda t: torch.zeros(len(t), 10), batch[:8], progress=False)


def test_default_stride_must_divide_the_modulus(batch):
    curve = phase_sweep(StandIn(strides=(3,), weak=()), batch, progress=False, n_boot=20, n_perm=20)
    assert curve.period is None and math.isnan(curve.periodicity_pp) and math.isnan(curve.p_periodic)


def test_table_json_roundtrip_html_and_provenance(batch, tmp_path):
    curve = phase_sweep(StandIn(), batch, progress=False, n_boot=100, n_perm=100, label="x", seed=2)
    table = curve.to_pandas()
    assert list(table.columns) == ["label", "residue", "phase", "n", "n_correct", "accuracy",
                                   "wilson_lo", "wilson_hi", "boot_lo", "boot_hi"]
    assert table["accuracy"].tolist() == curve.accuracy.tolist() and table["phase"].tolist() == [0, 1, 2, 3] * 2
    path = curve.to_json(tmp_path / "c.json")
    data = json.loads(path.read_text())
    assert data["summary"]["gap_pp"] == 100 and data["seed"] == 2
    assert data["config"]["task"]["seed"] == 0 and data["config"]["model"]["strides"] == [4]
    from phaseinterp.measure.provenance import versions

    assert data["versions"] == versions() and {"phaseinterp", "torch", "numpy", "python", "transformer_lens"} <= set(versions())
    assert data["versions"]["torch"] == torch.__version__
    back = PhaseCurve.from_json(path)
    for name in ("accuracy", "correct", "residue", "boot_lo", "wilson_hi", "power"):
        assert np.array_equal(getattr(back, name), getattr(curve, name))
    assert back.summary() == curve.summary() and repr(back) == repr(curve)
    html = curve._repr_html_()
    assert "<table" in html and "plotly-graph-div" in html and "gap=100.0 pp" in html


def test_from_correct_without_a_batch_and_errors():
    rng = np.random.default_rng(0)
    residue = np.arange(400) % 4
    correct = rng.random(400) < np.array([0.9, 0.9, 0.2, 0.9])[residue]
    curve = PhaseCurve.from_correct(correct, residue=residue, modulus=4, n_boot=100, n_perm=100)
    assert curve.p_value < 0.01 and curve.n.tolist() == [100] * 4  # no clusters: shuffle across rows
    assert curve.accuracy.tolist() == [correct[residue == r].mean() for r in range(4)]
    with pytest.raises(ValueError, match="give a PhaseBatch, or residue and modulus"):
        PhaseCurve.from_correct(correct)
    with pytest.raises(ValueError, match=r"residue 4 out of range \[0, 4\)"):
        PhaseCurve.from_correct(correct, residue=residue + 1, modulus=4)
    with pytest.raises(ValueError, match="lengths differ"):
        PhaseCurve.from_correct(correct[:-1], residue=residue, modulus=4)
    with pytest.raises(ValueError, match="period=3 must divide the modulus R=4"):
        PhaseCurve.from_correct(correct, residue=residue, modulus=4, period=3)
    with pytest.raises(ValueError, match=r"alpha=2.0 out of range"):
        curve.verdict(alpha=2.0)
