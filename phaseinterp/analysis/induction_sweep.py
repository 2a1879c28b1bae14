"""Induction-copy accuracy by phase of a pretrained model under training-free KV compression.

One forward per prompt and setting gives every query of the second copy (`induction_batch`);
the per-row outcomes become a `PhaseCurve` at residues mod R = 2S (so that "period S" can be
tested) with the library's cluster bootstrap (cluster = prompt), permutation tests and
`dominant_period`. The change against the uncompressed model is absolute, in points, with a
paired cluster-bootstrap interval (`interventions.stats.paired_cluster_bootstrap`, "absolute").
"""

from __future__ import annotations

import warnings
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from jaxtyping import Bool, Float
from torch import Tensor

from phaseinterp.backends.kv_compression import KVCompression, compress_attention, restore_attention
from phaseinterp.interventions.stats import paired_cluster_bootstrap
from phaseinterp.measure import PhaseCurve, dominant_period, evaluate_correct
from phaseinterp.measure.journal import Journal, digest, batch_fingerprint, model_fingerprint
from phaseinterp.tasks import PhaseBatch


def compression_settings(window: int, layers: Sequence[int] | None, *, local: int = 16, sink: int = 0
                         ) -> list[KVCompression]:
    """The grid at W = S = `window`: mean and score pooling at each rotation anchor, and eviction
    keeping the window's first or last token (at its own position, anchor "post").

    Example:
        >>> [s.name for s in compression_settings(4, None)][::3]
        ['W4/S4 mean@post L16', 'W4/S4 mean@last L16', 'W4/S4 score@centre L16', 'W4/S4 evict3@post L16']
    """
    base = dict(window=window, stride=window, local=local, sink=sink, layers=None if layers is None else tuple(layers))
    out = [KVCompression(rule=rule, anchor=anchor, **base) for rule in ("mean", "score")
           for anchor in ("post", "first", "centre", "last")]
    return out + [KVCompression(rule="evict", anchor="post", offset=o, **base) for o in (0, window - 1)]


def _logits_fn(model: torch.nn.Module):
    return lambda tokens: model(input_ids=tokens, use_cache=False).logits


class SettingJournals:
    """The journals of a training-free compression study: one folder per (batch, setting) under
    `root`, each a `measure.journal.Journal` of that setting's minibatches, keyed by the weights
    of the uncompressed model (hashed once here), the batch and the setting.

    A killed study run again with the same `SettingJournals` root takes every finished minibatch
    from its journal and computes the rest, so its correctness equals the uninterrupted run's bit
    for bit. `taken` / `units` count the minibatches read back / seen by this object.

    Example:
        >>> from phaseinterp.backends.tiny import tiny_qwen3
        >>> from phaseinterp.tasks.induction import induction_batch
        >>> llm, prompts = tiny_qwen3(seed=0), induction_batch(8, 12, 2, vocab=(4, 512))  # 88 rows, 44 per forward
        >>> journals = SettingJournals("work/journal", llm)
        >>> clean = induction_correct(llm, prompts, resume=journals)
        >>> journals.taken, journals.units  # a fresh journal: nothing read back
        (0, 2)
        >>> again = SettingJournals("work/journal", llm)  # a later run takes both minibatches back
        >>> bool((induction_correct(llm, prompts, resume=again) == clean).all()), again.taken
        (True, 2)
    """

    def __init__(self, root: str | Path, model: torch.nn.Module) -> None:
        self.root = Path(root)
        self.model = model_fingerprint(model)
        self.taken = self.units = 0

    def journal(self, batch: PhaseBatch, spec: KVCompression | None, batch_size: int, *, kind: str = "induction"
                ) -> Journal:
        """The journal of `spec` (None: uncompressed) on `batch`, in minibatches of `batch_size`."""
        data = batch_fingerprint(batch)
        settings = {"spec": spec.to_dict() if spec else None, "batch_size": batch_size}
        name = re.sub(r"[^A-Za-z0-9@.-]+", "_", spec.name if spec else "uncompressed")
        return Journal(self.root / f"{kind}-{name}-{digest(data, settings)[:12]}", kind,
                       {"model": self.model, "batch": data, "settings": settings})

    def record(self, journal: Journal, n_units: int) -> None:
        self.taken += journal.taken
        self.units += n_units


