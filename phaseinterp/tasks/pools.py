"""Token pools: which token ids a task may use as BOS/template, keys, values and filler."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

#: Largest synthetic vocabulary: the pools hold every id (a huge size would exhaust memory, not fail).
MAX_SYNTHETIC_VOCAB = 2**24


@dataclass(frozen=True)
class TokenPools:
    """Disjoint sets of token ids a record-lookup task draws from.

    Attributes:
        keys: ids usable as key parts.
        values: ids usable as value parts. A record's split (evaluation or calibration) is fixed
            by the parity of its key and value indices in these pools, so both splits need
            values of both parities.
        filler: ids used for padding.
        head: ids that open every prompt (BOS, or a chat template's header).
        tail: ids that close every prompt after the final query (a chat template's footer).

    Example:
        >>> pools = TokenPools.synthetic(64)
        >>> int(pools.head[0]), len(pools.keys), len(pools.values), len(pools.filler)
        (0, 28, 28, 7)
    """

    keys: np.ndarray
    values: np.ndarray
    filler: np.ndarray
    head: Sequence[int] = (0,)
    tail: Sequence[int] = ()

    def __post_init__(self) -> None:
        for name in ("keys", "values", "filler"):
            arr = np.asarray(getattr(self, name), dtype=np.int64).reshape(-1)
            if arr.size == 0:
                raise ValueError(f"token pool {name!r} is empty; it needs at least one token id")
            if len(np.unique(arr)) != arr.size:
                raise ValueError(f"token pool {name!r} repeats a token id")
            if arr.min() < 0:
                raise ValueError(f"token pool {name!r} holds a negative id {int(arr.min())}")
            object.__setattr__(self, name, arr)
        object.__setattr__(self, "head", tuple(int(t) for t in self.head))
        object.__setattr__(self, "tail", tuple(int(t) for t in self.tail))
        sets = {n: set(getattr(self, n).tolist()) for n in ("keys", "values", "filler")}
        sets["head/tail"] = set(self.head) | set(self.tail)
        names = list(sets)
        for i, a in enumerate(names):
            for b in names[i + 1 :]:
                both = sets[a] & sets[b]
                if both:
                    raise ValueError(
                        f"token pools {a!r} and {b!r} share ids {sorted(both)[:5]}; they must be disjoint"
                    )

    @property
    def max_id(self) -> int:
        """Largest token id any pool uses."""
        parts = [self.keys.max(), self.values.max(), self.filler.max(), *self.head, *self.tail]
        return int(max(parts))

    @classmethod
    def synthetic(cls, vocab_size: int, bos_id: int = 0, filler_fraction: float = 0.125) -> TokenPools:
        """Split a synthetic vocabulary into contiguous ranges: BOS, keys, values, filler.

        Token `bos_id` is BOS; of the other `vocab_size - 1` ids, the last
        `max(1, floor(filler_fraction * (vocab_size - 1)))` are filler and the rest is halved
        between keys (first half) and values (second half).

        Args:
            vocab_size: model vocabulary size, 8 to `MAX_SYNTHETIC_VOCAB` (2^24: every id is held in
                memory; real vocabularies are far smaller).
            bos_id: id of the BOS token, in [0, vocab_size).
            filler_fraction: share of non-BOS ids used as filler, in (0, 0.5].

        Raises:
            ValueError: on a vocabulary too small or parameters out of range.
        """
        if (isinstance(vocab_size, bool) or not isinstance(vocab_size, (int, np.integer))
                or not 8 <= vocab_size <= MAX_SYNTHETIC_VOCAB):
            raise ValueError(f"vocab_size={vocab_size!r} is invalid: allowed an integer in [8, {MAX_SYNTHETIC_VOCAB}] "
                             "(the pools hold every id)")
        if not 0 <= bos_id < vocab_size:
            raise ValueError(f"bos_id={bos_id} out of range [0, {vocab_size})")
        if not 0 < filler_fraction <= 0.5:
            raise ValueError(f"filler_fraction={filler_fraction} out of range (0, 0.5]")
        ids = np.delete(np.arange(vocab_size, dtype=np.int64), bos_id)
        n_fill = max(1, int(filler_fraction * len(ids)))
        rest, filler = ids[:-n_fill], ids[-n_fill:]
        half = len(rest) // 2
        return cls(keys=rest[:half], values=rest[half : 2 * half], filler=filler, head=(bos_id,))

    def to_str_tokens(self, tokens) -> list[str] | list[list[str]]:
        """Role-aware names of token ids: "BOS" (the single head token; several: "H0", "H1", ...),
        "K{i}" = `keys[i]`, "V{i}" = `values[i]`, "FILL" (any filler), "T{i}" = `tail[i]`, and
        "#{id}" for an id in no pool. A 1-D input gives a list, a 2-D input a list per row.

        Example:
            >>> TokenPools.synthetic(64).to_str_tokens([0, 1, 29, 62])
            ['BOS', 'K0', 'V0', 'FILL']
        """
        arr = np.asarray(tokens.detach().cpu() if hasattr(tokens, "detach") else tokens)
        if arr.ndim not in (1, 2) or (arr.size and not np.issubdtype(arr.dtype, np.integer)):
            raise ValueError(f"tokens of shape {arr.shape} and dtype {arr.dtype} are invalid: allowed integer ids, "
                             "1-D [pos] or 2-D [batch, pos]")
        names = self._names()
        rows = [[names.get(int(t), f"#{int(t)}") for t in row] for row in arr.reshape(-1, arr.shape[-1])]
        return rows[0] if arr.ndim == 1 else rows

    def _names(self) -> dict[int, str]:
        names = {int(t): "FILL" for t in self.filler}
        names.update({int(t): f"K{i}" for i, t in enumerate(self.keys)})
        names.update({int(t): f"V{i}" for i, t in enumerate(self.values)})
        names.update({t: f"T{i}" for i, t in enumerate(self.tail)})
        names.update({t: "BOS" if len(self.head) == 1 else f"H{i}" for i, t in enumerate(self.head)})
        return names


def to_str_tokens(tokens, vocab) -> list[str] | list[list[str]]:
    """Names of token ids for labels: `vocab` is `TokenPools`, a task with `.pools` (RecordLookup),
    or the size of a synthetic vocabulary (`TokenPools.synthetic(vocab)`); see
    `TokenPools.to_str_tokens`.

    Example:
        >>> to_str_tokens([0, 1, 29, 62], 64)
        ['BOS', 'K0', 'V0', 'FILL']
    """
    return pools_of(vocab).to_str_tokens(tokens)


def pools_of(vocab) -> TokenPools:
    """The pools `vocab` names (TokenPools, a task with `.pools`, or a synthetic vocabulary size)."""
    if isinstance(vocab, TokenPools):
        return vocab
    if isinstance(getattr(vocab, "pools", None), TokenPools):
        return vocab.pools
    if isinstance(vocab, (int, np.integer)) and not isinstance(vocab, bool):
        return TokenPools.synthetic(int(vocab))
    raise ValueError(f"vocab={vocab!r} is invalid: allowed TokenPools, a task with .pools (RecordLookup) or a "
                     "synthetic vocabulary size (an integer >= 8)")
