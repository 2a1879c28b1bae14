"""Text mode: positions survive re-tokenization with offline word-level and BPE tokenizers."""

import itertools

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from phaseinterp.tasks import TextRecordLookup

KEYS = [f"w{i}" for i in range(10, 60)]
VALUES = [f"w{i}" for i in range(100, 200)]
FILLER = [f"w{i}" for i in range(300, 320)]


@pytest.fixture(scope="module")
def word_tokenizer():
    # As in RECIPES.md, but with BOS/EOS/PAD as separate special words: a special token "w1"
    # would also match inside "w10" and split it, which the single-token check reports.
    vocab = {t: i for i, t in enumerate(["<s>", "</s>", "<pad>", "<unk>"])}
    vocab.update({f"w{i}": i + 4 for i in range(500)})
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="<unk>", bos_token="<s>",
                                   eos_token="</s>", pad_token="<pad>")


@pytest.fixture(scope="module")
def bpe_tokenizer():
    return make_bpe_tokenizer()


def make_bpe_tokenizer(words=None, vocab_size: int = 400):
    """A byte-level BPE tokenizer trained offline on `words` (default: 100 syllables)."""
    words = words or ["".join(p) for p in itertools.product("bcdfg", "aeiou", "klmn")]
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<s>", "</s>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tk.train_from_iterator([" " + " ".join(words)] * 20, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="</s>"), words


def check_positions(task, batch, tokenizer, keys, values, special):
    """Independent of `verify`: re-tokenize each prompt and read the words at the recorded positions."""
    for row in range(len(batch)):
        text = task.text(batch.tokens[row])
        ids = tokenizer(text, add_special_tokens=special)["input_ids"]
        assert ids == batch.tokens[row].tolist()
        pieces = tokenizer.convert_ids_to_tokens(ids)
        key = pieces[batch.key_pos[row]].lstrip("Ġ")
        value = pieces[batch.value_pos[row]].lstrip("Ġ")
        assert key in keys and value in values
        assert tokenizer.convert_ids_to_tokens(int(batch.answer[row])).lstrip("Ġ") == value
        assert batch.residue[row] == batch.key_pos[row] % batch.modulus


@pytest.mark.parametrize("protocol", ["prefix", "insequence"])
def test_word_level_positions_survive_retokenization(word_tokenizer, protocol):
    task = TextRecordLookup(word_tokenizer, KEYS, VALUES, FILLER, n_records=16, n_demos=2, protocol=protocol)
    batch = task.sample(3, 4, seed=1)
    assert batch.tokens[0, 0].item() == word_tokenizer.bos_token_id
    assert task.text(batch.tokens[0]).startswith("<s> w")  # BOS written as text: no post-processor
    check_positions(task, batch, word_tokenizer, KEYS, VALUES, special=False)


def test_chat_template_positions(word_tokenizer):
    tok = PreTrainedTokenizerFast(tokenizer_object=word_tokenizer.backend_tokenizer, unk_token="<unk>",
                                  bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    tok.chat_template = "{{ bos_token }} w4 w5 {% for m in messages %}{{ m['content'] }}{% endfor %} w6"
    task = TextRecordLookup(tok, KEYS, VALUES, FILLER, chat_template=True, n_records=16, n_demos=2)
    assert task.task.pools.head == (0, 8, 9) and task.task.pools.tail == (10,)
    batch = task.sample(3, 4, seed=0)
    T = batch.tokens.shape[1]
    assert (batch.query_pos == T - 1).all() and (batch.tokens[:, -1] == 10).all()
    assert (batch.tokens[:, -2] == batch.tokens[torch.arange(len(batch)), batch.key_pos]).all()
    check_positions(task, batch, tok, KEYS, VALUES, special=False)
    with pytest.raises(ValueError, match="n_queries=2 cannot be used with a template footer"):
        TextRecordLookup(tok, KEYS, VALUES, FILLER, chat_template=True, n_records=16, n_queries=2)


def test_bpe_positions_survive_retokenization(bpe_tokenizer):
    tok, words = bpe_tokenizer
    keys, values, filler = words[:30], words[30:90], words[90:100]
    task = TextRecordLookup(tok, keys, values, filler, n_records=12, n_demos=2, protocol="insequence")
    batch = task.sample(2, 4, seed=0)
    check_positions(task, batch, tok, keys, values, special=False)


def test_multi_token_words_raise(word_tokenizer, bpe_tokenizer):
    with pytest.raises(ValueError, match=r"key 'w7 w8' is not a single token: it tokenizes to \['w7', 'w8'\]"):
        TextRecordLookup(word_tokenizer, KEYS + ["w7 w8"], VALUES, FILLER)
    with pytest.raises(ValueError, match=r"value 'zzz' is unknown to the tokenizer"):
        TextRecordLookup(word_tokenizer, KEYS, VALUES + ["zzz"], FILLER)
    tok, words = bpe_tokenizer
    with pytest.raises(ValueError, match=r"key 'zzqx' is not a single token: it tokenizes to \['Ġ', 'z', 'z', 'q', 'x'\]"):
        TextRecordLookup(tok, words[:30] + ["zzqx"], words[30:90], words[90:100])
    with pytest.raises(ValueError, match="word lists must be disjoint"):
        TextRecordLookup(word_tokenizer, KEYS, KEYS[:1] + VALUES, FILLER)


def test_verify_detects_a_changed_tokenization(word_tokenizer):
    task = TextRecordLookup(word_tokenizer, KEYS, VALUES, FILLER, n_records=8, n_demos=1)
    batch = task.sample(1, 2)
    task._words[int(batch.tokens[0, 1])] = "w7 w8"  # one word now renders as two tokens
    with pytest.raises(ValueError, match="re-tokenizing prompt 0 changed position"):
        task.verify(batch)
