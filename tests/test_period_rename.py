""""period" names the modulus of the residue statistics everywhere (it was "stride" in places):
every renamed keyword still takes its old name, with a DeprecationWarning and identical results,
and result files written with the old key still load."""

import json
import math
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from phaseinterp.config import renamed_keyword
from phaseinterp.flip import FillerSpec, FlipResult, completion_flip, completion_flip_text
from phaseinterp.measure import PhaseCurve, induction_oracle, periodicity_gap, phase_sweep
from phaseinterp.plot import phase_figure
from phaseinterp.tasks import RecordLookup
from phaseinterp.train.rule import period as zoo_modulus
from phaseinterp.train.rule import table_period
from tests.test_tasks_niah import word_tokenizer

ROOT = Path(__file__).resolve().parents[1]
STATS = dict(n_boot=100, n_perm=100, seed=0)


def same_curve(a: PhaseCurve, b: PhaseCurve) -> bool:
    da, db = a.to_dict(), b.to_dict()
    return json.dumps(da, sort_keys=True) == json.dumps(db, sort_keys=True)


def old(fn, *args, **kwargs):
    """Call with an old keyword: exactly one DeprecationWarning, naming the new keyword."""
    with pytest.warns(DeprecationWarning, match=r"is deprecated: use (period|periods|model_period)=") as caught:
        out = fn(*args, **kwargs)
    assert len([w for w in caught if w.category is DeprecationWarning]) == 1
    return out


@pytest.fixture(scope="module")
def batch():
    return RecordLookup(vocab_size=128, n_records=8, n_demos=1).sample(6, 8, seed=0)


def test_old_keywords_warn_and_give_identical_results(batch):
    model = induction_oracle(128, weak_phases=[3], period=4)
    legacy = old(induction_oracle, 128, weak_phases=[3], stride=4)
    assert torch.equal(model(batch.tokens), legacy(batch.tokens))
    new = phase_sweep(model, batch, period=4, progress=False, **STATS)
    assert new.period == 4 and not math.isnan(new.p_periodic)
    assert same_curve(new, old(phase_sweep, model, batch, stride=4, progress=False, **STATS))
    correct = torch.tensor(new.correct)
    assert same_curve(PhaseCurve.from_correct(correct, batch, period=2, **STATS),
                      old(PhaseCurve.from_correct, correct, batch, stride=2, **STATS))
    acc = np.array([0.9, 0.1, 0.8, 0.2, 0.9, 0.1, 0.8, 0.2])
    assert periodicity_gap(acc, 4) == periodicity_gap(acc, period=4) == old(periodicity_gap, acc, stride=4)
    fig = phase_figure(new, periods=[2, 4])
    assert fig.to_dict() == old(phase_figure, new, strides=[2, 4]).to_dict()
    assert table_period(6) == old(table_period, stride=6) == 24 and zoo_modulus(4) == old(zoo_modulus, stride=4) == 8
    with pytest.warns(DeprecationWarning, match="PhaseCurve.stride is deprecated"):
        assert new.stride == new.period == 4


def test_completion_flip_takes_its_old_keyword_too():
    spec = FillerSpec(symbol=5, words=(7, 8, 9), comment_prefix=(3,), newline=4)

    def oracle(tokens):  # prefers token 12 over 13 iff the last position is 2 or 3 mod 4
        out = torch.zeros(*tokens.shape, 200)
        out[:, :, 12] = torch.where(torch.arange(tokens.shape[1]) % 4 >= 2, 1.5, -1.5)
        return out

    args = (oracle, [10, 11], [12, 13], range(12))
    new = completion_flip(*args, filler=spec, period=4, n_perm=20)
    legacy = old(completion_flip, *args, filler=spec, stride=4, n_perm=20)
    assert np.array_equal(new.probs, legacy.probs) and new.period == legacy.period == 4
    assert new.summary() == legacy.summary() and new.summary()["share"] > 0.9
    tok = word_tokenizer()
    text_args = (oracle, tok, "caf cag cak", [" cal", " cam"], range(4))
    filler = FillerSpec.from_tokenizer(tok, symbol="bab", comment_prefix="bac", newline="bad", n_words=4)
    a = completion_flip_text(*text_args, period=4, filler=filler, n_perm=10)
    b = old(completion_flip_text, *text_args, stride=4, filler=filler, n_perm=10)
    assert np.array_equal(a.probs, b.probs) and a.period == b.period == 4
    with pytest.raises(TypeError, match="missing required keyword argument: 'period'"):
        completion_flip(*args, filler=spec)


