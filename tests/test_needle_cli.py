"""`phaseinterp needle` on a tiny random HF Llama saved with save_pretrained, a BPE tokenizer trained
here and a folder of random-sentence essays (nothing downloaded): the JSON's per-residue counts and
accuracies equal a direct `phase_sweep` on the same batch (uncompressed and compressed), the grid
adds up to the curve, the page opens offline, `--resume` takes the finished minibatches from the
journal, and bad input is refused naming the value and the allowed range."""

import json
import re

import numpy as np
import pytest
import torch

from phaseinterp.cli import main
from phaseinterp.commands import needle as needle_cmd
from phaseinterp.measure import PhaseCurve, phase_sweep
from phaseinterp.tasks import ProseNeedle
from tests.test_tasks_prose import haystack, tokenizer_dir  # noqa: F401  (fixtures: essays, tokenizer)

torch.set_num_threads(1)

T, R, N = 160, 4, 4  # prompt length, modulus, prompts per residue


@pytest.fixture(scope="module")
def llama_dir(tokenizer_dir, tmp_path_factory):  # noqa: F811
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=400, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      tie_word_embeddings=False, initializer_range=1.0)
    model = LlamaForCausalLM(cfg).eval()
    # it predicts the even digits only (logit 0 elsewhere; the eval split's one-digit values are 2, 4, 6,
    # 8), which one depending on the context (large weights): some rows right, some wrong
    tok = ProseNeedle(str(tokenizer_dir), seq_len=T)._tok
    digits = [tok.convert_tokens_to_ids(str(d)) for d in (2, 4, 6, 8)]
    keep = torch.zeros(400, dtype=torch.bool)
    keep[digits] = True
    with torch.no_grad():
        model.lm_head.weight[~keep] = 0
    folder = tmp_path_factory.mktemp("llama")
    model.save_pretrained(folder)
    return folder


def _argv(llama_dir, tokenizer_dir, haystack, out, *extra):  # noqa: F811
    return ["needle", str(llama_dir), "--tokenizer", str(tokenizer_dir), "--haystack", str(haystack),
            "--lengths", str(T), "--modulus", str(R), "--n-per-residue", str(N), "--n-depths", "2", "--value-digits", "1",
            "--n-boot", "20", "--n-perm", "20", "--batch-size", "2", "--no-progress",
            "--compress", "4", "4", "--local", "4", "--sink", "1", *extra, "--out", str(out)]


@pytest.fixture(scope="module")
def finished(llama_dir, tokenizer_dir, haystack, tmp_path_factory):  # noqa: F811
    out = tmp_path_factory.mktemp("needle")
    assert main(_argv(llama_dir, tokenizer_dir, haystack, out)) == 0
    return out


def test_the_json_equals_a_direct_phase_sweep_on_the_same_batch(finished, llama_dir, tokenizer_dir, haystack):  # noqa: F811
    from transformers import LlamaForCausalLM

    from phaseinterp.backends.kv_compression import KVCompression, compress_attention

    result = json.loads((finished / "needle.json").read_text())
    units = {u["condition"]: u for u in result["units"]}
    assert set(units) == {"uncompressed", "compressed"} and result["period"] == 4
    batch = ProseNeedle(str(tokenizer_dir), seq_len=T, haystack_dir=str(haystack), n_depths=2,
                        value_digits=1).sample(N, R)
    model = LlamaForCausalLM.from_pretrained(llama_dir).eval()
    kw = dict(n_boot=20, n_perm=20, progress=False, batch_size=2)
    direct = {"uncompressed": phase_sweep(model, batch, **kw)}
    compress_attention(model, KVCompression(4, 4, local=4, sink=1))
    direct["compressed"] = phase_sweep(model, batch, **kw)
    for name, curve in direct.items():
        saved = PhaseCurve.from_dict(units[name]["curve"])
        assert saved.n.tolist() == [N] * R and saved.n.tolist() == curve.n.tolist()
        assert saved.n_correct.tolist() == curve.n_correct.tolist()
        assert np.array_equal(saved.correct, curve.correct.astype(bool))
        grid = units[name]["grid"]
        assert np.array(grid["n"]).sum(0).tolist() == [N] * R  # every row in one depth bin
        assert np.array(grid["k"]).sum(0).tolist() == curve.n_correct.tolist()
    assert units["compressed"]["curve"]["config"]["compression"]["window"] == 4
    # some rows right, some wrong, and compression changed which (else the comparison would test little)
    for curve in direct.values():
        assert 0 < curve.n_correct.sum() < N * R
    assert direct["compressed"].correct.tolist() != direct["uncompressed"].correct.tolist()
    rows = (finished / "needle.csv").read_text().splitlines()
    assert rows[0].startswith("length,condition,label,residue") and len(rows) == 1 + 2 * R
    assert len((finished / "grid.csv").read_text().splitlines()) == 1 + 2 * 2 * R
    assert [v["condition"] for v in result["verdicts"]] == ["uncompressed", "compressed"]


