"""Filler families for the completion-flip sweep: exactly L tokens, built at the token level.

    "symbol"   one token repeated L times (e.g. "#")
    "words"    single-token words, cycled in a fixed seeded order
    "comment"  a comment line: the comment prefix, words, then a newline token (L >= prefix + 1)

Fillers are token sequences, not text: re-tokenizing "####" would merge symbols and change L.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

FAMILIES = ("symbol", "words", "comment")


@dataclass(frozen=True)
class FillerSpec:
    """Token ids the filler families draw from.

    Attributes:
        symbol: the repeated token of "symbol".
        words: word tokens of "words" and "comment" (cycled in the given order).
        comment_prefix: tokens opening a comment line (e.g. the ids of "#").
        newline: the token closing a comment line.

    Example:
        >>> FillerSpec(symbol=5, words=(7, 8), comment_prefix=(3,), newline=4).tokens("comment", 5)
        [3, 7, 8, 7, 4]
    """

    symbol: int
    words: tuple[int, ...]
    comment_prefix: tuple[int, ...] = ()
    newline: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "words", tuple(int(w) for w in self.words))
        object.__setattr__(self, "comment_prefix", tuple(int(w) for w in self.comment_prefix))
        if not self.words:
            raise ValueError("words=() is empty: allowed one or more token ids")
        for name, ids in (("symbol", [self.symbol]), ("words", self.words), ("comment_prefix", self.comment_prefix),
                          ("newline", [] if self.newline is None else [self.newline])):
            for i in ids:
                if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or i < 0:
                    raise ValueError(f"{name} id {i!r} is invalid: allowed integers >= 0")

    def min_length(self, family: str) -> int:
        """Shortest non-empty filler of `family` (L = 0, no filler, is always allowed)."""
        return len(self.comment_prefix) + 1 if family == "comment" else 1

    def tokens(self, family: str, length: int) -> list[int]:
        """The filler of `family` with exactly `length` tokens."""
        if family not in FAMILIES:
            raise ValueError(f"family={family!r} is invalid: allowed {list(FAMILIES)}")
        if isinstance(length, bool) or not isinstance(length, (int, np.integer)) or length < 0:
            raise ValueError(f"length={length!r} is invalid: allowed an integer >= 0")
        if length == 0:
            return []
        if length < self.min_length(family):
            raise ValueError(f"length={length} is out of range for family {family!r}: allowed 0 or >= "
                             f"{self.min_length(family)}")
        if family == "symbol":
            return [int(self.symbol)] * length
        if family == "words":
            return [self.words[i % len(self.words)] for i in range(length)]
        if self.newline is None:
            raise ValueError("family 'comment' needs a newline token id")
        body = length - len(self.comment_prefix) - 1
        return [*self.comment_prefix, *(self.words[i % len(self.words)] for i in range(body)), int(self.newline)]

    @classmethod
    def from_tokenizer(cls, tokenizer: Any, *, symbol: str = "#", words: Sequence[str] | None = None,
                       comment_prefix: str = "#", newline: str = "\n", n_words: int = 64, seed: int = 0) -> FillerSpec:
        """Ids from a HF tokenizer: `symbol` and `newline` must be single tokens; words default to
        `n_words` single-token words from the vocabulary (`phaseinterp.tasks.niah.single_token_words`)."""
        def one(text: str, what: str) -> int:
            ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
            if len(ids) != 1:
                raise ValueError(f"{what} {text!r} is invalid: it tokenizes to {len(ids)} tokens, allowed exactly 1")
            return ids[0]

        if words is None:
            from phaseinterp.tasks.niah import single_token_words

            words = single_token_words(tokenizer, n_words, seed=seed)
        word_ids = [one(" " + w, "word") if len(tokenizer(" " + w, add_special_tokens=False)["input_ids"]) == 1
                    else one(w, "word") for w in words]
        prefix = list(tokenizer(comment_prefix, add_special_tokens=False)["input_ids"])
        nl = list(tokenizer(newline, add_special_tokens=False)["input_ids"])
        return cls(symbol=one(symbol, "symbol"), words=tuple(word_ids), comment_prefix=tuple(prefix),
                   newline=nl[0] if len(nl) == 1 else None)
