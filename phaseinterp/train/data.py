"""The synthetic pretraining mixture: record lookup at random phases and depths, plus a
language-like filler objective. A batch is a pure function of (mixture, seed, step, batch size).

Lookup rows use the token layout of `phaseinterp.tasks.RecordLookup` (the evaluation task), so a
model trained on a mixture can be evaluated on matched prompts:

    BOS | haystack: n records "key value" with filler between them | d demonstrations
        "key value" (copies of other haystack records) | the target record's key

The loss is on the value after every demonstration key and on the final query (position
`seq_len - 1`, label = the target's value). The target record is drawn uniformly from the
haystack and its key position uniformly over the positions it can take, so no phase (position
mod S) and no depth is privileged by the data. Records are either contiguous (a block shifted as a
whole, like the "prefix" protocol) or separated by random gaps (like "insequence").

Language rows are BOS followed by a first-order Markov chain over the filler tokens (a fixed sparse
bigram table drawn from `lm_seed`, each token with `lm_branching` successors of Zipf-like weight),
with next-token loss at every position, weighted by `lm_weight` relative to one lookup answer.

Token ranges come from `TokenPools.synthetic(vocab_size)` (BOS, keys, values, filler), the same
split the evaluation task uses.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any

from phaseinterp.config import check_known_fields

import numpy as np
import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from phaseinterp.tasks.pools import TokenPools

IGNORE = -100


def _bad(name: str, value: Any, allowed: str) -> ValueError:
    return ValueError(f"{name}={value!r} is invalid: allowed {allowed}")


def _int(name: str, value: Any, low: int, high: float = float("inf")) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        upper = "" if high == float("inf") else f" and <= {int(high)}"
        raise _bad(name, value, f"an integer >= {low}{upper}")


def _frac(name: str, value: Any, low_open: bool = False) -> None:
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and (0 < value if low_open else 0 <= value) and value <= 1
    if not ok:
        raise _bad(name, value, "a number in (0, 1]" if low_open else "a number in [0, 1]")


@dataclass(frozen=True)
class Mixture:
    """What the model is trained on. Stored in every checkpoint card so evaluation can build
    matched tasks (`eval_task_kwargs`).

    Attributes:
        vocab_size: size of the synthetic vocabulary (<= the model's), split by
            `TokenPools.synthetic` into BOS (id `bos_id`), keys, values and filler.
        seq_len: tokens per row.
        min_records, max_records: records in a lookup row's haystack (uniform in the range).
        min_demos, max_demos: demonstrations after the haystack (uniform in the range, then
            capped at the row's records - `min_undemonstrated`).
        min_undemonstrated: records a row leaves undemonstrated (the target among them; fewer when
            the row has fewer records). At 1, most rows demonstrate every record but the target,
            whose value is then the one never demonstrated: answerable by exclusion, without
            matching the query's key (docs/training.md, "The exclusion shortcut").
        min_undemonstrated_from: the step from which `min_undemonstrated` applies (before it: 1),
            so that a run can learn exclusion first and lose the shortcut later (0 = from the start).
        contiguous_fraction: share of lookup rows whose records form one contiguous block.
        lm_fraction: share of rows that are language rows.
        lm_weight: loss weight of one language token relative to one lookup answer.
        lm_branching: successors per token in the bigram language.
        lm_seed: seed of the bigram table (the language itself; fixed across steps).
        bos_id: BOS token id.
        filler_fraction: share of non-BOS ids used as filler (see `TokenPools.synthetic`).
        curriculum_steps: for the first `curriculum_steps` steps the haystack is shortened: the
            number of records is capped by a limit growing linearly from `min_records` to
            `max_records` (0 = no curriculum).
        sparse_start: during the curriculum the share of contiguous rows also grows linearly,
            from 0 to `contiguous_fraction`, so early haystacks hold few records spread over the
            row (about one per compressed window) and later ones are dense.
        aligned_steps, aligned_modulus, aligned_phase: for the first `aligned_steps` steps the
            target key sits only at positions `aligned_phase` mod `aligned_modulus` (a
            phase-aligned start: every final query asks for the same offset of a compressed
            window, so picking that offset pays on every row; 0 steps = off). The demonstrations'
            records stay where the haystack puts them; after those steps the target's phase is
            uniform again. A row whose haystack has no position at that phase for its target
            (free filler < modulus; about 1% of the rule's rows at modulus 32, none at 24 or 16)
            keeps a uniform phase.
        aligned_fraction: share of lookup rows that are aligned during those steps (the rest keep
            a uniform phase, so that the position of the aligned phase alone does not answer).
        aligned_decoys, aligned_decoy_modulus: in aligned rows, this many other records also move
            to positions at `aligned_phase` mod `aligned_decoy_modulus` (a divisor of
            `aligned_modulus`, 0 = the same; the compressor's stride leaves more free slots in a
            short row), into free pairs of filler slots (fewer when none is left), so that "the
            record at the aligned phase" does not name the target and only matching the key does.

    Example:
        >>> mix = Mixture(vocab_size=256, seq_len=64)
        >>> batch = make_batch(mix, seed=0, step=0, batch_size=4)
        >>> tuple(batch.tokens.shape), int(batch.tokens[0, 0])
        ((4, 64), 0)
    """

    vocab_size: int = 256
    seq_len: int = 64
    min_records: int = 2
    max_records: int = 10
    min_demos: int = 3
    max_demos: int = 9
    min_undemonstrated: int = 1
    min_undemonstrated_from: int = 0
    contiguous_fraction: float = 0.5
    lm_fraction: float = 0.1
    lm_weight: float = 0.1
    lm_branching: int = 4
    lm_seed: int = 0
    bos_id: int = 0
    filler_fraction: float = 0.125
    curriculum_steps: int = 500
    sparse_start: bool = False
    aligned_steps: int = 0
    aligned_modulus: int = 1
    aligned_phase: int = 0
    aligned_fraction: float = 1.0
    aligned_decoys: int = 0
    aligned_decoy_modulus: int = 0

    def __post_init__(self) -> None:
        _int("vocab_size", self.vocab_size, 8)
        _int("seq_len", self.seq_len, 8)
        _int("min_records", self.min_records, 1)
        _int("max_records", self.max_records, self.min_records)
        _int("min_demos", self.min_demos, 0, self.max_records - 1)
        _int("max_demos", self.max_demos, self.min_demos, self.max_records - 1)
        _int("min_undemonstrated", self.min_undemonstrated, 1, self.max_records)
        _int("min_undemonstrated_from", self.min_undemonstrated_from, 0)
        _frac("contiguous_fraction", self.contiguous_fraction)
        _frac("lm_fraction", self.lm_fraction)
        if isinstance(self.lm_weight, bool) or not isinstance(self.lm_weight, (int, float)) or not 0 <= self.lm_weight < float("inf"):
            raise _bad("lm_weight", self.lm_weight, "a finite number >= 0")
        _int("lm_seed", self.lm_seed, 0)
        _int("bos_id", self.bos_id, 0, self.vocab_size - 1)
        _int("curriculum_steps", self.curriculum_steps, 0)
        _int("aligned_steps", self.aligned_steps, 0)
        _int("aligned_modulus", self.aligned_modulus, 1)
        _int("aligned_phase", self.aligned_phase, 0, self.aligned_modulus - 1)
        _frac("aligned_fraction", self.aligned_fraction)
        _int("aligned_decoys", self.aligned_decoys, 0, self.min_records - 1)
        _int("aligned_decoy_modulus", self.aligned_decoy_modulus, 0, self.aligned_modulus)
        if self.aligned_decoy_modulus and self.aligned_modulus % self.aligned_decoy_modulus:
            raise _bad("aligned_decoy_modulus", self.aligned_decoy_modulus, f"0 or a divisor of aligned_modulus={self.aligned_modulus}")
        if not isinstance(self.sparse_start, bool):
            raise _bad("sparse_start", self.sparse_start, "True or False")
        if not (isinstance(self.filler_fraction, (int, float)) and 0 < self.filler_fraction <= 0.5):
            raise _bad("filler_fraction", self.filler_fraction, "a number in (0, 0.5]")
        need = 1 + 2 * self.max_records + 2 * self.max_demos + 1
        if self.seq_len < need:
            raise _bad("seq_len", self.seq_len, f">= {need} (BOS + {self.max_records} records + {self.max_demos} demos + query)")
        pools = self.pools
        n_fill = len(pools.filler)
        _int("lm_branching", self.lm_branching, 1)
        if n_fill < self.lm_branching:  # the filler pool is derived from vocab_size: name what the user set
            need = math.ceil(self.lm_branching / self.filler_fraction) + 1
            raise _bad("vocab_size", self.vocab_size, f">= {need}, whose filler pool (filler_fraction={self.filler_fraction}) "
                       f"holds the lm_branching={self.lm_branching} successors of each language token (it has {n_fill}); "
                       "or lower lm_branching")
        for name in ("keys", "values"):
            if len(getattr(pools, name)) < self.max_records:
                raise _bad("max_records", self.max_records, f"<= {len(getattr(pools, name))} (size of the {name} pool at vocab_size={self.vocab_size})")

    @property
    def pools(self) -> TokenPools:
        """BOS, key, value and filler token ids (disjoint)."""
        return _pools(self.vocab_size, self.bos_id, self.filler_fraction)

    def token_ranges(self) -> dict[str, list[int]]:
        """Inclusive [first, last] id of each pool (each is contiguous), for cards."""
        p = self.pools
        return {"bos": [p.head[0], p.head[0]], **{k: [int(getattr(p, k)[0]), int(getattr(p, k)[-1])] for k in ("keys", "values", "filler")}}

    def records_limit(self, step: int) -> int:
        """Largest haystack size allowed at `step` (the curriculum)."""
        if self.curriculum_steps == 0 or step >= self.curriculum_steps:
            return self.max_records
        span = self.max_records - self.min_records
        return self.min_records + (span * step) // self.curriculum_steps

    def contiguous_at(self, step: int) -> float:
        """Share of contiguous lookup rows at `step` (`sparse_start` ramps it up)."""
        if not self.sparse_start or self.curriculum_steps == 0 or step >= self.curriculum_steps:
            return self.contiguous_fraction
        return self.contiguous_fraction * step / self.curriculum_steps

    def undemonstrated_at(self, step: int) -> int:
        """Records a row leaves undemonstrated at `step` (at least; fewer records leave all)."""
        return self.min_undemonstrated if step >= self.min_undemonstrated_from else 1

    def aligned_at(self, step: int) -> tuple[int, int] | None:
        """(modulus, phase) the target key's position keeps at `step`, or None (uniform)."""
        if step >= self.aligned_steps or self.aligned_modulus == 1:
            return None
        return self.aligned_modulus, self.aligned_phase

    def eval_task_kwargs(self, n_records: int | None = None, n_demos: int | None = None, protocol: str = "prefix") -> dict[str, Any]:
        """Keyword arguments of a `RecordLookup` matched to this mixture: same vocabulary split and
        sequence length, `max_records` records and the middle of the demonstration range (both
        overridable)."""
        n = self.max_records if n_records is None else n_records
        d = min((self.min_demos + self.max_demos) // 2, n - 1) if n_demos is None else n_demos
        return {"vocab_size": self.vocab_size, "n_records": n, "n_demos": d, "seq_len": self.seq_len, "protocol": protocol}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Mixture":
        check_known_fields(cls, d)
        return cls(**d)


@lru_cache(maxsize=32)
def _pools(vocab_size: int, bos_id: int, filler_fraction: float) -> TokenPools:
    return TokenPools.synthetic(vocab_size, bos_id=bos_id, filler_fraction=filler_fraction)


@lru_cache(maxsize=32)
def bigram_table(mixture: Mixture) -> tuple[np.ndarray, np.ndarray]:
    """The language: for each filler index, `lm_branching` successor indices and their
    probabilities (weights proportional to 1/rank). Depends only on `lm_seed` and the pools."""
    n = len(mixture.pools.filler)
    rng = np.random.default_rng([mixture.lm_seed, 0x1A9])
    succ = np.stack([rng.choice(n, mixture.lm_branching, replace=False) for _ in range(n)])
    w = 1.0 / np.arange(1, mixture.lm_branching + 1)
    return succ, np.broadcast_to(w / w.sum(), succ.shape).copy()


@dataclass(frozen=True)
class TrainBatch:
    """One global batch.

    Attributes:
        tokens: input ids.
        targets: label for the logits at each position (`IGNORE` = no loss).
        weights: loss weight per position (0 where targets is IGNORE).
        query: the final-query positions of lookup rows (the evaluation metric's position).
        lookup: all lookup answer positions (demonstrations and query).
    """

    tokens: Int[Tensor, "batch pos"]
    targets: Int[Tensor, "batch pos"]
    weights: Float[Tensor, "batch pos"]
    query: Bool[Tensor, "batch pos"]
    lookup: Bool[Tensor, "batch pos"]

    def rows(self, start: int, stop: int) -> "TrainBatch":
        """Rows start..stop-1 (a data-parallel shard)."""
        return TrainBatch(*(getattr(self, f.name)[start:stop] for f in dataclasses.fields(self)))

    def to(self, device: torch.device | str) -> "TrainBatch":
        return TrainBatch(*(getattr(self, f.name).to(device) for f in dataclasses.fields(self)))


PHASE_MODULUS = 24  # target key positions are exactly uniform mod every divisor of this (1, 2, 3, 4, 6, 8, 12, 24)


def _uniform_phase_offset(free: int, rng: np.random.Generator) -> int:
    """An offset in [0, free], uniform over a random run of consecutive offsets whose length is a
    multiple of PHASE_MODULUS (all of [0, free] when it is shorter), so `offset mod S` is exactly
    uniform for every S dividing PHASE_MODULUS."""
    length = (free + 1) // PHASE_MODULUS * PHASE_MODULUS or free + 1
    shift = int(rng.integers(free + 2 - length))
    return shift + int(rng.integers(length))


def _aligned_offset(free: int, first: int, aligned: tuple[int, int], rng: np.random.Generator) -> int:
    """An offset in [0, free], uniform among those that put position `first + offset` at phase
    `aligned[1]` mod `aligned[0]`; a uniform offset when none does (see `Mixture`)."""
    modulus, phase = aligned
    start = (phase - first) % modulus
    if start > free:
        return int(rng.integers(free + 1))
    return start + modulus * int(rng.integers((free - start) // modulus + 1))


def _lookup_row(mix: Mixture, rng: np.random.Generator, limit: int, contiguous: float, aligned: tuple[int, int] | None,
                undemonstrated: int, tok, tgt, wts, qry) -> None:
    pools, T = mix.pools, mix.seq_len
    n = int(rng.integers(mix.min_records, limit + 1))
    d = max(0, min(int(rng.integers(mix.min_demos, mix.max_demos + 1)), n - undemonstrated))
    keys = rng.choice(pools.keys, n, replace=False)
    values = rng.choice(pools.values, n, replace=False)
    tok[:] = pools.filler[rng.integers(len(pools.filler), size=T)]
    tok[0] = pools.head[0]
    tail_start = T - (2 * d + 1)
    free = tail_start - 1 - 2 * n  # filler tokens in the haystack
    target = int(rng.integers(n))
    # the target key lands at 1 + 2 target + (filler before it), uniform in phase; the filler
    # before and after it is split at random among the gaps (contiguous rows: one block)
    before = _uniform_phase_offset(free, rng) if aligned is None else _aligned_offset(free, 1 + 2 * target, aligned, rng)
    after = free - before
    if rng.random() < contiguous:
        gaps = np.zeros(n + 1, dtype=np.int64)
        gaps[0], gaps[n] = before, after
    else:
        gaps = np.concatenate([_composition(before, target + 1, rng), _composition(after, n - target, rng)])
    starts = 1 + np.cumsum(gaps[:n]) + 2 * np.arange(n)
    others = np.delete(np.arange(n), target)
    if aligned is not None and mix.aligned_decoys:
        decoy_phase = (aligned[1], mix.aligned_decoy_modulus or aligned[0])
        starts = _move_decoys(starts, others, tail_start, decoy_phase, mix.aligned_decoys, rng)
    tok[starts], tok[starts + 1] = keys, values
    demos = others[rng.permutation(n - 1)[:d]]
    dpos = tail_start + 2 * np.arange(d)
    tok[dpos], tok[dpos + 1] = keys[demos], values[demos]
    tok[T - 1] = keys[target]
    tgt[dpos], wts[dpos] = values[demos], 1.0
    tgt[T - 1], wts[T - 1], qry[T - 1] = values[target], 1.0, True


def _move_decoys(starts: np.ndarray, others: np.ndarray, tail_start: int, phase_of: tuple[int, int], n_decoys: int,
                 rng: np.random.Generator) -> np.ndarray:
    """Record starts with up to `n_decoys` non-target records moved to free (filler, filler) slots
    whose first position is at `phase_of` = (phase, modulus)."""
    phase, modulus = phase_of
    phase %= modulus
    starts = starts.copy()
    taken = np.zeros(tail_start + 1, dtype=bool)
    taken[0] = True
    taken[starts], taken[starts + 1] = True, True
    for record in rng.permutation(others)[:n_decoys]:
        taken[starts[record]] = taken[starts[record] + 1] = False
        slots = np.arange(phase, tail_start - 1, modulus)
        slots = slots[~taken[slots] & ~taken[slots + 1]]
        if len(slots):
            starts[record] = int(rng.choice(slots))
        taken[starts[record]] = taken[starts[record] + 1] = True
    return starts


def _composition(total: int, parts: int, rng: np.random.Generator) -> np.ndarray:
    """Uniformly random composition of `total` into `parts` non-negative integers."""
    if parts == 1:
        return np.array([total], dtype=np.int64)
    bars = np.sort(rng.choice(total + parts - 1, parts - 1, replace=False))
    return np.diff(np.concatenate([[-1], bars, [total + parts - 1]])) - 1


def _language_rows(mix: Mixture, rng: np.random.Generator, n_rows: int) -> np.ndarray:
    """[n_rows, seq_len] rows: BOS then a Markov chain over the filler tokens."""
    succ, prob = bigram_table(mix)
    filler, T = mix.pools.filler, mix.seq_len
    idx = np.empty((n_rows, T - 1), dtype=np.int64)
    idx[:, 0] = rng.integers(len(filler), size=n_rows)
    ranks = np.searchsorted(np.cumsum(prob[0]), rng.random((n_rows, T - 2)), side="right")
    ranks = np.minimum(ranks, prob.shape[1] - 1)
    for t in range(1, T - 1):
        idx[:, t] = succ[idx[:, t - 1], ranks[:, t - 1]]
    out = np.empty((n_rows, T), dtype=np.int64)
    out[:, 0], out[:, 1:] = mix.pools.head[0], filler[idx]
    return out


def make_batch(mixture: Mixture, seed: int, step: int, batch_size: int) -> TrainBatch:
    """The global batch for `step`: a pure function of its arguments (so resuming and data
    parallelism see exactly the data of an uninterrupted single-process run).

    Args:
        mixture: the data mixture.
        seed: run seed (>= 0).
        step: optimizer step (>= 0) the batch is for.
        batch_size: rows (>= 1).

    Returns:
        A TrainBatch of `batch_size` rows of `mixture.seq_len` tokens.
    """
    _int("seed", seed, 0)
    _int("step", step, 0)
    _int("batch_size", batch_size, 1)
    T = mixture.seq_len
    tok = np.zeros((batch_size, T), dtype=np.int64)
    tgt = np.full((batch_size, T), IGNORE, dtype=np.int64)
    wts = np.zeros((batch_size, T), dtype=np.float32)
    qry = np.zeros((batch_size, T), dtype=bool)
    limit = mixture.records_limit(step)
    contiguous = mixture.contiguous_at(step)
    aligned = mixture.aligned_at(step)
    undemonstrated = mixture.undemonstrated_at(step)
    rng = np.random.default_rng([seed, step, 0x7EA1])
    kinds = rng.random(batch_size) < mixture.lm_fraction
    lm_rows = np.flatnonzero(kinds)
    if len(lm_rows):
        tok[lm_rows] = _language_rows(mixture, rng, len(lm_rows))
        tgt[lm_rows, :-1] = tok[lm_rows, 1:]
        wts[lm_rows, :-1] = mixture.lm_weight
    for b in np.flatnonzero(~kinds):
        # a fraction of 1 draws no random number, so fully aligned batches are those of the runs before the field existed
        whole = aligned is None or mixture.aligned_fraction == 1
        row_aligned = aligned if whole or rng.random() < mixture.aligned_fraction else None
        _lookup_row(mixture, rng, limit, contiguous, row_aligned, undemonstrated, tok[b], tgt[b], wts[b], qry[b])
    lookup = (tgt != IGNORE) & ~kinds[:, None]
    return TrainBatch(torch.from_numpy(tok), torch.from_numpy(tgt), torch.from_numpy(wts),
                      torch.from_numpy(qry), torch.from_numpy(lookup))


__all__ = ["IGNORE", "PHASE_MODULUS", "Mixture", "TrainBatch", "bigram_table", "make_batch"]
