"""The paper's KV-head knockout map on any backend, with `interventions.knockout_map`'s protocol.

`phaseinterp.interventions.knockout_map` runs on our hooked model through TransformerLens hooks.
This module runs the same computation on a `Backend`: the calibration means come from
`Backend.head_outputs` at each calibration row's query position, the edits are the very
`interventions.knockout.knockout_edit` functions applied through `Backend.run_units` (all units
batched as nnsight invokes), and the map is assembled with the same statistics. On a
`HookedBackend` it gives the same numbers as `interventions.knockout_map(model, ...)`
(tested). Once `interventions` dispatches on `Backend` itself (docs/backends.md), use that.
"""

from __future__ import annotations

import warnings
from typing import Any, Sequence

import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor

from phaseinterp.backends.base import Backend
from phaseinterp.backends.load import backend_for
from phaseinterp.tasks import PhaseBatch


def calibrate(backend: Backend, batch: PhaseBatch, positions: Any = "final", *, batch_size: int = 32):
    """Head outputs z of every layer at the knockout sites of a calibration batch, as an
    `interventions.calibration.Calibration` (sites: "final" = each row's query position, "all",
    or absolute positions).

    Example:
        >>> calib = calibrate(backend, task.sample(8, 4, split="calibration"))  # doctest: +SKIP
        >>> calib.mean().shape  # [layer, site, head, d_head]  # doctest: +SKIP
    """
    from phaseinterp.interventions.calibration import Calibration, check_positions, site_positions

    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size} is out of range: allowed >= 1")
    T = batch.tokens.shape[1]
    pos = check_positions(positions, T)
    z = []
    for mb in batch.minibatches(batch_size):
        z.append(backend.head_outputs(mb.tokens, positions=site_positions(pos, mb.query_pos, T)))
    meta = {k: batch.meta[k] for k in ("task", "split", "seed", "config", "protocol") if k in batch.meta}
    return Calibration(torch.cat(z), batch.residue.to(z[0].device), batch.modulus, pos, {**meta, "rows": len(batch)})


def knockout_logits(backend: Backend, batch: PhaseBatch, units: Sequence[Any], calibration: Any, *,
                    replacement: str = "mean", per_residue: bool = False, positions: Any = "final", seed: int = 0,
                    max_rows: int = 2048) -> tuple[Float[Tensor, "batch vocab"], Float[Tensor, "unit batch vocab"]]:
    """Clean logits and logits after each unit's knockout at every row's query position
    (`units`: `interventions.units.HeadUnit`s; see `interventions.knockout.knockout_logits`)."""
    from phaseinterp.interventions.calibration import REPLACEMENTS, Calibration, check_positions, site_positions
    from phaseinterp.interventions.knockout import knockout_edit

    if replacement not in REPLACEMENTS:
        raise ValueError(f"replacement={replacement!r} is invalid: allowed one of {list(REPLACEMENTS)}")
    if not units:
        raise ValueError("no units to knock out")
    T = batch.tokens.shape[1]
    pos = check_positions(positions, T)
    if isinstance(calibration, PhaseBatch):
        calibration = calibrate(backend, calibration, pos)
    elif calibration is None and replacement != "zero":
        raise ValueError(f"replacement={replacement!r} needs a calibration batch (or use replacement='zero')")
    elif calibration is not None and not isinstance(calibration, Calibration):
        raise ValueError(f"calibration must be a PhaseBatch, a Calibration or None, got {type(calibration).__name__}")
    if isinstance(calibration, Calibration) and calibration.positions != pos:
        raise ValueError(f"calibration was taken at positions={calibration.positions!r}, knockout asks for {pos!r}")
    sites = site_positions(pos, batch.query_pos, T)
    cfg = backend.cfg
    repl = {}
    for layer in sorted({u.layer for u in units}):
        if calibration is None:
            repl[layer] = torch.zeros(len(batch), sites.shape[1], cfg.n_heads, cfg.d_head)
        else:
            repl[layer] = calibration.replacement(replacement, layer, batch.residue.to(calibration.z.device),
                                                  per_residue=per_residue, seed=seed)
    clean = backend.final_logits(batch.tokens, batch.query_pos)
    edits = [knockout_edit(u, repl[u.layer], sites) for u in units]
    return clean, backend.run_units(batch.tokens, batch.query_pos, edits, max_rows=max_rows)


