"""Induction copying on random token sequences: the second copy of a repeated sequence is predicted
from the first, and each prediction is stratified by the phase of the copied token.

A prompt is BOS + x + x with x a random sequence of distinct token ids. The query at the second
copy's x[i] (position n + 1 + i) should predict x[i + 1]; the copied (target) token sits in the
first copy at p = i + 2. Rows record key_pos = p - 1 (the token the query repeats), value_pos = p
and residue = p mod R (meta `residue_of` = "value_pos"): the phase of the token that must be
retrieved, the paper's "needle" position.

- `induction_batch`: every query of every prompt (rows share prompts via `prompt_id`; a plain
  callable model runs one forward per prompt).
- `induction_final_batch`: one query per prompt, at the final position (knockouts at the final
  position, the paper's protocol), target positions balanced over residues.
- `Induction`: the latter as a `Task` (registry name "induction").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Sequence

import numpy as np
import torch
from jaxtyping import Int
from torch import Tensor

from phaseinterp.tasks.batch import PhaseBatch
from phaseinterp.tasks.names import SPLITS


def _check(name: str, value: int, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name}={value!r} is invalid: allowed an integer >= {low}")
    return value


def _random_sequences(n: int, length: int, vocab: tuple[int, int], gen: torch.Generator) -> Int[Tensor, "n length"]:
    lo, hi = vocab
    if not 0 <= lo < hi or hi - lo < length:
        raise ValueError(f"vocab={vocab!r} is invalid: allowed (lo, hi) with 0 <= lo and hi - lo >= length={length}")
    return torch.stack([torch.randperm(hi - lo, generator=gen)[:length] + lo for _ in range(n)])


def induction_batch(n_prompts: int, length: int, modulus: int, *, vocab: tuple[int, int] = (1000, 20000),
                    bos: int = 1, seed: int = 0) -> PhaseBatch:
    """Prompts BOS + x + x (x: `length` distinct random ids from `vocab`), one row per query of the
    second copy (length - 1 rows per prompt), residue = copied token's position mod `modulus`.

    Example:
        >>> b = induction_batch(2, 16, 4)
        >>> len(b), b.tokens.shape, b.residue[:5].tolist(), bool((b.tokens[0, 1:17] == b.tokens[0, 17:]).all())
        (30, torch.Size([30, 33]), [2, 3, 0, 1, 2], True)
    """
    _check("n_prompts", n_prompts, 1), _check("length", length, 2), _check("modulus", modulus, 1)
    x = _random_sequences(n_prompts, length, vocab, torch.Generator().manual_seed(seed))
    tokens = torch.cat([torch.full((n_prompts, 1), bos), x, x], 1)
    i = torch.arange(length - 1).repeat(n_prompts)
    prompt = torch.arange(n_prompts).repeat_interleave(length - 1)
    value_pos = i + 2
    return PhaseBatch(
        tokens=tokens[prompt], answers=x[prompt, i + 1][:, None], key_pos=value_pos - 1, value_pos=value_pos,
        query_pos=length + 1 + i, residue=value_pos % modulus, example_id=prompt, prompt_id=prompt,
        record_pos=(value_pos - 1)[:, None], modulus=modulus,
        meta={"task": "induction", "length": length, "vocab": list(vocab), "bos": bos, "seed": seed,
              "residue_of": "value_pos"},
    ).validate()


def induction_final_batch(n_per_residue: int, seq_len: int, modulus: int, *, min_distance: int = 32,
                          vocab: tuple[int, int] = (1000, 20000), bos: int = 1, seed: int = 0) -> PhaseBatch:
    """One query per prompt, at the last position: BOS + x[0..n-1] + x[0..k] of `seq_len` tokens,
    answer x[k+1] at p = k + 2, with p spread evenly over the positions of each residue that keep
    the target in the first copy and at least `min_distance` before the query.

    Example:
        >>> b = induction_final_batch(2, 48, 4, min_distance=20)
        >>> len(b), bool((b.query_pos == 47).all()), b.residue.tolist()
        (8, True, [0, 0, 1, 1, 2, 2, 3, 3])
    """
    _check("n_per_residue", n_per_residue, 1), _check("modulus", modulus, 1), _check("min_distance", min_distance, 1)
    p_max = min(seq_len // 2, seq_len - 1 - min_distance)
    if p_max < 2 + modulus - 1:
        raise ValueError(f"seq_len={seq_len} is too short for modulus={modulus} and min_distance={min_distance}: "
                         f"allowed seq_len >= {2 * (modulus + 1)} and >= {modulus + 2 + min_distance}")
    gen = torch.Generator().manual_seed(seed)
    rows, p_all = [], []
    for r in range(modulus):
        choices = torch.arange(2, p_max + 1)
        choices = choices[choices % modulus == r]
        picks = choices[torch.linspace(0, len(choices) - 1, n_per_residue).round().long()]
        p_all += picks.tolist()
    x = _random_sequences(len(p_all), seq_len, vocab, gen)
    for row, p in enumerate(p_all):
        n, k = seq_len - p, p - 2  # BOS + n + (k + 1) = seq_len
        rows.append(torch.cat([torch.tensor([bos]), x[row, :n], x[row, : k + 1]]))
    p = torch.tensor(p_all)
    ids = torch.arange(len(p_all))
    return PhaseBatch(
        tokens=torch.stack(rows), answers=x[ids, p - 1][:, None], key_pos=p - 1, value_pos=p,
        query_pos=torch.full_like(p, seq_len - 1), residue=p % modulus, example_id=ids, prompt_id=ids,
        record_pos=(p - 1)[:, None], modulus=modulus,
        meta={"task": "induction-final", "seq_len": seq_len, "min_distance": min_distance, "vocab": list(vocab),
              "bos": bos, "seed": seed, "residue_of": "value_pos"},
    ).validate()


@dataclass(frozen=True)
class Induction:
    """Induction copying as a `Task`: `induction_final_batch` prompts (one query at the final
    position, the copied token's residue balanced), one seed stream per split.

    Args:
        seq_len: prompt length (BOS + x + the copied prefix).
        min_distance: tokens at least between the copied token and the query.
        vocab: (lo, hi) token ids the random sequences draw from (distinct within a prompt).
        bos: BOS id.

    Example:
        >>> task = Induction(seq_len=48, min_distance=20, vocab=(10, 200))
        >>> b = task.sample(2, modulus=4)
        >>> b.residue.tolist(), task.sample(2, 4, residues=[1]).residue.tolist()
        ([0, 0, 1, 1, 2, 2, 3, 3], [1, 1])
    """

    seq_len: int = 64
    min_distance: int = 32
    vocab: tuple[int, int] = (1000, 20000)
    bos: int = 1
    #: The task's registry name (`phaseinterp.tasks.TASK_KINDS`).
    name: ClassVar[str] = "induction"

    def __post_init__(self) -> None:
        object.__setattr__(self, "vocab", tuple(int(v) for v in self.vocab))
        _check("seq_len", self.seq_len, 4), _check("min_distance", self.min_distance, 1)

    def sample(self, n_per_residue: int, modulus: int, *, seed: int = 0, split: str = "eval",
               residues: Sequence[int] | None = None) -> PhaseBatch:
        """`induction_final_batch` of this task; the calibration split draws from another seed
        stream (random sequences: its prompts differ from the evaluation ones)."""
        if split not in SPLITS:
            raise ValueError(f"split={split!r} is invalid: allowed one of {list(SPLITS)}")
        stream = int(np.random.SeedSequence([seed, SPLITS.index(split)]).generate_state(1)[0])
        batch = induction_final_batch(n_per_residue, self.seq_len, modulus, min_distance=self.min_distance,
                                      vocab=self.vocab, bos=self.bos, seed=stream)
        batch.meta.update({"task": self.name, "config": self.card(), "task_seed": seed, "split": split})
        if residues is None:
            return batch
        keep = sorted({int(r) for r in residues})
        if not keep or keep[0] < 0 or keep[-1] >= modulus:
            raise ValueError(f"residues={list(residues)} is invalid: allowed one or more of 0..{modulus - 1}")
        return batch[torch.isin(batch.residue, torch.tensor(keep))]

    def card(self) -> dict[str, Any]:
        """`{"task": "induction", **fields}`, JSON-ready."""
        return {"task": self.name, "seq_len": self.seq_len, "min_distance": self.min_distance,
                "vocab": list(self.vocab), "bos": self.bos}
