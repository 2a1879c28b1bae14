"""Text-mode NIAH with the DeepSeek-V4 protocol on real (offline) tokenizers: positions verified."""

import itertools

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from phaseinterp.tasks.niah import PAPER_DENSITY, deepseek_niah, single_token_words
from tests.test_tasks_text import make_bpe_tokenizer

SYLLABLES = ["".join(p) for p in itertools.product("bcdfghklmnprstvz", "aeiou", "bcdfghklmnprstvz")]


def word_tokenizer(n_words: int = 508) -> PreTrainedTokenizerFast:
    vocab = {t: i for i, t in enumerate(["<s>", "</s>", "<pad>", "<unk>"])}
    vocab.update({w: i + 4 for i, w in enumerate(SYLLABLES[:n_words])})
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                                   pad_token="<pad>")


@pytest.fixture(scope="module")
def tok():
    return word_tokenizer()


@pytest.mark.parametrize("seq_len", [256, 640])
def test_deepseek_protocol_positions_survive_retokenization(tok, seq_len):
    task = deepseek_niah(tok, seq_len)
    n = int(seq_len * PAPER_DENSITY)
    assert task.task.n_records == n and task.task.key_len == 2 and task.task.value_len == 2
    batch = task.sample(2, 8, seed=1)
    T = batch.tokens.shape[1]
    assert T == seq_len and sorted(set(batch.residue.tolist())) == list(range(8))
    assert (batch.query_pos == T - 1).all()  # the query position is fixed
    rows = torch.arange(len(batch))
    for row in range(len(batch)):
        text = task.text(batch.tokens[row])
        assert tok(text, add_special_tokens=False)["input_ids"] == batch.tokens[row].tolist()
        pieces = tok.convert_ids_to_tokens(batch.tokens[row].tolist())
        k, v = int(batch.key_pos[row]), int(batch.value_pos[row])
        assert v == k + 2 and pieces[T - 2 : T] == pieces[k : k + 2]  # the query repeats the two-token key
        assert pieces[v] == tok.convert_ids_to_tokens(int(batch.answer[row]))
        # four-token records; the target is the middle record of the haystack
        assert batch.record_pos[row].tolist().index(k) == n // 2
        assert (batch.record_pos[row].diff() >= 4).all()
    assert (batch.tokens[rows, batch.key_pos] != batch.tokens[rows, batch.value_pos]).all()


def test_deepseek_protocol_is_position_matched(tok):
    batch = deepseek_niah(tok, 256).sample(16, 8, seed=0)
    means = list(batch.meta["achieved_mean"].values())
    assert max(means) - min(means) <= 1.0  # equal mean target position across residues (up to rounding)
    with pytest.raises(ValueError, match="seq_len=8 is invalid: allowed an integer >= 16"):
        deepseek_niah(tok, 8)
    with pytest.raises(ValueError, match=r"n=600 is out of range: the tokenizer has only \d+ single-token"):
        single_token_words(tok, 600)


def test_single_token_words_on_a_bpe_tokenizer():
    bpe, _ = make_bpe_tokenizer(list(SYLLABLES[:200]), vocab_size=500)
    found = single_token_words(bpe, 40, seed=2)
    assert len(set(found)) == 40 and found == single_token_words(bpe, 40, seed=2)
    base = bpe(found[0], add_special_tokens=False)["input_ids"]
    for w in found[1:]:
        assert len(bpe(found[0] + " " + w, add_special_tokens=False)["input_ids"]) == len(base) + 1
