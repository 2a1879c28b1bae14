"""Our models' vocabulary, by role: the record-lookup layout every shipped model was trained on, and
TransformerLens's `to_tokens`, `to_string` and `to_str_tokens` on it.

A model of `vocab_size` V reads a synthetic vocabulary: token 0 is BOS; of the other V - 1 ids, the
last eighth are filler and the rest is halved between keys (first half) and values (second half).
Names say the role: "BOS", "K{i}" (the i-th key), "V{i}" (the i-th value), "FILL" (any filler) and
"#{id}" for an id in no role. This is `phaseinterp.tasks.TokenPools.synthetic`'s layout and naming
(the tasks floor sits above the model, so the layout is restated here; tests/test_vocab.py keeps the
two equal), and every shipped card's task vocabulary is its model's (the same test).

Text is names separated by spaces: `model.to_tokens("K5 V5 FILL K5")` prepends BOS as TransformerLens
does; "FILL" reads as the first filler id.

Example:
    >>> vocab = Vocabulary.synthetic(64)
    >>> vocab.names([0, 1, 29, 62]), vocab.ids("BOS K0 V0 FILL #7")
    (['BOS', 'K0', 'V0', 'FILL'], [0, 1, 29, 57, 7])
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Any, Literal, Sequence

import numpy as np
import torch
from jaxtyping import Int
from torch import Tensor

#: Share of the non-BOS ids that are filler (`TokenPools.synthetic`'s default).
FILLER_FRACTION = 0.125


@dataclass(frozen=True)
class Vocabulary:
    """Token ids by role. `keys`, `values`, `filler`: the ids of each role, in order (`K{i}` is `keys[i]`)."""

    size: int
    bos: int
    keys: tuple[int, ...]
    values: tuple[int, ...]
    filler: tuple[int, ...]

    @classmethod
    def synthetic(cls, vocab_size: int, bos_id: int = 0) -> Vocabulary:
        """The record-lookup layout of a `vocab_size` vocabulary (see the module docstring)."""
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, (int, np.integer)) or vocab_size < 8:
            raise ValueError(f"vocab_size={vocab_size!r} is invalid: allowed an integer >= 8")
        if not 0 <= bos_id < vocab_size:
            raise ValueError(f"bos_id={bos_id} is invalid: allowed an id in [0, {vocab_size})")
        ids = [i for i in range(int(vocab_size)) if i != bos_id]
        n_fill = max(1, int(FILLER_FRACTION * len(ids)))
        rest, filler = ids[:-n_fill], ids[-n_fill:]
        half = len(rest) // 2
        return cls(int(vocab_size), bos_id, tuple(rest[:half]), tuple(rest[half:2 * half]), tuple(filler))

    @cached_property
    def _by_id(self) -> dict[int, str]:
        names = {t: "FILL" for t in self.filler}
        names.update({t: f"K{i}" for i, t in enumerate(self.keys)})
        names.update({t: f"V{i}" for i, t in enumerate(self.values)})
        names[self.bos] = "BOS"
        return names

    def name(self, token: int) -> str:
        """The name of one id ("#{id}" for an id in no role)."""
        return self._by_id.get(int(token), f"#{int(token)}")

    def names(self, tokens: Sequence[int]) -> list[str]:
        return [self.name(t) for t in tokens]

    def id(self, name: str) -> int:
        """The id a name reads as; ValueError naming the name and what is allowed."""
        pools = {"K": self.keys, "V": self.values}
        if name == "BOS":
            return self.bos
        if name == "FILL":
            return self.filler[0]
        if name[:1] in pools and name[1:].isdigit():
            pool, i = pools[name[0]], int(name[1:])
            if i < len(pool):
                return pool[i]
            raise ValueError(f"token name {name!r} is out of range: allowed {name[0]}0 .. {name[0]}{len(pool) - 1}")
        if name[:1] == "#" and name[1:].isdigit() and int(name[1:]) < self.size:
            return int(name[1:])
        raise ValueError(f"token name {name!r} is invalid: allowed BOS, K0 .. K{len(self.keys) - 1}, "
                         f"V0 .. V{len(self.values) - 1}, FILL or #ID with ID in [0, {self.size})")

    def ids(self, text: str) -> list[int]:
        """The ids of names separated by whitespace."""
        if not isinstance(text, str):
            raise ValueError(f"text {text!r} is invalid: allowed a string of token names such as 'BOS K5 V5 FILL'")
        return [self.id(name) for name in text.split()]


def _rows(tokens: Any) -> tuple[np.ndarray, int]:
    """Integer ids as a 2-D array, with the input's number of dimensions (0, 1 or 2)."""
    arr = np.asarray(tokens.detach().cpu() if isinstance(tokens, Tensor) else tokens)
    if arr.ndim > 2 or (arr.size and not np.issubdtype(arr.dtype, np.integer)):
        raise ValueError(f"tokens of shape {arr.shape} and dtype {arr.dtype} are invalid: allowed integer ids, "
                         "a scalar, 1-D [pos] or 2-D [batch, pos]")
    return arr.reshape(-1, arr.shape[-1]) if arr.ndim else arr.reshape(1, 1), arr.ndim


