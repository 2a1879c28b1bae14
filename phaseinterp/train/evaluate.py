"""Quick evaluation of a trained model for its card: record-lookup accuracy by residue on prompts
matched to the training mixture (`Mixture.eval_task_kwargs`). The full statistics (bootstrap,
permutation tests) are `phaseinterp sweep` / `phaseinterp.measure.phase_sweep`."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch

from phaseinterp.measure.intervals import wilson_interval
from phaseinterp.measure.sweep import eval_mode
from phaseinterp.tasks import RecordLookup, Task
from phaseinterp.tasks.protocol import check_task
from phaseinterp.tasks.scoring import per_row, token_rows
from phaseinterp.train.data import IGNORE, Mixture, make_batch

#: A run "learned" when its best residue reaches this accuracy on the matched task: it retrieves
#: through the compressed cache at some phase (a compressed model may fail the others: the effect).
LEARNED_BEST = 0.8


def rows_for(task_kwargs: dict[str, Any], modulus: int) -> dict[str, Any]:
    """`RecordLookup` arguments whose rows can place the needle at every residue mod `modulus`:
    `task_kwargs` with `seq_len` raised, where needed, to the shortest multiple of 8 that can
    (RoPE is relative: on W8/S8 the curve on longer rows equals the one on training rows)."""
    need = RecordLookup(**{**task_kwargs, "seq_len": None}).min_seq_len(modulus)
    return {**task_kwargs, "seq_len": max(task_kwargs["seq_len"], -(-need // 8) * 8)}


@torch.no_grad()
def phase_curve(model, mixture: Mixture | None, *, modulus: int = 8, n_per_residue: int = 256, seed: int = 1000,
                protocol: str = "prefix", batch_size: int = 256, task: Task | None = None,
                **task_overrides: Any) -> dict[str, Any]:
    """Top-1 accuracy of `model` by target key position mod `modulus` on a matched
    `RecordLookup` (or on `task`), as a JSON-ready dict (accuracy per residue with 95% Wilson intervals, mean,
    worst, best, gap in points, mean |A(r) - A(r + S)| in points for every S dividing the
    modulus, and `learned`: best >= `LEARNED_BEST`).

    Args:
        model: a HookedCompressedTransformer (or any tokens -> logits module).
        mixture: the training mixture (vocabulary split, sequence length, record counts); not
            used with `task`.
        modulus: residue modulus R (>= 1).
        n_per_residue: logical examples, each rendered at every residue (>= 1).
        seed: task seed (evaluation prompts are not training batches: different generator).
        protocol: "prefix" or "insequence".
        batch_size: prompts per forward pass.
        task: any `phaseinterp.tasks.Task` to evaluate on instead of the matched record lookup
            (then `protocol` and `task_overrides` are not used; the dict's "task" is its card). A
            multi-token answer is correct when every answer token is (`tasks.scoring`).
        task_overrides: other `RecordLookup` arguments (n_records, n_demos, ...).
    """
    if isinstance(modulus, bool) or not isinstance(modulus, int) or modulus < 1:
        raise ValueError(f"modulus={modulus!r} is invalid: allowed an integer >= 1")
    if task is None:
        if mixture is None:
            raise ValueError("mixture=None is invalid without task=: allowed a Mixture (the matched record lookup)")
        kwargs = mixture.eval_task_kwargs(protocol=protocol)
        kwargs.update(task_overrides)
        task = RecordLookup(**kwargs)
    else:
        if task_overrides:
            raise ValueError(f"task overrides {sorted(task_overrides)} are invalid with task=: allowed none (build the "
                             "task with them)")
        kwargs = check_task(task).card()
    batch = task.sample(n_per_residue, modulus, seed=seed)
    rows, owner = token_rows(batch)  # one row per scored answer token (the batch itself for one-token answers)
    device = next(model.parameters()).device
    correct = []
    with eval_mode(model):
        for start in range(0, len(rows), batch_size):
            tokens = rows.tokens[start:start + batch_size].to(device)
            q = rows.query_pos[start:start + batch_size].to(device)
            logits = model(tokens)
            pred = logits[torch.arange(len(tokens), device=device), q].argmax(-1).cpu()
            correct.append((pred[:, None] == rows.answers[start:start + batch_size]).any(1))
    correct = per_row(torch.cat(correct), owner, len(batch)).numpy()
    residue = batch.residue.numpy()
    k = np.bincount(residue, weights=correct, minlength=modulus).astype(np.int64)
    n = np.bincount(residue, minlength=modulus).astype(np.int64)
    acc = k / np.maximum(n, 1)
    lo, hi = wilson_interval(k, n)
    periodicity = {str(s): float(100 * np.mean(np.abs(acc - np.roll(acc, -s)))) for s in range(1, modulus + 1)
                   if modulus % s == 0}
    return {
        "task": {**kwargs, "n_per_residue": n_per_residue, "seed": seed, "modulus": modulus},
        "accuracy": [round(float(a), 4) for a in acc], "n": n.tolist(), "n_correct": k.tolist(),
        "wilson_95": [[round(float(a), 4), round(float(b), 4)] for a, b in zip(lo, hi)],
        "mean": round(float(acc.mean()), 4), "worst": round(float(acc.min()), 4), "best": round(float(acc.max()), 4),
        "gap_pp": round(float(100 * (acc.max() - acc.min())), 2),
        "learned": bool(acc.max() >= LEARNED_BEST),
        "periodicity_pp": {s: round(v, 2) for s, v in periodicity.items()},
    }


@torch.no_grad()
def accuracy_by_undemonstrated(model, mixture: Mixture, *, n_rows: int = 1024, seed: int = 1000, batch_size: int = 256
                               ) -> dict[str, Any]:
    """Final-query accuracy on training rows (lookup rows only, after the curriculum and any
    aligned start, `min_undemonstrated=1`), split by how many haystack records no demonstration
    repeats. A row with one such record is answerable by exclusion (the value never demonstrated)
    without matching the key: a model that learned that and not retrieval scores near 1 there and
    near 1/k with k candidates (docs/training.md, "The exclusion shortcut").

    Returns:
        {"by_undemonstrated": {k: {"rows", "correct", "accuracy", "wilson_95"}}, "rows", "step", "seed"}.
    """
    if isinstance(n_rows, bool) or not isinstance(n_rows, int) or n_rows < 1:
        raise ValueError(f"n_rows={n_rows!r} is invalid: allowed an integer >= 1")
    lookup_only = dataclasses.replace(mixture, lm_fraction=0.0, min_undemonstrated=1)
    step = max(mixture.curriculum_steps, mixture.aligned_steps)
    batch = make_batch(lookup_only, seed, step, n_rows)
    device = next(model.parameters()).device
    with eval_mode(model):
        pred = torch.cat([model(batch.tokens[i:i + batch_size].to(device))[:, -1].argmax(-1).cpu()
                          for i in range(0, n_rows, batch_size)])
    correct = (pred == batch.targets[:, -1]).numpy()
    keys = mixture.pools.keys
    tok = batch.tokens.numpy()
    n_demos = (batch.targets != IGNORE).sum(1).numpy() - 1
    is_key = (tok >= keys[0]) & (tok <= keys[-1])
    haystack_end = mixture.seq_len - 1 - 2 * n_demos
    in_haystack = np.arange(mixture.seq_len)[None, :] < haystack_end[:, None]
    left = (is_key & in_haystack).sum(1) - n_demos
    out = {}
    for k in np.unique(left):
        rows = left == k
        n, c = int(rows.sum()), int(correct[rows].sum())
        lo, hi = wilson_interval(np.array([c]), np.array([n]))
        out[str(int(k))] = {"rows": n, "correct": c, "accuracy": round(c / n, 4), "wilson_95": [round(float(lo[0]), 4), round(float(hi[0]), 4)]}
    return {"by_undemonstrated": out, "rows": n_rows, "step": step, "seed": seed}


def exclusion_summary(by_undemonstrated: dict[str, dict[str, Any]]) -> dict[str, float | int]:
    """From `accuracy_by_undemonstrated(...)["by_undemonstrated"]`: accuracy with one undemonstrated
    record (`one`), with several (`several`), and what picking uniformly among the undemonstrated
    records, exclusion without retrieval, would score on the latter rows (`several_by_exclusion_alone`)."""
    several = {int(k): v for k, v in by_undemonstrated.items() if k != "1"}
    rows = sum(v["rows"] for v in several.values())
    one = by_undemonstrated.get("1", {"rows": 0, "accuracy": float("nan")})
    return {
        "one": one["accuracy"], "one_rows": one["rows"],
        "several": round(sum(v["correct"] for v in several.values()) / rows, 4), "several_rows": rows,
        "several_by_exclusion_alone": round(sum(v["rows"] / k for k, v in several.items()) / rows, 4),
    }


__all__ = ["LEARNED_BEST", "accuracy_by_undemonstrated", "exclusion_summary", "phase_curve", "rows_for"]
