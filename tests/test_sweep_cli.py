"""`phaseinterp sweep`: outputs and errors with a stand-in model, and on a real random-weight model."""

import json
from types import SimpleNamespace

import pandas as pd
import pytest
import torch

from phaseinterp.cli import main
from phaseinterp.commands import sweep as sweep_cmd
from phaseinterp.measure import PhaseCurve
from phaseinterp.measure.oracle import induction_oracle

FAST = ["--n-per-residue", "6", "--n-records", "16", "--n-demos", "2", "--n-boot", "100", "--n-perm", "100",
        "--no-progress"]


class StandIn(torch.nn.Module):
    def __init__(self, strides=(4,), n_ctx=2048):
        super().__init__()
        self.cfg = SimpleNamespace(vocab_size=256, n_ctx=n_ctx, strides=strides)
        self.fn = induction_oracle(256, weak_phases=[1], period=4)

    def forward(self, tokens):
        return self.fn(tokens)


@pytest.fixture
def use_model(monkeypatch):
    def use(model):
        monkeypatch.setattr(sweep_cmd, "load_model", lambda args: model)
    return use


def test_cli_writes_curve_table_and_figure(tmp_path, use_model, capsys):
    use_model(StandIn())
    rc = main(["sweep", "--preset", "stand-in", "--modulus", "8", "--protocol", "insequence",
               "--out", str(tmp_path), *FAST])
    assert rc == 0
    curve = PhaseCurve.from_json(tmp_path / "curve.json")
    assert curve.accuracy.tolist() == [0.0 if r % 4 == 1 else 1.0 for r in range(8)]
    assert curve.period == 4 and curve.label == "stand-in (seed 0)"
    assert {k: curve.config["source"][k] for k in ("preset", "init_seed")} == {"preset": "stand-in", "init_seed": 0}
    assert curve.config["source"]["task"]["from_card"] is False
    assert curve.config["task"]["protocol"] == "insequence"
    table = pd.read_csv(tmp_path / "curve.csv")
    assert table["accuracy"].tolist() == curve.accuracy.tolist() and table["n"].tolist() == [6] * 8
    assert "plotly" in (tmp_path / "figure.html").read_text().lower()
    assert "phase effect, consistent with period 4" in capsys.readouterr().out


@pytest.mark.parametrize("argv,model,message", [
    ([], StandIn(strides=()), "full attention (no strides): give --modulus R"),
    (["--seq-len", "50", "--modulus", "8"], StandIn(), "seq_len=50 is too short"),
    (["--modulus", "8"], StandIn(n_ctx=40), "exceed the model's n_ctx=40"),
    (["--modulus", "8", "--period", "3"], StandIn(), "period=3 must divide the modulus R=8"),
])
def test_cli_errors(tmp_path, use_model, capsys, argv, model, message):
    use_model(model)
    assert main(["sweep", "--preset", "p", "--out", str(tmp_path), *FAST, *argv]) == 2
    assert message in capsys.readouterr().err


def test_cli_needs_exactly_one_model_source(tmp_path, capsys):
    assert main(["sweep", "--out", str(tmp_path), *FAST]) == 2
    assert main(["sweep", "ckpt.safetensors", "--preset", "p", "--out", str(tmp_path), *FAST]) == 2
    assert "exactly one" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["sweep", "--preset", "p", "--protocol", "zigzag", "--out", str(tmp_path)])


def test_cli_sweep_of_a_random_weight_model(tmp_path):
    try:
        from phaseinterp import HookedCompressedTransformer, preset  # noqa: F401
    except ImportError:
        pytest.skip("phaseinterp.HookedCompressedTransformer is not importable yet")
    argv = ["sweep", "--preset", "tiny-w4s4", "--seed", "0", "--modulus", "8", *FAST]
    assert main([*argv, "--out", str(tmp_path / "a")]) == 0
    assert main([*argv, "--out", str(tmp_path / "b")]) == 0
    a = json.loads((tmp_path / "a" / "curve.json").read_text())
    b = json.loads((tmp_path / "b" / "curve.json").read_text())
    assert a["correct"] == b["correct"] and a["boot_lo"] == b["boot_lo"]  # seeded end to end
    curve = PhaseCurve.from_json(tmp_path / "a" / "curve.json")
    assert curve.n.tolist() == [6] * 8
    # independent check of the scored outcomes: rebuild the model and batch, take the argmax ourselves
    torch.manual_seed(0)
    model = HookedCompressedTransformer(preset("tiny-w4s4")).eval()
    from phaseinterp.tasks import RecordLookup
    batch = RecordLookup(vocab_size=model.cfg.vocab_size, n_records=16, n_demos=2).sample(6, 8, seed=0)
    with torch.no_grad():
        logits = model(batch.tokens)
    pred = logits[torch.arange(len(batch)), batch.query_pos].argmax(-1)
    assert (pred == batch.answer).tolist() == curve.correct.tolist()
    assert (tmp_path / "a" / "figure.html").exists() and (tmp_path / "a" / "curve.csv").exists()
