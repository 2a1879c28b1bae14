"""`RecordLookup`: the paper's key-value record lookup, built at the token level.

A prompt is

    head (BOS) | haystack: n_records records "key value" with filler padding |
    n_demos demonstrations "key value" | queries "key value ... key" | tail (template)

Keys and values have `key_len` / `value_len` tokens from disjoint pools. The model must
continue each query key with that key's first value token. One *logical example* (keys,
values, target, demonstrations) is rendered once per residue r: only the padding changes,
so the target key lands on a position p = r (mod R) drawn from the position-matched
distributions of `layout.py` (equal mean and variance of p for every r; the query position is
fixed). RULER-like variants: `n_distractors` keys sharing all but their last token with a
target key, `n_values` records per target key (any of its values counts), `n_queries`
targets queried (and scored) one after another.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, ClassVar, Sequence

import numpy as np
import torch

from phaseinterp.tasks.batch import PhaseBatch
from phaseinterp.tasks.layout import Geometry, MatchedTargets, check_protocol, offset_range, target_variance
from phaseinterp.tasks.pools import TokenPools
from phaseinterp.tasks.names import SPLITS, VARIANTS

#: Largest batch `RecordLookup.sample` builds (prompts x tokens, 0.8 GB of int64): larger requests are
#: refused before any allocation.
MAX_SAMPLE_TOKENS = 10**8
#: Largest residue modulus: a prompt spans more than (spread + 1) * modulus tokens and building the
#: matched target design takes ~0.1 ms per residue, so larger moduli are refused up front.
MAX_MODULUS = 10**4


def _modulus(modulus: int) -> None:
    _at_least("modulus", modulus, 1)
    if modulus > MAX_MODULUS:
        raise ValueError(f"modulus={modulus} out of range: allowed 1..{MAX_MODULUS} (prompts would be longer "
                         f"than {MAX_MODULUS} tokens per unit of spread)")


def _at_least(name: str, value: int, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"{name}={value!r} out of range: must be an integer >= {low}")


def _pool_lists(pools: TokenPools) -> dict[str, list[int]]:
    return {k: [int(t) for t in getattr(pools, k)] for k in ("keys", "values", "filler", "head", "tail")}


@dataclass(frozen=True)
class _Example:
    keys: np.ndarray  # [n_records, key_len] token ids
    values: np.ndarray  # [n_records, value_len]
    answers: np.ndarray  # [n_queries, n_values] first value token of each record of each target key
    tail: np.ndarray  # demonstrations, queries and template footer


@dataclass(frozen=True)
class RecordLookup:
    """Record-lookup task generator (see the module docstring for the prompt layout).

    Args:
        vocab_size: size of a synthetic vocabulary (split by `TokenPools.synthetic`); or
        pools: explicit token pools (text mode). Give at least one.
        n_records: haystack records, including targets, their copies and distractors.
        n_demos: demonstrations (other records' key then value) before the queries.
        key_len, value_len: tokens per key and per value (the DeepSeek test uses 2 + 2).
        n_distractors: per target, records whose key shares all but the last token with the
            target key (needs key_len >= 2).
        n_values: records per target key, each with its own value; any of them is correct.
        n_queries: targets queried at the end, each scored; the earlier ones are followed by
            their value (teacher forcing).
        protocol: "prefix" (records contiguous, shifted together) or "insequence" (random gaps
            between records).
        seq_len: prompt length; None for the shortest that satisfies the constraints.
        spread: interior support points per residue of the target-position distribution (M);
            the target window spans R (M + 2) - 1 tokens.
        target_index: haystack index of the target record (n_queries == 1); default middle.

    Example:
        >>> task = RecordLookup(vocab_size=512)
        >>> batch = task.sample(n_per_residue=8, modulus=8, seed=0)
        >>> calib = task.sample(n_per_residue=8, modulus=8, seed=0, split="calibration")
        >>> len(batch), batch.tokens.shape[1] == task.min_seq_len(8)
        (64, True)
    """

    vocab_size: int | None = None
    n_records: int = 64
    n_demos: int = 8
    key_len: int = 1
    value_len: int = 1
    n_distractors: int = 0
    n_values: int = 1
    n_queries: int = 1
    protocol: str = "prefix"
    seq_len: int | None = None
    spread: int = 1
    target_index: int | None = None
    pools: TokenPools | None = None
    #: The task's registry name (`phaseinterp.tasks.TASK_KINDS`; the `Task` protocol).
    name: ClassVar[str] = "record_lookup"

    def __post_init__(self) -> None:
        for name, low in [("n_records", 1), ("n_demos", 0), ("key_len", 1), ("value_len", 1),
                          ("n_distractors", 0), ("n_values", 1), ("n_queries", 1), ("spread", 1)]:
            _at_least(name, getattr(self, name), low)
        for name, low in (("vocab_size", 8), ("seq_len", 1), ("target_index", 0)):
            if getattr(self, name) is not None:
                _at_least(name, getattr(self, name), low)
        check_protocol(self.protocol)
        if self.pools is None:
            if self.vocab_size is None:
                raise ValueError("give vocab_size (synthetic vocabulary) or pools (explicit token ids)")
            object.__setattr__(self, "pools", TokenPools.synthetic(self.vocab_size))
        elif self.vocab_size is not None and self.pools.max_id >= self.vocab_size:
            raise ValueError(f"token pools use id {self.pools.max_id}, outside vocab_size={self.vocab_size}")
        q, n = self.n_queries, self.n_records
        if self.n_distractors and self.key_len < 2:
            raise ValueError(f"n_distractors={self.n_distractors} needs key_len >= 2 (a distractor "
                             f"shares all but the last key token with the target); got key_len={self.key_len}")
        if n < q * (self.n_values + self.n_distractors):
            raise ValueError(f"n_records={n} is too few: {q} target(s) x ({self.n_values} value record(s) "
                             f"+ {self.n_distractors} distractor(s)) need at least {q * (self.n_values + self.n_distractors)}")
        if self.n_demos > n - q * self.n_values:
            raise ValueError(f"n_demos={self.n_demos} out of range: at most {n - q * self.n_values} "
                             f"non-target records can be demonstrated")
        if self.target_index is not None:
            if q != 1:
                raise ValueError(f"target_index is only defined for n_queries=1, got n_queries={q}")
            if not 0 <= self.target_index < n:
                raise ValueError(f"target_index={self.target_index} out of range [0, {n})")
        if q > 1 and self.pools.tail:
            raise ValueError(f"n_queries={q} cannot be used with a template footer (tail tokens)")
        n_ident = n - q * (self.n_values - 1)
        if len(self.pools.keys) < n_ident:
            raise ValueError(f"n_records={n} is too many: {n_ident} distinct keys need a key pool of at least {n_ident} "
                             f"tokens, this one has {len(self.pools.keys)}" + (f" (vocab_size={self.vocab_size})" if self.vocab_size else ""))
        if len(self.pools.values) // 2 < n:
            raise ValueError(f"value pool has {len(self.pools.values)} tokens; n_records={n} needs at least "
                             f"{2 * n} (each split uses values of one parity per key)")

    @classmethod
    def variant(cls, name: str, **overrides: Any) -> RecordLookup:
        """A named variant from `VARIANTS` ("lookup", "multitoken", "multikey", "multivalue",
        "multiquery"), with keyword overrides."""
        if name not in VARIANTS:
            raise ValueError(f"unknown task variant {name!r}; choose one of: {', '.join(VARIANTS)}")
        return cls(**{**VARIANTS[name], **overrides})

    @classmethod
    def from_options(cls, variant: str | None = None, pools: TokenPools | dict[str, Any] | None = None,
                     **options: Any) -> RecordLookup:
        """The task a card's options describe (`card()` without "task"): `variant` names a
        `VARIANTS` entry the other options override; `pools` may be the card's dict of id lists."""
        if isinstance(pools, dict):
            pools = TokenPools(**pools)
        return cls.variant(variant, pools=pools, **options) if variant is not None else cls(pools=pools, **options)

    def card(self) -> dict[str, Any]:
        """JSON-ready options, `{"task": "record_lookup", **fields}` (`pools` as id lists only when
        they are not the synthetic split of `vocab_size`); `task_from_card` rebuilds the task."""
        out: dict[str, Any] = {"task": self.name, **{k: v for k, v in asdict(self).items() if k != "pools"}}
        pools = _pool_lists(self.pools)
        if self.vocab_size is None or pools != _pool_lists(TokenPools.synthetic(self.vocab_size)):
            out["pools"] = pools
        return out

    # ---- geometry -------------------------------------------------------------------------

    @property
    def rec_len(self) -> int:
        return self.key_len + self.value_len

    @property
    def slots(self) -> tuple[int, ...]:
        """Haystack indices of the target records."""
        if self.target_index is not None:
            return (self.target_index,)
        q, n = self.n_queries, self.n_records
        return tuple((t + 1) * n // (q + 1) for t in range(q))

    @property
    def tail_len(self) -> int:
        return (self.n_demos + self.n_queries - 1) * self.rec_len + self.key_len + len(self.pools.tail)

    def _between(self, filler: int) -> tuple[int, ...]:
        if self.protocol == "prefix":
            return (0,) * (self.n_queries - 1)
        s = self.slots
        return tuple(filler * (b - a) // (self.n_records + 1) for a, b in zip(s[:-1], s[1:]))

    def _fixed_len(self) -> int:
        return len(self.pools.head) + self.n_records * self.rec_len + self.tail_len

    def min_seq_len(self, modulus: int) -> int:
        """Shortest prompt that fits the records and position matching at `modulus`."""
        _modulus(modulus)
        lo, hi = offset_range(modulus, self.spread)
        filler = hi - lo
        while filler - sum(self._between(filler)) < hi - lo:
            filler += 1
        return self._fixed_len() + filler

    def geometry(self, modulus: int) -> Geometry:
        """The fixed prompt geometry at `modulus`.

        Raises:
            ValueError: when `seq_len` cannot hold the records, the tail and the target window.
        """
        need = self.min_seq_len(modulus)
        T = need if self.seq_len is None else self.seq_len
        if T < need:
            raise ValueError(
                f"seq_len={T} is too short for {self.n_records} records of {self.rec_len} tokens, "
                f"{self.tail_len} tail tokens and position matching at modulus {modulus} "
                f"(spread {self.spread}); need seq_len >= {need}")
        filler = T - self._fixed_len()
        return Geometry(self.protocol, T, len(self.pools.head), self.n_records, self.rec_len,
                        self.tail_len, self.slots, self._between(filler))

    def targets(self, modulus: int) -> MatchedTargets:
        """Position-matched target distributions, centred in the feasible window."""
        g = self.geometry(modulus)
        lo, hi = offset_range(modulus, self.spread)
        slack = (g.hi - g.lo) - (hi - lo)
        return MatchedTargets(modulus, self.spread, g.lo - lo + slack // 2)

    # ---- sampling -------------------------------------------------------------------------

    def _draw_example(self, rng: np.random.Generator, split: int) -> _Example:
        n, q, kl, vl = self.n_records, self.n_queries, self.key_len, self.value_len
        slots = np.array(self.slots)
        others = rng.permutation(np.setdiff1d(np.arange(n), slots))
        copies = others[: q * (self.n_values - 1)].reshape(q, self.n_values - 1)
        rest = others[q * (self.n_values - 1) :]
        distract = rest[: q * self.n_distractors].reshape(q, self.n_distractors)
        fresh = rest[q * self.n_distractors :]
        nk, nv = len(self.pools.keys), len(self.pools.values)
        kidx = rng.integers(nk, size=(n, kl))
        ident = np.concatenate([slots, distract.reshape(-1), fresh])
        kidx[ident, -1] = rng.choice(nk, len(ident), replace=False)
        for t in range(q):
            kidx[distract[t], :-1] = kidx[slots[t], :-1]
            kidx[copies[t]] = kidx[slots[t]]
        vidx = rng.integers(nv, size=(n, vl))
        parity = (split - kidx.sum(1) - vidx[:, :-1].sum(1)) % 2
        for c in (0, 1):
            rows = np.flatnonzero(parity == c)
            vidx[rows, -1] = rng.choice(np.arange(c, nv, 2), len(rows), replace=False)
        keys, values = self.pools.keys[kidx], self.pools.values[vidx]
        answers = values[np.concatenate([slots[:, None], copies], 1), 0]
        targets = np.concatenate([slots, copies.reshape(-1)])
        demos = rng.choice(np.setdiff1d(np.arange(n), targets), self.n_demos, replace=False)
        records = np.concatenate([keys, values], 1)
        tail = [records[demos].reshape(-1)]
        for t in range(q):
            tail.append(records[slots[t]] if t < q - 1 else keys[slots[t]])
        tail.append(np.array(self.pools.tail, dtype=np.int64))
        return _Example(keys, values, answers, np.concatenate(tail))

    def _check_size(self, n_per_residue: int, modulus: int, n_residues: int) -> None:
        """Refuse a sample larger than `MAX_SAMPLE_TOKENS` before building anything."""
        rows = n_per_residue * n_residues * self.n_queries
        T = 1 if rows > MAX_SAMPLE_TOKENS else self.seq_len if self.seq_len is not None else self.min_seq_len(modulus)
        if rows * T > MAX_SAMPLE_TOKENS:
            raise ValueError(f"n_per_residue={n_per_residue} x {n_residues} residues x {self.n_queries} queries = {rows} "
                             f"prompts of {T if T > 1 else 'at least 1'} tokens out of range: allowed at most "
                             f"{MAX_SAMPLE_TOKENS:.0e} tokens per sample call (sample fewer residues or prompts per call)")

    def sample(self, n_per_residue: int, modulus: int, *, seed: int = 0, split: str = "eval",
               residues: Sequence[int] | None = None) -> PhaseBatch:
        """Render `n_per_residue` logical examples at every requested residue.

        Deterministic given the arguments: example e depends only on (seed, split, e), so its
        content is the same at every residue and for any `n_per_residue` > e. The evaluation
        and calibration splits never share a key->value record: a record (key k, value v) is
        used only by the split equal to the parity of the sum of its key and value pool indices.

        Args:
            n_per_residue: logical examples (each rendered once per residue), >= 1.
            modulus: residue modulus R, >= 1.
            seed: random seed.
            split: "eval" or "calibration".
            residues: residues to render (default all of 0..R-1).

        Returns:
            A validated PhaseBatch with n_per_residue * len(residues) * n_queries rows, ordered
            by example, then residue, then query.

        Raises:
            ValueError: on bad arguments or when the context cannot satisfy the constraints.
        """
        _at_least("n_per_residue", n_per_residue, 1)
        _modulus(modulus)
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; choose one of: {', '.join(SPLITS)}")
        self._check_size(n_per_residue, modulus, modulus if residues is None else len(residues))
        residues = list(range(modulus)) if residues is None else [int(r) for r in residues]
        for r in residues:
            if not 0 <= r < modulus:
                raise ValueError(f"residue {r} out of range [0, {modulus})")
        if len(set(residues)) != len(residues):
            raise ValueError(f"residues repeat a value: {residues}")
        if not residues:
            raise ValueError(f"residues=[] is empty: allowed one or more of 0..{modulus - 1}")
        code = SPLITS.index(split)
        geom, targets = self.geometry(modulus), self.targets(modulus)
        T, q, kl, L = geom.seq_len, self.n_queries, self.key_len, self.rec_len
        head = np.array(self.pools.head, dtype=np.int64)
        qpos = geom.tail_start + self.n_demos * L + np.arange(q) * L + kl - 1
        if self.pools.tail:
            qpos[-1] = T - 1
        positions = {r: targets.sample(r, n_per_residue, np.random.default_rng([seed, code, 1, r]))
                     for r in residues}
        tokens, starts, rows = [], [], []
        for e in range(n_per_residue):
            ex = self._draw_example(np.random.default_rng([seed, code, 0, e]), code)
            recs = np.concatenate([ex.keys, ex.values], 1)
            for r in residues:
                rng = np.random.default_rng([seed, code, 2, e, r])
                st = geom.record_starts(int(positions[r][e]), rng)
                seq = rng.choice(self.pools.filler, T)
                seq[: len(head)] = head
                seq[st[:, None] + np.arange(L)] = recs
                seq[geom.tail_start :] = ex.tail
                tokens.append(seq)
                starts.append(st)
                rows.extend((e, t, ex.answers[t]) for t in range(q))
        rec_pos = np.repeat(np.stack(starts), q, axis=0)
        slot = np.array([t for _, t, _ in rows])
        key_pos = rec_pos[np.arange(len(rows)), np.array(self.slots)[slot]]
        first = key_pos[slot == 0]
        achieved = {r: first[i::len(residues)] for i, r in enumerate(residues)}
        meta = {
            "task": "record_lookup",
            "config": {**{k: v for k, v in asdict(self).items() if k != "pools"},
                       "pool_sizes": {k: len(getattr(self.pools, k)) for k in ("keys", "values", "filler")}},
            "protocol": self.protocol, "seed": seed, "split": split, "seq_len": T,
            "head_tokens": list(self.pools.head), "tail_tokens": list(self.pools.tail),
            "tail_start": geom.tail_start, "query_slots": q,
            "target_center": targets.center, "target_variance": target_variance(modulus, self.spread),
            "achieved_mean": {r: float(v.mean()) for r, v in achieved.items()},
            "achieved_variance": {r: float(v.var()) for r, v in achieved.items()},
        }
        long = lambda a: torch.from_numpy(np.asarray(a, dtype=np.int64))  # noqa: E731
        return PhaseBatch(
            tokens=long(np.repeat(np.stack(tokens), q, axis=0)),
            answers=long(np.stack([a for _, _, a in rows])),
            key_pos=long(key_pos), value_pos=long(key_pos + kl), query_pos=long(qpos[slot]),
            residue=long(key_pos % modulus), example_id=long([e for e, _, _ in rows]),
            prompt_id=long(np.repeat(np.arange(len(tokens)), q)), record_pos=long(rec_pos),
            modulus=modulus, key_len=kl, value_len=self.value_len, meta=meta,
        ).validate()
