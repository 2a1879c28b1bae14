"""Rows that share a prompt: a multi-token answer's rows (one per answer token) and several queries of one
haystack keep their prompt's `prompt_id`, so a phase sweep runs each distinct prompt once."""

from __future__ import annotations

import torch
from jaxtyping import Int
from torch import Tensor


def distinct_prompts(prompt_id: Int[Tensor, " rows"]) -> tuple[Int[Tensor, " prompts"], Int[Tensor, " rows"]]:
    """(the first row of each distinct prompt, each row's prompt among them).

    Example:
        >>> first, which = distinct_prompts(torch.tensor([4, 4, 7, 7, 7]))
        >>> first.tolist(), which.tolist()
        ([0, 2], [0, 0, 1, 1, 1])
    """
    uniq, inverse = torch.unique(prompt_id, return_inverse=True)
    first = torch.full((len(uniq),), len(prompt_id), dtype=torch.long).scatter_reduce(
        0, inverse, torch.arange(len(prompt_id)), reduce="amin")
    return first, inverse


__all__ = ["distinct_prompts"]