def test_the_question_anchor_runs_the_decode_time_sweep(llama_dir, tokenizer_dir, haystack, tmp_path):  # noqa: F811
    from transformers import LlamaForCausalLM

    from phaseinterp.backends.kv_compression import KVCompression, compress_attention

    assert main(_argv(llama_dir, tokenizer_dir, haystack, tmp_path, "--anchor-token", "question")) == 0
    saved = PhaseCurve.from_dict({u["condition"]: u for u in json.loads((tmp_path / "needle.json").read_text())["units"]}
                                 ["compressed"]["curve"])
    batch = ProseNeedle(str(tokenizer_dir), seq_len=T, haystack_dir=str(haystack), n_depths=2, value_digits=1,
                        anchor="question").sample(N, R)
    assert (batch.query_pos % R == batch.residue).all()
    model = compress_attention(LlamaForCausalLM.from_pretrained(llama_dir).eval(), KVCompression(4, 4, local=4, sink=1))
    direct = phase_sweep(model, batch, n_boot=20, n_perm=20, progress=False, batch_size=2)
    assert np.array_equal(saved.correct, direct.correct.astype(bool)) and saved.n.tolist() == [N] * R


def test_attention_sets_the_implementation_and_is_recorded(finished, llama_dir, tokenizer_dir, haystack,  # noqa: F811
                                                            tmp_path):
    from phaseinterp.backends import windowed_attention

    assert needle_cmd.ATTENTIONS == windowed_attention.ATTENTIONS
    assert json.loads((finished / "needle.json").read_text())["attention"] == "sdpa"  # the folder's own: HF's default
    saved = {}
    for name in ("eager", "windowed"):  # a model without sliding layers: windowed runs sdpa whole
        assert main(_argv(llama_dir, tokenizer_dir, haystack, tmp_path / name, "--attention", name)) == 0
        result = json.loads((tmp_path / name / "needle.json").read_text())
        assert result["attention"] == {"eager": "eager", "windowed": windowed_attention.WINDOWED}[name]
        saved[name] = {u["condition"]: u["curve"]["correct"] for u in result["units"]}
    before = {u["condition"]: u["curve"]["correct"] for u in json.loads((finished / "needle.json").read_text())["units"]}
    assert saved["eager"] == saved["windowed"] == before


def test_the_page_opens_offline(finished):
    html = (finished / "needle.html").read_text()
    assert not [s for s in re.findall(r'<script[^>]*\bsrc="([^"]+)"', html)]  # plotly inline, no CDN
    assert "Verdicts" in html and f"Prompts of {T} tokens" in html and html.count("plotly-graph-div") >= 3


