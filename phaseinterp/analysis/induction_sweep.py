"""Induction-copy accuracy by phase of a pretrained model under training-free KV compression.

One forward per prompt and setting gives every query of the second copy (`induction_batch`);
the per-row outcomes become a `PhaseCurve` at residues mod R = 2S (so that "period S" can be
tested) with the library's cluster bootstrap (cluster = prompt), permutation tests and
`dominant_period`. The change against the uncompressed model is absolute, in points, with a
paired cluster-bootstrap interval (`interventions.stats.paired_cluster_bootstrap`, "absolute").
"""

from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass
from typing import Any, Sequence

import numpy as np
import torch
from jaxtyping import Bool, Float
from torch import Tensor

from phaseinterp.backends.kv_compression import KVCompression, compress_attention, restore_attention
from phaseinterp.interventions.stats import paired_cluster_bootstrap
from phaseinterp.measure import PhaseCurve, evaluate_correct
from phaseinterp.tasks import PhaseBatch
from phaseinterp.measure import dominant_period


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


def induction_correct(model: torch.nn.Module, batch: PhaseBatch, spec: KVCompression | None = None, *,
                      prompts_per_forward: int = 4) -> Bool[Tensor, " row"]:
    """Top-1 correctness of every row of `batch` with the model compressed by `spec` (None:
    uncompressed); the model is restored afterwards, also on error."""
    per_prompt = int(torch.bincount(batch.prompt_id).max())
    try:
        if spec is not None:
            compress_attention(model, spec)
        return evaluate_correct(_logits_fn(model), batch, batch_size=per_prompt * prompts_per_forward, progress=False)
    finally:
        restore_attention(model)


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


def layer_screen(model: torch.nn.Module, batch: PhaseBatch, spec: KVCompression, clean: Bool[Tensor, " row"]
                 ) -> Float[np.ndarray, " layer"]:
    """Induction accuracy change (points) when only layer l is compressed by `spec`, for every layer."""
    n_layers = len(model.model.layers)
    base = float(clean.float().mean())
    out = []
    for layer in range(n_layers):
        one = KVCompression(**{**spec.to_dict(), "layers": (layer,)})
        out.append(100 * (float(induction_correct(model, batch, one).float().mean()) - base))
    return np.array(out)