def induction_correct(model: torch.nn.Module, batch: PhaseBatch, spec: KVCompression | None = None, *,
                      prompts_per_forward: int = 4, resume: SettingJournals | str | Path | None = None
                      ) -> Bool[Tensor, " row"]:
    """Top-1 correctness of every row of `batch` with the model compressed by `spec` (None:
    uncompressed); the model is restored afterwards, also on error.

    Args:
        resume: a `SettingJournals` (or its root folder): this setting's finished minibatches are
            recorded there and taken back by a later call (a killed run continues, bit-identical).
    """
    per_prompt = int(torch.bincount(batch.prompt_id).max())
    batch_size = per_prompt * prompts_per_forward
    if isinstance(resume, (str, Path)):
        resume = SettingJournals(resume, model)
    journal = None if resume is None else resume.journal(batch, spec, batch_size)
    try:
        if spec is not None:
            compress_attention(model, spec)
        out = evaluate_correct(_logits_fn(model), batch, batch_size=batch_size, progress=False, resume=journal)
    finally:
        restore_attention(model)
    if resume is not None:
        resume.record(journal, -(-len(batch) // batch_size))
    return out


@dataclass
class SweepRow:
    """One setting at one stride: its curve summary and its change against the uncompressed model."""

    setting: str
    window: int
    stride: int
    rule: str
    anchor: str
    modulus: int
    mean: float
    mean_ci: tuple[float, float]
    delta_pp: float
    delta_ci_pp: tuple[float, float]
    worst: float
    worst_residue: int
    best: float
    best_residue: int
    gap_pp: float
    gap_ci_pp: tuple[float, float]  # interval of the held-out gap (measure.gap)
    p_phase: float
    p_periodic: float
    dominant_period: int | None
    verdict: str
    accuracy: list[float]
    phase_accuracy: list[float]
    spec: dict[str, Any] | None
    gap_heldout_pp: float = float("nan")  # rows written before held-out gaps lack it

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def sweep_row(correct: Bool[Tensor, " row"], clean: Bool[Tensor, " row"], batch: PhaseBatch, stride: int,
              spec: KVCompression | None, *, n_boot: int = 2000, n_perm: int = 2000, seed: int = 0) -> SweepRow:
    """Statistics of one setting at residues mod 2S (target position mod 2S)."""
    R = 2 * stride
    res = (batch.value_pos % R).numpy()
    ids = batch.example_id.numpy()
    y, c = correct.numpy(), clean.numpy()
    label = spec.name if spec is not None else f"uncompressed (S={stride})"
    curve = PhaseCurve.from_correct(y, residue=res, example_id=ids, modulus=R, period=stride, n_boot=n_boot,
                                    n_perm=n_perm, seed=seed, label=label, config={"compression": spec and spec.to_dict()})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        lo, hi = paired_cluster_bootstrap(c, y[None], np.zeros_like(res), ids, 1, n_boot=n_boot, seed=seed,
                                           change="absolute")
    s = curve.summary()
    phase = np.bincount(res % stride, weights=y, minlength=stride) / np.bincount(res % stride, minlength=stride)
    return SweepRow(
        setting=label, window=spec.window if spec else 1, stride=stride, rule=spec.rule if spec else "none",
        anchor=spec.anchor if spec else "-", modulus=R, mean=s["mean"], mean_ci=tuple(s["mean_interval"]),
        delta_pp=100 * float(y.mean() - c.mean()), delta_ci_pp=(float(lo[0, 0]), float(hi[0, 0])),
        worst=s["worst"], worst_residue=s["worst_residue"], best=s["best"], best_residue=s["best_residue"],
        gap_pp=s["gap_pp"], gap_ci_pp=tuple(s["gap_interval_pp"]), p_phase=s["p_value"], p_periodic=s["p_periodic"],
        dominant_period=dominant_period(curve.accuracy), verdict=s["verdict"], gap_heldout_pp=s["gap_heldout_pp"],
        accuracy=[float(a) for a in curve.accuracy], phase_accuracy=[float(a) for a in phase],
        spec=spec.to_dict() if spec else None)


def layer_screen(model: torch.nn.Module, batch: PhaseBatch, spec: KVCompression, clean: Bool[Tensor, " row"], *,
                 resume: SettingJournals | None = None) -> Float[np.ndarray, " layer"]:
    """Induction accuracy change (points) when only layer l is compressed by `spec`, for every layer
    (`resume`: as in `induction_correct`)."""
    n_layers = len(model.model.layers)
    base = float(clean.float().mean())
    out = []
    for layer in range(n_layers):
        one = KVCompression(**{**spec.to_dict(), "layers": (layer,)})
        out.append(100 * (float(induction_correct(model, batch, one, resume=resume).float().mean()) - base))
    return np.array(out)
