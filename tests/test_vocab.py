"""Our model speaks TransformerLens's tokenizer idiom on its own vocabulary: `to_tokens`, `to_string`
and `to_str_tokens` with TransformerLens 4's signatures, role-aware names (BOS, K5, V100, FILL)
that are the task's names for the same ids, on the vocabulary of the model's card."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import numpy as np
import pytest
import torch

import phaseinterp
from phaseinterp.model.vocab import Vocabulary
from phaseinterp.tasks import RecordLookup, TokenPools

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def model():
    return phaseinterp.load("w4s4")


@pytest.mark.parametrize("size", [8, 64, 256, 1000])
def test_the_layout_and_names_are_the_tasks(size):
    ids = np.arange(size)
    assert Vocabulary.synthetic(size).names(ids.tolist()) == TokenPools.synthetic(size).to_str_tokens(ids)


def test_every_shipped_card_trains_on_its_models_vocabulary():
    """So the synthetic layout of `cfg.vocab_size` is the card's vocabulary (`data.eval_task.vocab_size`)."""
    checked = 0
    for path in (ROOT / "assets" / "checkpoints").rglob("*.json"):
        card = json.loads(path.read_text())
        vocab = card.get("model_config", {}).get("vocab_size") if isinstance(card, dict) else None
        if vocab is not None and path.with_suffix(".safetensors").is_file():
            assert card["data"]["eval_task"]["vocab_size"] == vocab, path.name
            checked += 1
    assert checked >= 40


def test_to_tokens_and_back(model):
    tokens = model.to_tokens("K5 V100 FILL K5")
    assert tokens.dtype == torch.long and tokens.tolist() == [[0, 6, 213, 225, 6]]  # 256 ids: keys 1.., values 113..
    assert model.to_str_tokens(tokens) == ["BOS", "K5", "V100", "FILL", "K5"]
    assert model.to_string(tokens[0]) == "BOS K5 V100 FILL K5" and model.to_string(tokens) == ["BOS K5 V100 FILL K5"]
    assert model.to_string(torch.tensor(6)) == "K5"
    assert model.to_str_tokens("K5 V100") == ["BOS", "K5", "V100"]
    assert model.to_str_tokens("K5 V100", prepend_bos=False) == ["K5", "V100"]
    assert model.to_tokens("#7 K0", prepend_bos=False).tolist() == [[7, 1]]


def test_a_batch_pads_on_the_side_asked(model):
    right = model.to_tokens(["K1", "K1 V2 K3"])
    left = model.to_tokens(["K1", "K1 V2 K3"], padding_side="left")
    fill = model.vocab.filler[0]
    assert right.tolist() == [[0, 2, fill, fill], [0, 2, 115, 4]]
    assert left.tolist() == [[fill, fill, 0, 2], [0, 2, 115, 4]]
    assert model.to_str_tokens(["K1", "K1 V2 K3"], padding_side="left")[0] == ["FILL", "FILL", "BOS", "K1"]
    long = "K1 " * (model.cfg.n_ctx + 10)
    assert model.to_tokens(long).shape == (1, model.cfg.n_ctx)  # truncated to the context
    assert model.to_tokens(long, truncate=False).shape == (1, model.cfg.n_ctx + 11)


def test_names_of_a_real_batch_are_the_tasks(model):
    task = RecordLookup(vocab_size=256, n_records=10, n_demos=6, seq_len=64)
    batch = task.sample(2, modulus=8, seed=0)
    assert model.to_str_tokens(batch.tokens[:3]) == task.pools.to_str_tokens(batch.tokens[:3])
    assert model.to_str_tokens(batch.tokens[:1]) == task.pools.to_str_tokens(batch.tokens[0])  # [1, pos]: one list
    assert model.to_tokens(model.to_string(batch.tokens[0]), prepend_bos=False)[0, 1:].tolist() == \
        [t if model.vocab.name(t) != "FILL" else model.vocab.filler[0] for t in batch.tokens[0, 1:].tolist()]


def test_transformer_lens_signatures():
    from transformer_lens.model_bridge import TransformerBridge

    for name in ("to_tokens", "to_string", "to_str_tokens"):
        ours = list(inspect.signature(getattr(phaseinterp.HookedCompressedTransformer, name)).parameters)
        theirs = list(inspect.signature(getattr(TransformerBridge, name)).parameters)
        assert ours == theirs, name


def test_bad_names_and_inputs_say_what_is_allowed(model):
    with pytest.raises(ValueError, match=r"token name 'K999' is out of range: allowed K0 \.\. K111"):
        model.to_tokens("K999")
    with pytest.raises(ValueError, match=r"token name 'dog' is invalid: allowed BOS, K0 \.\. K111, V0 \.\. V111, FILL"):
        model.to_tokens("K1 dog")
    from jaxtyping import TypeCheckError  # the suite type-checks calls (conftest.py); users get the ValueError

    with pytest.raises((ValueError, TypeCheckError), match="padding_side"):
        model.to_tokens(["K1"], padding_side="middle")
    with pytest.raises(ValueError, match="tokens of shape"):
        model.to_string(torch.zeros(1, 2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="allowed a Vocabulary of at most the model's 256 ids"):
        model.vocab = Vocabulary.synthetic(512)


def test_a_custom_vocabulary():
    fresh = phaseinterp.load("w4s4")
    fresh.vocab = Vocabulary.synthetic(64)
    assert fresh.to_str_tokens(torch.tensor([0, 1, 29, 62])) == ["BOS", "K0", "V0", "FILL"]
    assert fresh.to_str_tokens(torch.tensor([200])) == ["#200"]
