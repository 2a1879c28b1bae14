"""A known-answer stand-in model for checking the measurement pipeline end to end."""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
from jaxtyping import Float, Int
from torch import Tensor

from phaseinterp.config import renamed_keyword


def induction_oracle(vocab_size: int, *, weak_phases: Sequence[int] = (), period: int = 1, **deprecated: Any
                     ) -> Callable[[Int[Tensor, "batch pos"]], Float[Tensor, "batch pos vocab"]]:
    """A perfect induction "model": at position t it predicts the token that followed the
    previous occurrence s < t of token t, except when s mod `period` is in `weak_phases`, where
    it predicts token s itself (wrong on record lookup). Logits are one-hot. (The old name
    `stride=` of `period` still works, with a DeprecationWarning.)

    On record lookup its accuracy is therefore 1 at every residue r with r mod P not in
    `weak_phases` and 0 at the others: a planted, known phase curve.

    Example:
        >>> model = induction_oracle(16, weak_phases=[1], period=2)
        >>> model(torch.tensor([[3, 5, 4, 7, 3, 4]])).argmax(-1).tolist()
        [[0, 0, 0, 0, 5, 7]]
    """
    period = renamed_keyword("induction_oracle", deprecated, "stride", "period", period, default=1)
    if vocab_size < 1 or period < 1:
        raise ValueError(f"need vocab_size >= 1 and period >= 1, got {vocab_size}, {period}")
    weak = torch.tensor(sorted({int(p) for p in weak_phases}), dtype=torch.long)
    if ((weak < 0) | (weak >= period)).any():
        raise ValueError(f"weak_phases {weak.tolist()} out of range [0, period={period})")

    def model(tokens: Int[Tensor, "batch pos"]) -> Float[Tensor, "batch pos vocab"]:
        T = tokens.shape[1]
        pos = torch.arange(T, device=tokens.device)
        same = (tokens[:, :, None] == tokens[:, None, :]) & (pos[None, :] < pos[:, None])
        prev = torch.where(same, pos, -1).amax(-1)  # previous occurrence, -1 if none
        found = prev >= 0
        prev = prev.clamp(min=0)
        fails = torch.isin(prev % period, weak.to(tokens.device))
        pred = torch.where(fails, tokens.gather(1, prev), tokens.gather(1, (prev + 1).clamp(max=T - 1)))
        pred = torch.where(found, pred, torch.zeros_like(pred))
        return torch.nn.functional.one_hot(pred, vocab_size).float()

    return model