def test_resume_takes_the_finished_minibatches_from_the_journal(finished, llama_dir, tokenizer_dir, haystack,  # noqa: F811
                                                                tmp_path, monkeypatch):
    from phaseinterp.measure.journal import Journal

    real, puts = Journal.put, []

    def dying_put(self, *a, **k):  # the run dies after its 3rd finished minibatch
        if len(puts) == 3:
            raise RuntimeError("killed")
        puts.append(a[0])
        return real(self, *a, **k)

    argv = _argv(llama_dir, tokenizer_dir, haystack, tmp_path)
    monkeypatch.setattr(Journal, "put", dying_put)
    assert main(argv) == 2 and not (tmp_path / "needle.json").exists()
    monkeypatch.setattr(Journal, "put", real)
    assert main(argv) == 2  # an unfinished folder is refused without --resume
    assert main([*argv, "--resume"]) == 0
    result = json.loads((tmp_path / "needle.json").read_text())
    resumed = [u["curve"]["config"]["resumed"] for u in result["units"]]
    assert [r["minibatches"] for r in resumed] == [3, 0] and [r["of"] for r in resumed] == [8, 8]
    whole = json.loads((finished / "needle.json").read_text())
    for a, b in zip(result["units"], whole["units"]):
        assert a["curve"]["correct"] == b["curve"]["correct"] and a["grid"] == b["grid"]
    assert not (tmp_path / ".journal").exists()
    assert main(argv) == 2  # finished: kept unless --overwrite


@pytest.mark.parametrize("extra, message", [
    (["--modulus", "0"], "--modulus 0 is out of range: allowed an integer >= 1"),
    (["--lengths", "8"], "--lengths 8 is invalid: allowed distinct integers >= 16"),
    (["--lengths", "4096"], "--lengths 4096 is out of range: allowed 16..512"),
    (["--compress", "4", "8"], "stride=8 is out of range: allowed 1..window=4"),
    (["--compress", "4", "4", "--rule", "evict", "--offset", "4"], "offset=4 is invalid: allowed None, or 0..3"),
    (["--layers", "5"], "layer=5 is out of range: allowed 0..1"),
    (["--haystack", "/nonexistent"], "--haystack '/nonexistent' is invalid: allowed a folder of .txt files"),
])
def test_bad_input_is_refused_naming_the_value_and_the_range(llama_dir, tokenizer_dir, haystack, tmp_path,  # noqa: F811
                                                             capsys, extra, message):
    assert main(_argv(llama_dir, tokenizer_dir, haystack, tmp_path / "o", *extra)) == 2
    assert message in capsys.readouterr().err
    assert not list((tmp_path / "o").rglob("*.npz")), "refused before any sweep ran"


