"""`phase_sweep`: run a model (any tokens -> logits callable) over a PhaseBatch and score it.

A model goes through `phaseinterp.families.resolve.runner` first, the one place where a model
becomes what the experiments run on: a backend (our `HookedCompressedTransformer` behind
`HookedBackend`, a raw HuggingFace model behind its backend), which computes the logits at the
query positions (`Backend.sweep_logits`); any other tokens -> logits callable runs behind
`PlainModel`, which answers the same questions. Nothing here asks what kind of model it holds."""

from __future__ import annotations

import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
from jaxtyping import Bool, Int
from torch import Tensor

from phaseinterp.config import renamed_keyword
from phaseinterp.families.resolve import forward_logits, runner  # noqa: F401  (forward_logits: re-exported)
from phaseinterp.measure.curve import PhaseCurve
from phaseinterp.measure.journal import Journal, batch_fingerprint, model_fingerprint, open_journal
from phaseinterp.measure.provenance import model_config
from phaseinterp.progress import check_progress, tqdm  # tqdm.auto only with ipywidgets (no TqdmWarning)
from phaseinterp.tasks import PhaseBatch
from phaseinterp.tasks.scoring import per_row, token_rows

Model = Callable[[Int[Tensor, "batch pos"]], Any]


def model_period(model: Any) -> int | None:
    """Period of a model's phase effect: `period_of` its strides (None if absent or empty)."""
    return runner(model).period()


@contextmanager
def eval_mode(module: torch.nn.Module | None) -> Iterator[None]:
    """Run the block with `module` in eval mode (dropout off), restoring its training flag after
    (None: nothing to switch)."""
    was = isinstance(module, torch.nn.Module) and module.training
    if was:
        module.eval()
    try:
        yield
    finally:
        if was:
            module.train()


def evaluate_correct(model: Model, batch: PhaseBatch, *, batch_size: int = 32,
                     device: torch.device | str | None = None, progress: bool = True,
                     resume: str | Path | Journal | None = None) -> Bool[Tensor, " batch"]:
    """Top-1 correctness per row: the argmax over the full vocabulary of the next-token logits
    at `query_pos` is one of `answers` (a multi-token answer, `batch.answer_pos`: the argmax at every
    answer position is the answer's token, `phaseinterp.tasks.scoring`). A backend computes those
    logits (`Backend.sweep_logits`: our model and NSA one full forward per distinct prompt, HF backends the query positions
    only with `logits_to_keep`, and chunked prefill with `prefill_chunk`); for a plain callable,
    rows that share a prompt (several queries) share one forward pass within a minibatch.

    Args:
        model: our model, NSA or a raw HF model (each run through its backend), a backend, or any
            tokens [batch, pos] -> logits [batch, pos, vocab] callable (or an object with `.logits`).
        batch: the prompts.
        batch_size: rows per minibatch, >= 1 (whole prompts: a prompt with more rows runs alone).
        device: where to run (default: the device of the model's parameters, else CPU).
        progress: show a progress bar.
        resume: a journal folder (`measure.journal`): each finished minibatch's correctness is
            recorded there, and minibatches already recorded (by a run that was killed) are taken
            from it instead of run again; the result is the same bit for bit. A journal of another
            model, batch or batch size is refused. Needs a model with weights (not a plain callable),
            unless a `Journal` is given whole: its maker keyed it (the weights behind a callable).

    Returns:
        Boolean tensor on CPU, one entry per row of `batch`.
    """
    return _evaluate(model, batch, batch_size=batch_size, device=device, progress=progress, resume=resume)[0]