def test_both_names_or_unknown_keywords_are_refused(batch):
    model = induction_oracle(128, period=4)
    with pytest.raises(TypeError, match="got both period= and its deprecated name stride="):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            phase_sweep(model, batch, period=4, stride=4, progress=False)
    with pytest.raises(TypeError, match="unexpected keyword argument 'strides'"):
        phase_sweep(model, batch, strides=4, progress=False)
    with pytest.raises(TypeError, match="missing required argument: 'period'"):
        periodicity_gap(np.array([0.5, 0.5]))
    assert renamed_keyword("f", {}, "stride", "period", 3) == 3


def test_result_files_written_with_stride_still_load(tmp_path, batch):
    curve = phase_sweep(induction_oracle(128, weak_phases=[1], period=4), batch, period=4, progress=False, **STATS)
    data = curve.to_dict()
    assert data["period"] == data["summary"]["period"] == 4 and "stride" not in data
    legacy = {("stride" if k == "period" else k): v for k, v in data.items()}
    assert same_curve(PhaseCurve.from_dict(legacy), curve)
    shipped = PhaseCurve.from_json(ROOT / "assets/results/mitigations/curves/baseline-seed0.json")
    stored = json.loads((ROOT / "assets/results/mitigations/curves/baseline-seed0.json").read_text())
    assert "period" not in stored and shipped.period == stored["stride"] == 4
    assert shipped.p_periodic == stored["p_periodic"] and shipped.summary()["period"] == 4
    spec = FillerSpec(symbol=5, words=(7, 8, 9), comment_prefix=(3,), newline=4)
    flip = completion_flip(lambda t: torch.randn(*t.shape, 16, generator=torch.Generator().manual_seed(0)),
                           [10, 11], [12, 13], range(8), filler=spec, period=4, n_perm=10)
    saved = json.loads(flip.save(tmp_path / "flip.json").read_text())
    saved["stride"] = saved.pop("period")
    (tmp_path / "old.json").write_text(json.dumps(saved))
    loaded = FlipResult.load(tmp_path / "old.json")
    assert loaded.period == 4 and np.array_equal(loaded.probs, flip.probs)


def test_cli_keeps_stride_as_a_deprecated_alias(tmp_path, monkeypatch, capsys):
    from phaseinterp.cli import main
    from phaseinterp.commands import sweep as sweep_cmd
    from tests.test_sweep_cli import FAST, StandIn

    monkeypatch.setattr(sweep_cmd, "load_model", lambda args: StandIn())
    assert main(["sweep", "--preset", "p", "--modulus", "8", "--period", "4", "--out", str(tmp_path / "new"), *FAST]) == 0
    with pytest.warns(FutureWarning, match="--stride is deprecated: use --period"):
        assert main(["sweep", "--preset", "p", "--modulus", "8", "--stride", "4", "--out", str(tmp_path / "old"), *FAST]) == 0
    new, legacy = (PhaseCurve.from_json(tmp_path / d / "curve.json") for d in ("new", "old"))
    assert new.period == legacy.period == 4 and np.array_equal(new.accuracy, legacy.accuracy)
    assert new.p_periodic == legacy.p_periodic and new.boot_lo.tolist() == legacy.boot_lo.tolist()
    assert main(["flip", "x.safetensors", "--out", str(tmp_path / "f")]) == 2
    assert "--period P is required" in capsys.readouterr().err