def test_compression_options_need_compress_and_the_choices_match_the_library(tmp_path, capsys):
    from phaseinterp.backends import kv_compression

    assert needle_cmd.RULES == kv_compression.RULES and needle_cmd.ANCHORS == kv_compression.ANCHORS
    assert main(["needle", "x", "--local", "8", "--out", str(tmp_path / "o")]) == 2
    assert "allowed only with --compress W S" in capsys.readouterr().err
    assert main(["needle", "x", "--compress", "4", "4", "--offset", "0", "--out", str(tmp_path / "o")]) == 2
    assert "--offset 0 sets the kept token of --rule evict: allowed only with --rule evict" in capsys.readouterr().err
    assert main(["needle", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert "allowed a HuggingFace causal LM folder" in capsys.readouterr().err


def test_a_press_runs_in_place_of_the_compression_and_equals_a_direct_sweep(llama_dir, tokenizer_dir, haystack,  # noqa: F811
                                                                             tmp_path):
    from transformers import LlamaForCausalLM

    from phaseinterp.backends.presses import SelectionPress, press_attention

    argv = _argv(llama_dir, tokenizer_dir, haystack, tmp_path / "o")
    i = argv.index("--compress")
    argv[i:i + 3] = ["--press", "chunk", "--chunk", "4", "--budget", "2"]
    assert main(argv) == 0
    result = json.loads((tmp_path / "o" / "needle.json").read_text())
    units = {u["condition"]: u for u in result["units"]}
    assert set(units) == {"uncompressed", "pressed"} and result["period"] == 4
    assert result["compression"]["class"] == "SelectionPress" and result["compression"]["kind"] == "chunk" and result["compression"]["budget"] == 2
    batch = ProseNeedle(str(tokenizer_dir), seq_len=T, haystack_dir=str(haystack), n_depths=2,
                        value_digits=1).sample(N, R)
    model = LlamaForCausalLM.from_pretrained(llama_dir).eval()
    clean = phase_sweep(model, batch, n_boot=20, n_perm=20, progress=False, batch_size=2)
    press_attention(model, SelectionPress("chunk", 4, 2, local=4, sink=1))
    pressed = phase_sweep(model, batch, n_boot=20, n_perm=20, progress=False, batch_size=2)
    assert np.array_equal(PhaseCurve.from_dict(units["pressed"]["curve"]).correct, pressed.correct.astype(bool))
    assert np.array_equal(PhaseCurve.from_dict(units["uncompressed"]["curve"]).correct, clean.correct.astype(bool))
    assert pressed.correct.tolist() != clean.correct.tolist()  # the press changed which rows are right


def test_a_static_press_equals_a_direct_sweep_and_says_when_it_changes_nothing(llama_dir, tokenizer_dir,  # noqa: F811
                                                                                  haystack, tmp_path):  # noqa: F811
    from transformers import LlamaForCausalLM

    from phaseinterp.backends.presses import SelectionPress, press_attention
    from phaseinterp.tasks.scoring import prompt_length

    def argv(out, digits):
        a = _argv(llama_dir, tokenizer_dir, haystack, out)
        i = a.index("--compress")
        a[i:i + 3] = ["--press", "token", "--chunk", "2", "--budget", "1", "--static", "--observe", "3"]
        a[a.index("--value-digits") + 1] = str(digits)
        return a

    assert main(argv(tmp_path / "o", 3)) == 0
    units = {u["condition"]: u for u in json.loads((tmp_path / "o" / "needle.json").read_text())["units"]}
    batch = ProseNeedle(str(tokenizer_dir), seq_len=T, haystack_dir=str(haystack), n_depths=2,
                        value_digits=3).sample(N, R)
    model = LlamaForCausalLM.from_pretrained(llama_dir).eval()
    press_attention(model, SelectionPress("token", 2, 1, local=4, sink=1, prefill=prompt_length(batch), observe=3))
    pressed = phase_sweep(model, batch, n_boot=20, n_perm=20, progress=False, batch_size=2)
    assert np.array_equal(PhaseCurve.from_dict(units["pressed"]["curve"]).correct, pressed.correct.astype(bool))
    with pytest.warns(UserWarning, match="--static at .* tokens changes nothing"):
        assert main(argv(tmp_path / "one", 1)) == 0  # a one-token answer is predicted in prefill


def test_press_options_are_exclusive_with_compress_and_match_the_library(tmp_path, capsys):
    from phaseinterp.backends import presses

    assert needle_cmd.PRESSES == presses.KINDS
    assert main(["needle", "x", "--press", "chunk", "--compress", "8", "8", "--out", str(tmp_path / "o")]) == 2
    assert "--compress and --press chunk are exclusive" in capsys.readouterr().err
    assert main(["needle", "x", "--budget", "2", "--out", str(tmp_path / "o")]) == 2
    assert "allowed only with --press chunk|token" in capsys.readouterr().err
    assert main(["needle", "x", "--static", "--out", str(tmp_path / "o")]) == 2
    assert "--chunk, --budget, --static and --observe set the press" in capsys.readouterr().err
    assert main(["needle", "x", "--press", "token", "--budget", "0", "--out", str(tmp_path / "o")]) == 2
    assert "--press token --chunk 8 --budget 0: budget=0 is invalid: allowed an integer >= 1" in capsys.readouterr().err