@torch.no_grad()
def _evaluate(model: Any, batch: PhaseBatch, *, batch_size: int, device: torch.device | str | None,
              progress: bool, resume: str | Path | Journal | None) -> tuple[Bool[Tensor, " batch"], Journal | None]:
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size} out of range [1, inf)")
    if len(batch) == 0:
        raise ValueError("batch has 0 rows: allowed a batch with at least one row (RecordLookup(...).sample(n_per_residue >= 1, "
                         "modulus)); a filter may have removed every row")
    model = runner(model)
    dev = model.sweep_device(device)
    batch, owner, n_rows = *token_rows(batch), len(batch)  # one row per scored answer token
    # a Journal given whole was keyed by its maker (e.g. a callable's weights it knows and we do not)
    journal = resume if resume is None or isinstance(resume, Journal) else open_journal(resume, "sweep", {
        "model": model_fingerprint(model), "batch": batch_fingerprint(batch),
        "settings": {"batch_size": batch_size, "device": dev.type, "logits": model.sweep_info()}})
    out = []
    # a prompt's rows (its answer tokens, its queries) share one forward: never split them over two
    minibatches = list(batch.minibatches(batch_size, whole_prompts=True))
    with eval_mode(model.module()):
        bar = tqdm(minibatches, total=len(minibatches), disable=not check_progress(progress), desc="phase sweep",
                   unit="batch")
        for i, mb in enumerate(bar):
            done = None if journal is None else journal.get(f"mb{i:06d}")
            if done is not None:
                if done["correct"].shape != (len(mb),):
                    raise ValueError(f"journal {str(journal.folder)!r}: minibatch {i} holds {done['correct'].shape} "
                                     f"rows, allowed ({len(mb)},); remove the journal to start over")
                out.append(torch.from_numpy(done["correct"]))
                continue
            start = time.perf_counter()
            pred = model.sweep_logits(mb.tokens, mb.query_pos, mb.prompt_id).argmax(-1).cpu()
            out.append((pred[:, None] == mb.answers).any(1))
            if journal is not None:
                journal.put(f"mb{i:06d}", seconds=time.perf_counter() - start, correct=out[-1].numpy())
    return per_row(torch.cat(out), owner, n_rows), journal


def phase_sweep(model: Model | Bool[Tensor, " batch"], batch: PhaseBatch, *, batch_size: int = 32,
                period: int | None = None, device: torch.device | str | None = None, progress: bool = True,
                label: str = "", n_boot: int = 2000, n_perm: int = 2000, confidence: float = 0.95,
                seed: int = 0, config: dict[str, Any] | None = None, resume: str | Path | Journal | None = None,
                **deprecated: Any) -> PhaseCurve:
    """Accuracy by residue of a model on a PhaseBatch, with intervals and periodicity tests.

    Args:
        model: our model, a backend, a raw HuggingFace model (wrapped with `backend_for`; logits
            at the query positions only), any callable tokens -> logits, or a precomputed
            boolean `correct` tensor (one entry per row, e.g. after an intervention).
        batch: the prompts (`RecordLookup(...).sample(...)`).
        batch_size: rows per forward pass.
        period: P for the periodicity statistics; default the model's period, lcm(model.cfg.strides),
            when it has one and it divides the modulus, else None. The old name `stride=` still
            works, with a DeprecationWarning.
        device, progress: see `evaluate_correct`.
        label, n_boot, n_perm, confidence, seed, config: see `PhaseCurve.from_correct`.
        resume: a journal folder (see `evaluate_correct`); the curve's config records
            `resumed` = {"minibatches": taken from the journal, "of": all, "seconds": their compute time}.

    Returns:
        PhaseCurve recording the task and model configuration, the seed and library versions.

    Example:
        >>> from phaseinterp.measure import induction_oracle
        >>> from phaseinterp.tasks import RecordLookup
        >>> batch = RecordLookup(vocab_size=128, n_records=8, n_demos=1).sample(8, modulus=4)
        >>> model = induction_oracle(128, weak_phases=[3], period=4)  # fails on keys at phase 3
        >>> phase_sweep(model, batch, progress=False, n_boot=200, n_perm=200).accuracy.tolist()
        [1.0, 1.0, 1.0, 0.0]
    """
    period = renamed_keyword("phase_sweep", deprecated, "stride", "period", period)
    if isinstance(model, Tensor):
        if model.dtype != torch.bool or model.shape != (len(batch),):
            raise ValueError(f"a precomputed correct tensor must be bool of shape ({len(batch)},), "
                             f"got {model.dtype} {tuple(model.shape)}")
        correct, info = model, {"model": "precomputed correct"}
    else:
        model = runner(model)
        correct, journal = _evaluate(model, batch, batch_size=batch_size, device=device, progress=progress,
                                     resume=resume)
        s = model.period()
        if period is None and s is not None and batch.modulus % s == 0:
            period = s
        info = {"model": model_config(model) or model.model_class()}
        how = model.sweep_info()
        if how is not None:  # logits at the query positions only (None: full forwards)
            info["logits"] = how
        if journal is not None:
            of = sum(1 for _ in token_rows(batch)[0].minibatches(batch_size, whole_prompts=True))
            info["resumed"] = journal.resumed("minibatches", of)
    info["sweep"] = {"batch_size": batch_size, "n_boot": n_boot, "n_perm": n_perm, "confidence": confidence}
    return PhaseCurve.from_correct(correct, batch, period=period, n_boot=n_boot, n_perm=n_perm,
                                   confidence=confidence, seed=seed, label=label, config={**info, **(config or {})})
