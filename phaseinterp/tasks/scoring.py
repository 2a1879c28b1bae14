"""How a `PhaseBatch` row is scored, for every task: the argmax of the next-token logits over the
whole vocabulary at each scored position.

One answer token (`answer_pos is None`): the row is correct when the argmax at `query_pos` is one
of `answers`. A multi-token answer (teacher forced, `answer_pos` given): the row is correct when
the argmax at every `answer_pos[:, j]` is the prompt's next token there (exact match of every
answer token), so one forward scores a prompt.

Sweeps and maps compute logits at one position per row; `token_rows` turns a batch into one row
per scored token (rows of one prompt keep its `prompt_id`, so they share a forward pass) and
`per_row` folds their correctness back into one entry per row of the batch.
"""

from __future__ import annotations

from dataclasses import replace

import torch
from jaxtyping import Bool, Int
from torch import Tensor

from phaseinterp.tasks.batch import PhaseBatch


def token_rows(batch: PhaseBatch) -> tuple[PhaseBatch, Int[Tensor, " token_rows"]]:
    """(one row per scored answer token, the batch row each came from).

    A single-token batch is returned as is (with `arange(len(batch))`): nothing changes for it.
    Otherwise row i gives one row per used `answer_pos[i, j]`, in order, with `query_pos` that
    position and `answers` the token after it (column 0 keeps the row's accepted answers).

    Example:
        >>> from phaseinterp.tasks import RecordLookup
        >>> b = RecordLookup(vocab_size=64, n_records=4, n_demos=1).sample(2, modulus=2)
        >>> rows, owner = token_rows(b)
        >>> rows is b, owner.tolist()
        (True, [0, 1, 2, 3])
    """
    if batch.answer_pos is None:
        return batch, torch.arange(len(batch))
    used = batch.answer_pos >= 0
    owner, col = used.nonzero(as_tuple=True)
    pos = batch.answer_pos[owner, col]
    nxt = batch.tokens[owner, pos + 1]
    answers = torch.where(col[:, None] == 0, batch.answers[owner], nxt[:, None])
    fields = {name: getattr(batch, name)[owner] for name in ("tokens", "key_pos", "value_pos", "residue",
                                                              "example_id", "prompt_id", "record_pos")}
    return replace(batch, **fields, query_pos=pos, answers=answers, answer_pos=None), owner


def per_row(correct: Bool[Tensor, "*units token_rows"], owner: Int[Tensor, " token_rows"], n_rows: int
            ) -> Bool[Tensor, "*units n_rows"]:
    """A batch row is correct when all its token rows are (`owner` from `token_rows`)."""
    if owner.numel() == n_rows and bool((owner == torch.arange(n_rows, device=owner.device)).all()):
        return correct
    wrong = torch.zeros(*correct.shape[:-1], n_rows, dtype=torch.long, device=correct.device)
    wrong.index_add_(-1, owner.to(correct.device), (~correct).long())
    return wrong == 0


__all__ = ["per_row", "token_rows"]


def prompt_length(batch: PhaseBatch) -> int:
    """The prompt length shared by every row: the first scored position + 1 (what a static press
    prefills, `backends.presses.SelectionPress(prefill=...)`).

    Raises:
        ValueError: rows whose prompts end at different positions (e.g. a decode-time batch, whose
            question moves), naming the lengths.
    """
    first = batch.answer_pos[:, 0] if batch.answer_pos is not None else batch.query_pos
    ends = (first + 1).unique()
    if len(ends) != 1:
        raise ValueError(f"prompt lengths {ends.tolist()[:8]} are invalid for a static press: allowed one length "
                         "for every row (the needle's value or first token as the anchor, not the question)")
    return int(ends[0])
