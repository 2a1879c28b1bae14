"""Clean/corrupt pairings for activation patching: phase swap and mapping swap."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Sequence

import numpy as np
import torch
from jaxtyping import Int
from torch import Tensor

from phaseinterp.tasks import PhaseBatch


@dataclass(frozen=True)
class Pairing:
    """Clean and corrupt prompts, row by row, with the position alignment between them.

    Attributes:
        clean: the prompts whose activations are patched in.
        corrupt: the prompts that receive them (same shape as `clean`).
        align: [batch, pos]: the clean position that corrupt position p corresponds to
            (identity when the layouts agree).
        kind: "phase_swap", "mapping_swap" or "custom".
        foil: per-row competing token of the logit difference `logit[answer] - logit[foil]`;
            None: the corrupt run's top token other than the accepted answers.
        meta: how the pairing was made.

    Raises:
        ValueError: when the clean and corrupt runs differ in length or rows.
    """

    clean: PhaseBatch
    corrupt: PhaseBatch
    align: Int[Tensor, "batch pos"]
    kind: str = "custom"
    foil: Int[Tensor, " batch"] | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        ct, kt = tuple(self.clean.tokens.shape), tuple(self.corrupt.tokens.shape)
        if ct[1] != kt[1]:
            raise ValueError(f"clean and corrupt runs must have equal length: clean has {ct[1]} positions, "
                             f"corrupt {kt[1]}")
        if ct[0] != kt[0]:
            raise ValueError(f"clean and corrupt must have the same rows: clean {ct[0]}, corrupt {kt[0]}")
        if tuple(self.align.shape) != ct:
            raise ValueError(f"align must be [batch, pos] = {ct}, got {tuple(self.align.shape)}")
        if ((self.align < 0) | (self.align >= ct[1])).any():
            raise ValueError(f"align holds positions outside 0..{ct[1] - 1}")
        if not torch.equal(self.clean.query_pos, self.corrupt.query_pos):
            raise ValueError("clean and corrupt rows must be scored at the same query positions")

    def __len__(self) -> int:
        return len(self.clean)

    @property
    def answer(self) -> Int[Tensor, " batch"]:
        """The clean answer (first accepted answer of each clean row)."""
        return self.clean.answer

    def __getitem__(self, index) -> Pairing:
        return replace(self, clean=self.clean[index], corrupt=self.corrupt[index], align=self.align[index],
                       foil=None if self.foil is None else self.foil[index])

    @classmethod
    def custom(cls, clean: PhaseBatch, corrupt: PhaseBatch, foil: Tensor | None = None) -> Pairing:
        """Any two batches of equal shape, aligned position by position."""
        T = clean.tokens.shape[1]
        if corrupt.tokens.shape[1] != T:
            raise ValueError(f"clean and corrupt runs must have equal length: clean has {T} positions, "
                             f"corrupt {corrupt.tokens.shape[1]}")
        align = torch.arange(T).expand(len(clean), T).clone()
        return cls(clean, _unshared(corrupt), align, "custom", foil)


def _unshared(batch: PhaseBatch) -> PhaseBatch:
    """Give every row its own prompt id (rows of a corrupted batch no longer share prompts)."""
    return replace(batch, prompt_id=torch.arange(len(batch)))


def _need_meta(batch: PhaseBatch, keys: tuple[str, ...], what: str) -> None:
    missing = [k for k in keys if k not in batch.meta]
    if missing:
        raise ValueError(f"{what} needs a RecordLookup batch; batch.meta lacks {missing}")


def phase_swap(batch: PhaseBatch, delta: int, residues: Sequence[int] | None = None) -> Pairing:
    """Clean = `batch`; corrupt = the same prompts with the whole haystack shifted so that the
    target key moves by a shift d = delta (mod R): same records, same order, same query, the
    target at residue r + delta instead of r. Token for token aligned: corrupt position p holds
    the clean token of `align[p]`.

    Each row uses the d = delta (mod R) of smallest |d| for which only filler wraps around the
    haystack (the haystack [head, tail start) is rolled by d).

    Args:
        batch: RecordLookup prompts (meta has `tail_start` and `head_tokens`).
        delta: residue shift, 1 <= |delta| < R (taken mod R).
        residues: keep only the rows whose clean residue is in this set (e.g. the strong
            phases, so that clean = strong and corrupt = weak); default all rows.

    Raises:
        ValueError: for delta = 0 mod R, or a row whose records leave no room to shift.

    Example:
        >>> pair = phase_swap(batch, delta=1)
        >>> bool((pair.corrupt.residue == (pair.clean.residue + 1) % batch.modulus).all())
        True
    """
    _need_meta(batch, ("tail_start", "head_tokens"), "phase_swap")
    R = batch.modulus
    if residues is not None:
        keep = torch.isin(batch.residue, torch.tensor([int(r) for r in residues], dtype=torch.long))
        if not keep.any():
            raise ValueError(f"residues={list(residues)} select no rows: allowed residues 0..{R - 1}")
        batch = batch[keep]
    if int(delta) % R == 0:
        raise ValueError(f"delta={delta} is invalid: allowed 1 <= |delta| < R={R} (delta = 0 mod R moves nothing)")
    head, tail = len(batch.meta["head_tokens"]), int(batch.meta["tail_start"])
    H = tail - head
    rec_len = batch.key_len + batch.value_len
    before = (batch.record_pos.min(1).values - head).tolist()
    after = (tail - batch.record_pos.max(1).values - rec_len).tolist()
    base = int(delta) % R
    tokens, align, shifts = batch.tokens.clone(), torch.arange(batch.tokens.shape[1]).repeat(len(batch), 1), []
    for i in range(len(batch)):
        options = sorted({base + k * R for k in range(-(H // R) - 1, H // R + 2)} - {0}, key=lambda d: (abs(d), d))
        ok = [d for d in options if (d > 0 and d <= after[i]) or (d < 0 and -d <= before[i])]
        if not ok:
            raise ValueError(f"row {i}: no shift d = {base} (mod {R}) fits: filler before the records {before[i]}, "
                             f"after {after[i]} (allowed -{before[i]} <= d <= {after[i]})")
        d = ok[0]
        shifts.append(d)
        tokens[i, head:tail] = torch.roll(batch.tokens[i, head:tail], d)
        align[i, head:tail] = head + (torch.arange(H) - d) % H
    d = torch.tensor(shifts)
    key_pos = batch.key_pos + d
    corrupt = replace(batch, tokens=tokens, key_pos=key_pos, value_pos=batch.value_pos + d,
                      record_pos=batch.record_pos + d[:, None], residue=key_pos % R,
                      prompt_id=torch.arange(len(batch)))
    corrupt.validate()
    return Pairing(batch, corrupt, align, "phase_swap", None, {"delta": int(delta), "shifts": shifts})


def mapping_swap(batch: PhaseBatch, *, seed: int = 0) -> Pairing:
    """Clean = `batch`; corrupt = the same layout with a different key->value mapping: the
    target record's value is swapped with that of another record (not demonstrated, not queried),
    so the corrupt answer is that record's value. Aligned position by position; the foil of the
    logit difference is the corrupt answer.

    Args:
        batch: RecordLookup prompts with one value record per key (n_values = 1).
        seed: picks the partner record of each row.

    Example:
        >>> pair = mapping_swap(batch, seed=0)
        >>> bool((pair.corrupt.answer != pair.clean.answer).all())
        True
    """
    _need_meta(batch, ("tail_start", "config"), "mapping_swap")
    if batch.answers.shape[1] != 1:
        raise ValueError(f"mapping_swap needs one accepted answer per row (n_values=1); got {batch.answers.shape[1]}")
    kl, vl = batch.key_len, batch.value_len
    rec = kl + vl
    tail = int(batch.meta["tail_start"])
    n_demos = int(batch.meta["config"].get("n_demos", 0))
    rng = np.random.default_rng(seed)
    tokens = batch.tokens.clone()
    answers = batch.answers.clone()
    T = tokens.shape[1]
    for i in range(len(batch)):
        row = batch.tokens[i]
        shown = {tuple(row[tail + j * rec : tail + j * rec + kl].tolist()) for j in range(n_demos)}
        shown |= {tuple(row[q - kl + 1 : q + 1].tolist()) for q in range(tail, T) if q - kl + 1 >= tail}
        starts = batch.record_pos[i].tolist()
        target = int(batch.key_pos[i])
        cands = [s for s in starts if s != target and tuple(row[s : s + kl].tolist()) not in shown
                 and row[s + kl] != row[target + kl]]
        if not cands:
            raise ValueError(f"row {i}: no record to swap values with (all are demonstrated or queried)")
        s = int(rng.choice(cands))
        tv, pv = row[target + kl : target + rec].clone(), row[s + kl : s + rec].clone()
        tokens[i, target + kl : target + rec], tokens[i, s + kl : s + rec] = pv, tv
        answers[i, 0] = pv[0]
    corrupt = replace(batch, tokens=tokens, answers=answers, prompt_id=torch.arange(len(batch)))
    corrupt.validate()
    align = torch.arange(T).repeat(len(batch), 1)
    return Pairing(batch, corrupt, align, "mapping_swap", corrupt.answer.clone(), {"seed": seed})