@lru_cache(maxsize=8)
def synthetic(vocab_size: int) -> Vocabulary:
    """`Vocabulary.synthetic(vocab_size)`, built once per size."""
    return Vocabulary.synthetic(vocab_size)


class TokenNames:
    """TransformerLens's tokenizer methods for a model with `self.cfg.vocab_size` and `self.cfg.n_ctx`:
    `to_tokens`, `to_string`, `to_str_tokens`, with TransformerLens's signatures, on `self.vocab`
    (the synthetic layout of the model's vocabulary unless one is set: `model.vocab = Vocabulary(...)`)."""

    cfg: Any

    @property
    def vocab(self) -> Vocabulary:
        custom = self.__dict__.get("_custom_vocab")
        return custom if custom is not None else synthetic(self.cfg.vocab_size)

    @vocab.setter
    def vocab(self, vocab: Vocabulary) -> None:
        if not isinstance(vocab, Vocabulary) or vocab.size > self.cfg.vocab_size:
            raise ValueError(f"vocab={vocab!r} is invalid: allowed a Vocabulary of at most the model's "
                             f"{self.cfg.vocab_size} ids")
        self.__dict__["_custom_vocab"] = vocab

    def to_tokens(self, input: str | list[str], prepend_bos: bool | None = None,
                  padding_side: Literal["left", "right"] | None = None, move_to_device: bool = True,
                  truncate: bool = True) -> Int[Tensor, "batch pos"]:
        """Token ids of text (names separated by spaces, see `Vocabulary`), `[batch, pos]`.

        Args:
            input: a string, or a list of strings (one row each, padded to the longest with filler).
            prepend_bos: put BOS first (default True, as TransformerLens does for its models).
            padding_side: where shorter rows are padded, "right" (default) or "left".
            move_to_device: put the ids on the model's device.
            truncate: cut rows to the model's context (`cfg.n_ctx`).
        """
        texts = [input] if isinstance(input, str) else input
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
            raise ValueError(f"input {input!r} is invalid: allowed a string of token names or a non-empty list of them")
        if padding_side not in (None, "left", "right"):
            raise ValueError(f"padding_side={padding_side!r} is invalid: allowed 'left' or 'right'")
        bos = [self.vocab.bos] if prepend_bos is None or prepend_bos else []
        rows = [bos + self.vocab.ids(t) for t in texts]
        if truncate:
            rows = [r[:self.cfg.n_ctx] for r in rows]
        width = max(len(r) for r in rows)
        pad = self.vocab.filler[0]  # our vocabulary has no pad token: filler is what prompts are padded with
        rows = [([pad] * (width - len(r)) + r) if padding_side == "left" else (r + [pad] * (width - len(r)))
                for r in rows]
        tokens = torch.tensor(rows, dtype=torch.long)
        return tokens.to(next(self.parameters()).device) if move_to_device else tokens  # type: ignore[attr-defined]

    def to_string(self, tokens: Any) -> str | list[str]:
        """Names of ids joined by spaces: a string for a scalar or 1-D input, a list for 2-D."""
        rows, ndim = _rows(tokens)
        texts = [" ".join(self.vocab.names(row.tolist())) for row in rows]
        return texts if ndim == 2 else texts[0]

    def to_str_tokens(self, input: Any, prepend_bos: bool | None = None,
                      padding_side: Literal["left", "right"] | None = None) -> list[str] | list[list[str]]:
        """One name per token: of a string (read by `to_tokens`, BOS prepended unless `prepend_bos=False`),
        or of ids (a list or tensor, 1-D or `[1, pos]`: a list; `[batch, pos]`: a list per row)."""
        texts = [input] if isinstance(input, str) else input
        if isinstance(texts, list) and texts and all(isinstance(t, str) for t in texts):
            rows = self.to_tokens(input, prepend_bos=prepend_bos, padding_side=padding_side, move_to_device=False)
            names = [self.vocab.names(r) for r in rows.tolist()]
            return names[0] if isinstance(input, str) else names
        arr, ndim = _rows(input)
        names = [self.vocab.names(row.tolist()) for row in arr]
        return names[0] if ndim < 2 or len(names) == 1 else names


__all__ = ["FILLER_FRACTION", "TokenNames", "Vocabulary", "synthetic"]
