"""Completion-flip sweep: filler families, a planted phase-dependent preference, padding invariance."""

import numpy as np
import pytest
import torch

from phaseinterp.backends import HookedBackend
from phaseinterp.flip import FillerSpec, FlipResult, completion_flip, completion_flip_text
from phaseinterp.plot import flip_figure
from tests.helpers import COMPRESSED_VARIANTS, noisy_model, tiny_cfg
from tests.test_tasks_niah import word_tokenizer

SPEC = FillerSpec(symbol=5, words=(7, 8, 9), comment_prefix=(3, 2), newline=4)


def test_filler_families_have_exact_lengths():
    assert SPEC.tokens("symbol", 4) == [5, 5, 5, 5]
    assert SPEC.tokens("words", 5) == [7, 8, 9, 7, 8]
    assert SPEC.tokens("comment", 6) == [3, 2, 7, 8, 9, 4]
    assert all(SPEC.tokens(f, 0) == [] for f in ("symbol", "words", "comment"))
    assert all(len(SPEC.tokens(f, L)) == L for f in ("symbol", "words", "comment") for L in range(3, 40))
    with pytest.raises(ValueError, match="length=2 is out of range for family 'comment': allowed 0 or >= 3"):
        SPEC.tokens("comment", 2)
    with pytest.raises(ValueError, match="family='prose' is invalid"):
        SPEC.tokens("prose", 3)


def planted(tokens):
    """Prefers token 12 over 13 iff the last position is 2 or 3 mod 4 (a phase effect)."""
    out = torch.zeros(*tokens.shape, 16)
    pos = torch.arange(tokens.shape[1])
    out[:, :, 12] = torch.where(pos % 4 >= 2, 1.5, -1.5)
    return out


def test_planted_flip_is_recovered():
    # head (1 token) + L + prompt (2 tokens): the last position is L + 2, so 12 wins iff L mod 4 in {0, 1}
    r = completion_flip(planted, [10, 11], [12, 13], range(64), filler=SPEC, family="words", period=4, head=[0],
                        n_perm=200, seed=1)
    s = r.summary()
    assert s["rule"] == [0, 1] and (s["agree"], s["lengths"]) == (64, 64)
    assert s["share"] == pytest.approx(1.0) and s["p_value"] == pytest.approx(1 / 201)
    assert s["share_baseline"] == pytest.approx(3 / 63)
    table = r.residue_table()
    assert table["c0_wins"].tolist() == [1.0, 1.0, 0.0, 0.0] and table["n"].tolist() == [16] * 4
    assert "iff L mod 4 in [0, 1]: 64 of 64" in r.describe()
    # a preference that ignores phase: no rule beyond chance, share near its baseline
    flat = completion_flip(lambda t: torch.randn(*t.shape, 16, generator=torch.Generator().manual_seed(t.shape[1])),
                           [10, 11], [12, 13], range(64), filler=SPEC, period=4, n_perm=200)
    assert flat.summary()["p_value"] > 0.01 and flat.summary()["share"] < 0.3
    fig = flip_figure(r)
    assert len(fig.data) == 3 and list(fig.data[0].x) == list(range(64))
    np.testing.assert_allclose(fig.data[2].y, r.log_odds)


def test_padding_changes_nothing_and_roundtrip(tmp_path):
    model = noisy_model(tiny_cfg([COMPRESSED_VARIANTS["w4s4-scalar"]]), seed=2)
    b = HookedBackend(model)
    lengths = [0, 3, 4, 9, 17, 30]
    r = completion_flip(b, [10, 11, 12], [20, 21, 22], lengths, filler=SPEC, family="comment", period=4, head=[0],
                        batch_size=4, n_perm=50)
    for i, L in enumerate(lengths):
        seq = torch.tensor([[0, *SPEC.tokens("comment", L), 10, 11, 12]])
        p = model(seq)[0, -1].softmax(-1)[[20, 21, 22]]
        np.testing.assert_allclose(r.probs[i], p.detach().numpy(), atol=1e-6)
    back = FlipResult.load(r.save(tmp_path / "flip.json"))
    np.testing.assert_array_equal(back.probs, r.probs)
    assert back.summary() == r.summary()
    with pytest.raises(ValueError, match="candidates=\\[20, 20\\] is invalid"):
        completion_flip(b, [10], [20, 20], lengths, filler=SPEC, period=4)
    with pytest.raises(ValueError, match="period=0 is invalid"):
        completion_flip(b, [10], [20, 21], lengths, filler=SPEC, period=0)


def test_text_mode_flip_on_a_tokenizer():
    tok = word_tokenizer(90)
    model = noisy_model(tiny_cfg([COMPRESSED_VARIANTS["w4s4-scalar"]]), seed=4)
    spec = FillerSpec.from_tokenizer(tok, symbol="bab", comment_prefix="bac", newline="bad", n_words=8)
    r = completion_flip_text(HookedBackend(model), tok, "caf cag cak", [" cal", " cam"], range(8), period=4,
                             family="symbol", filler=spec, n_perm=20)
    assert r.labels == (" cal", " cam") and r.head_len == 1 and r.prompt_len == 3
    assert r.candidates == tuple(tok.convert_tokens_to_ids(["cal", "cam"]))
    with pytest.raises(ValueError, match="candidate ' cal cam' is invalid"):
        completion_flip_text(model, tok, "caf", [" cal cam", " cam"], range(4), period=4, filler=spec)


def test_flip_command(tmp_path, capsys):
    from phaseinterp.cli import main
    from phaseinterp.interventions.planted import planted_model

    ckpt = tmp_path / "planted.safetensors"
    planted_model(64, stride=4, key_offsets=(0, 2)).save(str(ckpt))
    args = ["flip", str(ckpt), "--prompt-ids", "5,40,7,5,41,5", "--candidate-ids", "40,41", "--symbol-id", "60",
            "--word-ids", "50-59", "--lengths", "0-31", "--period", "4", "--n-perm", "50", "--out", str(tmp_path / "o")]
    assert main(args) == 0
    result = FlipResult.load(tmp_path / "o" / "flip.json")
    assert result.probs.shape == (32, 2) and (tmp_path / "o" / "flip.html").stat().st_size > 1000
    assert result.summary()["share"] > 0.9  # the planted model's preference follows L mod 4
    assert "iff L mod 4" in capsys.readouterr().out
    assert main(["flip", "--period", "4", "--out", str(tmp_path / "x")]) == 2