def knockout_map(model: Any, batch: PhaseBatch, calibration: Any = None, *, level: str = "kv_head",
                 replacement: str = "mean", per_residue: bool = False, positions: Any = "final",
                 layers: Sequence[int] | None = None, n_boot: int = 2000, confidence: float = 0.95, seed: int = 0,
                 max_rows: int = 2048, label: str = ""):
    """`interventions.knockout_map` for any model a backend wraps (our model, HF DeepSeek-V4, any
    HF causal LM): relative accuracy change `100 (acc_ko - acc_clean) / acc_clean` per
    (layer, unit, residue), as a `SpecializationMap`. Arguments as there (no `method`: units run
    as batched nnsight invokes, `max_rows` rows per forward).

    Example:
        >>> m = knockout_map(backend, task.sample(16, 8), task.sample(16, 8, split="calibration"))  # doctest: +SKIP
        >>> m.coverage(threshold=50)  # doctest: +SKIP
    """
    from phaseinterp.analysis.specialization import SpecializationMap
    from phaseinterp.interventions.knockout import _warn_overlap, is_correct
    from phaseinterp.interventions.runner import unchanged_units, warn_unchanged
    from phaseinterp.interventions.stats import by_residue, paired_bootstrap_relative, relative_change
    from phaseinterp.interventions.units import check_level, head_units, level_size
    from phaseinterp.measure import PhaseCurve
    from phaseinterp.measure.provenance import model_config, versions

    backend = backend_for(model)
    check_level(level)
    if n_boot < 1:
        raise ValueError(f"n_boot={n_boot} is out of range: allowed >= 1")
    units = head_units(backend.cfg, level, layers)
    _warn_overlap(batch, calibration)
    clean_logits, ko_logits = knockout_logits(backend, batch, units, calibration, replacement=replacement,
                                              per_residue=per_residue, positions=positions, seed=seed, max_rows=max_rows)
    warn_unchanged([units[i].label for i in unchanged_units(ko_logits, clean_logits)], f"knockout ({replacement})")
    clean = is_correct(clean_logits, batch.answers).cpu().numpy()
    ko = is_correct(ko_logits, batch.answers).cpu().numpy()
    res, R = batch.residue.numpy(), batch.modulus
    acc_clean = by_residue(clean.astype(np.float64), res, R)
    acc_ko = by_residue(ko.astype(np.float64), res, R)
    rel = relative_change(np.broadcast_to(acc_clean, acc_ko.shape).copy(), acc_ko)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        lo, hi = paired_bootstrap_relative(clean, ko, res, batch.example_id.numpy(), R, n_boot=n_boot,
                                           confidence=confidence, seed=seed)
    layer_ids = sorted({u.layer for u in units})
    n_unit = level_size(backend.cfg, level)
    shape = (len(layer_ids), n_unit, R)
    curve = PhaseCurve.from_correct(clean, batch, n_boot=n_boot, n_perm=200, confidence=confidence, seed=seed,
                                    label=f"{label} clean".strip())
    return SpecializationMap(
        values=rel.reshape(shape), dims=("layer", level, "residue"),
        coords={"layer": layer_ids, level: list(range(n_unit)) if level != "layer" else ["all"],
                "residue": list(range(R))},
        lo=lo.reshape(shape), hi=hi.reshape(shape),
        extras={"acc_knockout": acc_ko.reshape(shape), "n_rows": np.broadcast_to(np.bincount(res, minlength=R), shape)},
        clean=curve.to_dict(), quantity="relative accuracy change (%)", direction=-1, clip=100.0,
        meta={"label": label, "intervention": {"kind": "knockout", "level": level, "replacement": replacement,
                                               "per_residue": per_residue, "positions": positions,
                                               "method": f"backend:{backend.cfg.kind}"},
              "model": model_config(backend), "task": batch.meta,
              "calibration": getattr(calibration, "meta", None) if calibration is not None else None,
              "seed": seed, "n_boot": n_boot, "confidence": confidence, "versions": versions()})
