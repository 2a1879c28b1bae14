"""Rows that share a prompt: a multi-token answer's rows (one per answer token) and several queries of one
haystack keep their prompt's `prompt_id`, so a phase sweep runs each distinct prompt once. Runs over many long
prompts forward them in chunks of at most `FORWARD_TOKENS` tokens and gather the rows they keep (`fill_rows`);
interventions that stack one copy of the batch per unit take `units_per_forward` units per forward."""

from __future__ import annotations

from typing import Any

import torch
from jaxtyping import Bool, Int
from torch import Tensor

#: tokens per forward where a run goes through many long prompts (the KV-cache base run, calibration captures,
#: the full forwards of knockout and patching): 16 prompts of 4,096 tokens; bounds the forward's activations
FORWARD_TOKENS = 65536


def distinct_prompts(prompt_id: Int[Tensor, " rows"], tokens: Int[Tensor, "rows pos"] | None = None
                     ) -> tuple[Int[Tensor, " prompts"], Int[Tensor, " rows"]]:
    """(the first row of each distinct prompt, each row's prompt among them).

    Args:
        prompt_id: each row's prompt.
        tokens: the rows' tokens: when given, rows that share a `prompt_id` must share their tokens (a batch
            that edits a prompt's tokens must renumber it, as `interventions.pairs` does), since only the
            first row of each prompt is run.

    Raises:
        ValueError: two rows share a `prompt_id` but not their tokens (naming the first such row).

    Example:
        >>> first, which = distinct_prompts(torch.tensor([4, 4, 7, 7, 7]))
        >>> first.tolist(), which.tolist()
        ([0, 2], [0, 0, 1, 1, 1])
    """
    uniq, inverse = torch.unique(prompt_id.cpu(), return_inverse=True)
    first = torch.full((len(uniq),), len(prompt_id), dtype=torch.long).scatter_reduce(
        0, inverse, torch.arange(len(prompt_id)), reduce="amin")
    if tokens is not None:
        differ = (tokens != tokens[first.to(tokens.device)][inverse.to(tokens.device)]).any(dim=1).nonzero()
        if len(differ):
            row = int(differ[0])
            raise ValueError(f"rows {int(first[inverse[row]])} and {row} share prompt_id={int(prompt_id[row])} but not "
                             "their tokens: allowed only rows with the same tokens under one prompt_id (renumber "
                             "prompts whose tokens were changed)")
    return first, inverse


def distinct_rows(tokens: Int[Tensor, "rows pos"]) -> tuple[Int[Tensor, " distinct"], Int[Tensor, " rows"]]:
    """(the first row of each distinct token row, in order of first appearance; each row's index among them):
    `distinct_prompts` for rows that carry no `prompt_id`.

    Example:
        >>> first, which = distinct_rows(torch.tensor([[5, 1], [3, 2], [5, 1]]))
        >>> first.tolist(), which.tolist()
        ([0, 1], [0, 1, 0])
    """
    first, which = distinct_prompts(torch.unique(tokens.cpu(), dim=0, return_inverse=True)[1])
    order = first.argsort()
    return first[order], order.argsort()[which]


def positions_per_prompt(src: Int[Tensor, " batch"], query_pos: Int[Tensor, " batch"], n_prompts: int
                         ) -> tuple[Int[Tensor, "prompt k"], Int[Tensor, " batch"]]:
    """(the query positions of each prompt, padded by repeating its first: HF's `logits_to_keep` takes
    one count for every row; the column of each row's position in its prompt's list)."""
    lists: list[list[int]] = [[] for _ in range(n_prompts)]
    slot = []
    for s, t in zip(src.tolist(), query_pos.tolist()):
        if t not in lists[s]:
            lists[s].append(t)
        slot.append(lists[s].index(t))
    width = max(len(x) for x in lists)
    keep = torch.tensor([x + [x[0]] * (width - len(x)) for x in lists], device=query_pos.device)
    return keep, torch.tensor(slot, device=query_pos.device)


def shared_forward_rows(tokens: Int[Tensor, "rows pos"], query_pos: Int[Tensor, " rows"]
                        ) -> tuple[Int[Tensor, "prompt pos"], Int[Tensor, " rows"], Int[Tensor, "prompt k"], Int[Tensor, " rows"]]:
    """One forward for rows with equal tokens (a multi-token answer's rows, `tasks.scoring.token_rows`): (the
    distinct prompts, each row's prompt among them, `logits_to_keep` of that forward, each row's column in it),
    all on `tokens`' device; the logits of row i are `logits[src[i], slot[i]]`."""
    first, src = distinct_rows(tokens)
    src = src.to(tokens.device)
    keep, slot = positions_per_prompt(src, query_pos, len(first))
    return tokens[first.to(tokens.device)], src, keep, slot


def units_per_forward(rows: int, max_rows: int, seq_len: int | None = None) -> int:
    """Units one forward takes when each unit runs its own copy of `rows` rows: at most `max_rows` rows and, for
    full forwards over `seq_len` tokens, at most `FORWARD_TOKENS` tokens; at least one unit (a batch larger than
    the bounds still runs whole). The final-position paths forward one position per row: no `seq_len`.

    Example:
        >>> units_per_forward(8, 2048), units_per_forward(8, 2048, seq_len=64), units_per_forward(8, 2048, seq_len=4096)
        (256, 128, 2)
    """
    cap = max_rows if seq_len is None else min(max_rows, max(1, FORWARD_TOKENS // seq_len))
    return max(1, cap // max(rows, 1))


def fill_rows(store: dict, key: Any, n_rows: int, here: Bool[Tensor, " rows"], values: Tensor) -> None:
    """`store[key][here] = values`, `store[key]` made [n_rows, ...] on first use: the rows of a forward run in
    chunks of prompts, gathered into one tensor; a chunk holding every row is kept as it is (no copy)."""
    if key not in store and len(values) == n_rows and bool(here.all()):
        store[key] = values
        return
    if key not in store:
        store[key] = values.new_empty((n_rows, *values.shape[1:]))
    store[key][here.to(values.device)] = values


__all__ = ["FORWARD_TOKENS", "distinct_prompts", "distinct_rows", "fill_rows", "positions_per_prompt", "shared_forward_rows",
           "units_per_forward"]
