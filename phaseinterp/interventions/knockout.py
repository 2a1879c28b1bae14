"""Knockout: replace the outputs of a set of query heads (those reading one KV head, one head,
or a whole layer) by a calibration mean, zero or a resampled activation, and map the relative
accuracy change over (layer, unit, residue).

One implementation for every model: it talks to a backend (`phaseinterp.backends`; our
`HookedCompressedTransformer` behind `HookedBackend`: TransformerLens hooks, or the incremental
final-position path; HuggingFace models behind their nnsight backends, Llama / Qwen / Mistral
decoders with a final-position path through the KV cache, NSA, DeepSeek-V4 and DSA with their own).
Which implementation
runs is the backend's method, never a branch here."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import numpy as np
import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from phaseinterp.backends.prompts import units_per_forward
from phaseinterp.interventions.calibration import (REPLACEMENTS, SELF, Calibration, Positions, calibrate_cached,
                                                   check_calibration, check_positions, site_positions)
from phaseinterp.interventions.checks import check_at_least_one
from phaseinterp.interventions.options import RELIABLE_FLOOR, KnockoutOptions  # noqa: F401  (RELIABLE_FLOOR: re-exported)
from phaseinterp.interventions.runner import UnitEdit, runnable, unchanged_units, warn_unchanged
from phaseinterp.interventions.stats import CHANGES, accuracy_change, pooled_change
from phaseinterp.measure import PhaseCurve, model_period
from phaseinterp.measure.journal import journaled_chunks
from phaseinterp.measure.provenance import model_config, versions
from phaseinterp.measure.specialization import SpecializationMap
from phaseinterp.progress import in_chunks
from phaseinterp.tasks import PhaseBatch
from phaseinterp.tasks.scoring import per_row, token_rows
from phaseinterp.units import Unit, check_level, head_units, level_size

METHODS = ("auto", "incremental", "hooks")




def unit_axis(level: str) -> str:
    """Name of the unit axis of a map at `level`: "kv_head", "head", or "heads" (one label, "all")
    for whole layers, so that it never collides with the "layer" axis."""
    return "heads" if check_level(level) == "layer" else level


def unit_coords(cfg, level: str) -> list:
    """Labels of the unit axis: KV heads, query heads, or ["all"] for whole layers."""
    return list(range(level_size(cfg, level))) if level != "layer" else ["all"]


def knockout_edit(unit: Unit, values: Float[Tensor, "batch site head d_head"], sites: Int[Tensor, "batch site"],
                  *, cfg) -> UnitEdit:
    """Hook edit setting `z[row, sites[row, s], heads] = values[row, s, heads]` at layer
    `unit.layer`, for the query heads `heads = unit.heads(cfg)` (`cfg`: the model's config); use
    with `run_units` or as `(name, fn)` via `knockout_hooks`."""
    heads = list(unit.heads(cfg))

    def edit(z: Tensor) -> Tensor:
        rows = torch.arange(z.shape[0], device=z.device)[:, None]
        s = sites.to(z.device)
        patch = z[rows, s]
        patch[..., heads, :] = values.to(z.device, z.dtype)[..., heads, :]
        z = z.clone()
        z[rows, s] = patch
        return z

    return {f"blocks.{unit.layer}.attn.hook_z": edit}


def knockout_hooks(unit: Unit, values: Float[Tensor, "batch site head d_head"], sites: Int[Tensor, "batch site"],
                   *, cfg) -> list[tuple[str, Callable]]:
    """TransformerLens forward hooks for one knockout, e.g. `model.run_with_hooks(tokens,
    fwd_hooks=knockout_hooks(unit, values, sites, cfg=model.cfg))`."""
    return [(name, lambda x, hook, f=f: f(x)) for name, f in knockout_edit(unit, values, sites, cfg=cfg).items()]


def _calibration(model, calibration, positions, replacement: str, max_rows: int | None = None) -> Calibration | str | None:
    if isinstance(calibration, Calibration):
        if calibration.positions != positions:
            raise ValueError(f"calibration was taken at positions={calibration.positions!r}, knockout asks for {positions!r}")
        check_calibration(calibration, model)
        return calibration
    if isinstance(calibration, PhaseBatch):
        return calibrate_cached(model, calibration, positions, max_rows=max_rows)
    if isinstance(calibration, str) and calibration == SELF:
        if replacement == "resample":
            raise ValueError("calibration='self' is invalid with replacement='resample': allowed replacement 'mean' "
                             "(or 'zero'), or pass a calibration batch")
        return None if replacement == "zero" else calibration
    if calibration is None:
        if replacement != "zero":
            raise ValueError(f"replacement={replacement!r} needs a calibration batch (or use replacement='zero')")
        return None
    given = repr(calibration) if isinstance(calibration, str) else f"<{type(calibration).__name__}>"
    raise ValueError(f"calibration={given} is invalid: allowed a PhaseBatch, a Calibration, 'self' or None")


def check_units(model, units: Sequence[Unit]) -> None:
    """ValueError naming the first unit that covers no query heads or that the model lacks."""
    for u in units:
        if not isinstance(u, Unit) or u.kind == "gate":
            raise ValueError(f"unit {u!r} is invalid: allowed a layer, kv_head or head Unit (see head_units)")
        u.check(model.cfg)


def _warn_overlap(batch: PhaseBatch, calibration) -> None:
    if isinstance(calibration, PhaseBatch) and calibration.tokens.shape[1] == batch.tokens.shape[1]:
        seen = {tuple(r) for r in calibration.tokens.tolist()}
        if any(tuple(r) in seen for r in batch.tokens.tolist()):
            import warnings

            warnings.warn("the calibration batch shares prompts with the evaluated batch; the paper uses a disjoint "
                          "calibration set (RecordLookup.sample(..., split='calibration'))", UserWarning, stacklevel=3)


def knockout_logits(model, batch: PhaseBatch, units: Sequence[Unit], calibration: PhaseBatch | Calibration | str | None,
                    *, replacement: str = "mean", per_residue: bool = False, positions: Positions = "final",
                    method: str = "auto", seed: int = 0, max_rows: int = 2048, progress: bool = True
                    ) -> tuple[Float[Tensor, "batch vocab"], Float[Tensor, "unit batch vocab"], str]:
    """Clean logits and logits after each unit's knockout, at every row's query position.

    Args:
        model: our model, a backend or a raw HF model (see `knockout_map`).

    Returns:
        (clean [batch, vocab], knocked out [unit, batch, vocab], method used). Method
        "incremental" recomputes only the final position (positions="final", without hooks: our
        model, or a HF Llama / Qwen / Mistral decoder through its KV cache); "hooks" runs full forwards with the units stacked into the batch, `max_rows`
        rows each (TransformerLens hooks on our model, nnsight invokes on a backend); "auto"
        picks incremental when it applies. `progress`: a bar over the units (`phaseinterp.progress`).
    """
    clean, run, method = _knockout_runner(model, batch, units, calibration, replacement=replacement,
                                          per_residue=per_residue, positions=positions, method=method, seed=seed,
                                          max_rows=max_rows)
    every = list(range(len(units)))
    return clean, in_chunks(lambda s: run(every[s]), len(units), per_forward(batch, max_rows, method), progress=progress,
                            desc="knockout"), method


def path_meta(model, method: str) -> dict:
    """How a map's edited logits were computed, for its meta: "path" ("final_position": the model's
    own recomputation of t (ours, NSA, DSA), "kv_cache": a HF decoder's cached prefix, compressed layers included, "decode_cache":
    DeepSeek-V4 decoding t from a prefilled cache, "full_forward": one forward per unit),
    and, where a backend could not take its final-position path, "fallback" saying why."""
    if method == "incremental":
        return {"path": model.incremental_path}
    why = model.incremental_fallback()
    return {"path": "full_forward", **({} if why is None else {"fallback": why})}


def per_forward(rows: PhaseBatch, max_rows: int, method: str) -> int:
    """Units one forward of a knockout takes (the backends' own chunking, `backends.prompts.units_per_forward`;
    the full forwards of method "hooks" also bounded in tokens): a map run chunk by chunk computes exactly what
    one call over all units computes."""
    return units_per_forward(len(rows), max_rows, None if method == "incremental" else rows.tokens.shape[1])


def _knockout_runner(model, batch: PhaseBatch, units: Sequence[Unit], calibration, *, replacement: str,
                     per_residue: bool, positions: Positions, method: str, seed: int, max_rows: int
                     ) -> tuple[Tensor, Callable[[list[int]], Tensor], str]:
    """(clean logits, run(unit indices) -> their knocked-out logits, method used): the clean run,
    calibration and replacements once, then the units in any chunks."""
    model = runnable(model)
    if replacement not in REPLACEMENTS:
        raise ValueError(f"replacement={replacement!r} is invalid: allowed one of {list(REPLACEMENTS)}")
    if method not in METHODS:
        raise ValueError(f"method={method!r} is invalid: allowed one of {list(METHODS)}")
    check_at_least_one("max_rows", max_rows)
    if not units:
        raise ValueError("no units to knock out")
    check_units(model, units)
    T = batch.tokens.shape[1]
    pos = check_positions(positions, T)
    can_fast = pos == "final" and model.incremental_ok()
    if method == "incremental" and not can_fast:
        why = model.incremental_fallback()
        raise ValueError(f"method='incremental' needs positions='final' and a backend with the final-position path "
                         f"(our HookedCompressedTransformer, a HF Llama / Qwen / Mistral / Gemma 3 decoder through "
                         f"its KV cache, compressed or not, or DeepSeek-V4 through its decoding cache) without hooks "
                         f"attached; "
                         f"got positions={positions!r} on {model.describe()}"
                         f"{'' if why is None else ': ' + why} (allowed: method='hooks')")
    method = ("incremental" if can_fast else "hooks") if method == "auto" else method
    calib = _calibration(model, calibration, pos, replacement, max_rows)
    own = isinstance(calib, str)  # SELF: the batch calibrates itself, so its modulus and sites match
    if not own and calib is not None and per_residue and calib.modulus != batch.modulus:
        raise ValueError(f"calibration modulus {calib.modulus} is invalid for per-residue replacement: "
                         f"allowed the batch's modulus {batch.modulus}")
    if not own and calib is not None and calib.z.shape[2] != site_positions(pos, batch.query_pos, T).shape[1]:
        raise ValueError("calibration sites do not match the batch's (positions='all' needs equal sequence lengths)")
    run = model.final_position_run(batch.tokens, batch.query_pos) if method == "incremental" else None
    if own:  # the evaluated rows' own clean z: free on the incremental path, one capture forward otherwise
        rows = (calibrate_cached(model, batch, pos, max_rows=max_rows) if run is None else
                Calibration(torch.stack([run.base_z(m) for m in range(model.cfg.n_layers)], 1)[:, :, None],
                            batch.residue.to(model.device), batch.modulus, pos))
        calib = dataclasses.replace(rows, example_id=batch.example_id)
    dev = model.device
    sites = site_positions(pos, batch.query_pos.to(dev), T)
    cfg = model.cfg
    zeros = lambda: torch.zeros(len(batch), sites.shape[1], cfg.n_heads, cfg.d_head, device=dev)  # noqa: E731
    repl = {layer: (zeros() if calib is None else calib.replacement(replacement, layer, batch.residue.to(dev),
                                                                    per_residue=per_residue, seed=seed))
            for layer in sorted({u.layer for u in units})}
    if run is not None:
        def run_incremental(idx: list[int]) -> Tensor:
            chunk = [units[i] for i in idx]
            masks = torch.stack([u.mask(cfg, dev) for u in chunk])
            values = torch.stack([repl[u.layer][:, 0] for u in chunk])
            return run.run_z([u.layer for u in chunk], masks, values, max_rows=max_rows)

        return run.logits, run_incremental, method

    def run_hooks(idx: list[int]) -> Tensor:
        edits = [knockout_edit(units[i], repl[units[i].layer], sites, cfg=cfg) for i in idx]
        return model.run_units(batch.tokens, batch.query_pos, edits, max_rows=max_rows)

    return model.final_logits(batch.tokens, batch.query_pos), run_hooks, method


def _knockout_journal(resume, model, batch: PhaseBatch, calibration, units: Sequence[Unit], settings: dict):
    if resume is None:
        return None
    from phaseinterp.measure.journal import batch_fingerprint, model_fingerprint, open_journal

    calib = (batch_fingerprint(calibration) if isinstance(calibration, PhaseBatch) else
             {"z": calibration.z, "residue": calibration.residue} if isinstance(calibration, Calibration) else
             str(calibration))
    return open_journal(resume, "knockout", {"model": model_fingerprint(model), "batch": batch_fingerprint(batch),
                                             "calibration": calib,
                                             "settings": {**settings, "units": [u.name for u in units],
                                                          "device": model.device.type}})


def _knocked_out_correct(model, batch: PhaseBatch, units: Sequence[Unit], calibration, journal, *, replacement: str,
                         progress: bool = True, **kw) -> tuple[np.ndarray, np.ndarray, list[int], str, int]:
    """(clean correct [batch], knocked-out correct [unit, batch], unchanged unit indices, method, chunks):
    the units run in chunks of `per_forward`, each chunk recorded in `journal` when given and
    taken from it when already there."""
    rows, owner = token_rows(batch)  # one row per scored answer token (the batch itself for one-token answers)
    clean_logits, run, used = _knockout_runner(model, rows, units, calibration, replacement=replacement, **kw)
    answers = rows.answers

    def compute(idx: list[int]) -> dict[str, np.ndarray]:
        logits = run(idx)
        return {"correct": is_correct(logits, answers).cpu().numpy(),
                "unchanged": np.isin(np.arange(len(idx)), unchanged_units(logits, clean_logits))}

    ko, unchanged, per = [], [], per_forward(rows, kw["max_rows"], used)
    for idx, done in journaled_chunks(len(units), per, journal, compute,
                                      rows=len(rows), progress=progress, desc="knockout"):
        ko.append(done["correct"])
        unchanged += [i for i, flag in zip(idx, done["unchanged"]) if flag]
    fold = lambda c: per_row(torch.as_tensor(c), owner, len(batch)).numpy()  # noqa: E731  (all answer tokens right)
    return fold(is_correct(clean_logits, answers).cpu()), fold(np.concatenate(ko)), unchanged, used, -(-len(units) // per)


def is_correct(logits: Float[Tensor, "*units batch vocab"], answers: Int[Tensor, "batch n_answers"]
               ) -> Bool[Tensor, "*units batch"]:
    """Top-1 over the full vocabulary is one of the accepted answers."""
    return (logits.argmax(-1)[..., None] == answers.to(logits.device)).any(-1)


def knockout_map(model, batch: PhaseBatch, calibration: PhaseBatch | Calibration | str | None = None, *,
                 options: KnockoutOptions | None = None, **settings: Any) -> SpecializationMap:
    """Accuracy change per (layer, unit, residue) when a unit is knocked out: absolute,
    `100 * (acc_ko - acc_clean)` in percentage points (default; defined at every residue, the weak
    phases included), or the paper's relative change `100 * (acc_ko - acc_clean) / acc_clean`
    (`change="relative"`), reported only at residues whose clean accuracy is reliably above
    chance: the lower bound of its bootstrap interval >= `floor`. Elsewhere a relative cell is
    masked (nan, `extras["masked"]` True, the reason in `meta["masked"]`): dividing by a clean
    accuracy near 0 turns one flipped example into +-100%.

    Each unit (the query heads reading one KV head, one query head, or a whole layer; see
    `level`) has its head outputs replaced at the knockout sites, by default the final
    (query) position of each row, by their mean over the calibration batch taken at the
    calibration rows' final positions (the paper's protocol).

    Settings come as keywords, as `options=KnockoutOptions(...)` (`interventions.options`, the
    object the command line builds), or both: keywords override the options object.

    Args:
        model: our HookedCompressedTransformer (run behind `HookedBackend`: TransformerLens
            hooks, the incremental fast path when it applies), a backend (`phaseinterp.backends`:
            `DeepseekV4Backend`, `HFCausalLMBackend`, ...: edits through nnsight), or a raw
            HuggingFace causal LM (wrapped with `backend_for`). Same protocol, same statistics.
        batch: evaluated prompts (PhaseBatch).
        calibration: disjoint calibration prompts (or a `Calibration`); not needed for "zero".
            "self": no calibration batch; each row's replacement is the mean over the evaluated
            batch's *other* logical examples (their key->value mappings are disjoint from the
            row's; per residue with `per_residue`). With the incremental method it costs no
            forward pass (the clean run has the activations); needs >= 2 examples (per residue).
            replacement "mean" only.
        level: "kv_head" (default), "head" or "layer".
        replacement: "mean" (default), "zero" or "resample".
        per_residue: mean / resample within the row's residue.
        positions: "final" (default), "all" or absolute positions.
        layers: layers to scan (default all).
        method: "auto", "incremental" (final position only, reuses the clean run; backends
            with that path: `HookedBackend`, `HFCausalLMBackend` of Llama / Qwen / Mistral
            decoders through the KV cache, training-free compressed layers included,
            `DeepseekV4Backend` through its decoding cache, `NSABackend`, and `DSABackend` with a
            one-query indexer) or "hooks" (full forwards; on the other backends always,
            the reason in `meta["intervention"]["fallback"]`).
        n_boot, confidence, seed: paired logical-example cluster bootstrap of the relative
            change (the same resampled examples for clean and knocked-out accuracy); `seed` also
            drives resampling.
        max_rows: rows per batched computation.
        label: name stored in the metadata.
        change: "absolute" (percentage points, default) or "relative" (%).
        floor: with change="relative", the smallest lower bound of the clean accuracy's interval
            (a fraction) at which a residue's relative change is reported (default 0.25, above the
            record-lookup task's chance of 0.1-0.25).
        progress: a progress bar over the units (default; `phaseinterp.progress`); False: silent.
        resume: a journal folder (`measure.journal`): each finished chunk of units (as many as one
            forward takes, `units_per_forward`) records its per-row correctness there, and chunks
            already recorded by a killed run are taken from it; the map is the same bit for bit.
            A journal of another model, batch, calibration or settings is refused. The map's
            `meta["resumed"]` = {"chunks": taken from the journal, "of": all, "seconds": their compute time}.

    Returns:
        SpecializationMap with dims (layer, level, residue) (level "layer": axis "heads" =
        ["all"]), values in pp (or %, masked below `floor`), `lo`/`hi` bootstrap bounds
        (`significant`: the interval excludes 0), two-sided bootstrap p-values `p` from the same
        replicates (`significant_fdr(q)`: Benjamini-Hochberg across the map's cells), extras
        `acc_knockout`, `masked`, each unit's change over all residues with its interval and p-value
        (`pooled()`: BH across units) and the clean curve.

    Warns:
        UserWarning: naming the units whose knockout changed no logit.

    Example:
        >>> m = knockout_map(model, batch, calib, n_boot=100)  # calib: task.sample(..., split="calibration")
        >>> m.dims, m.shape
        (('layer', 'kv_head', 'residue'), (2, 1, 4))
        >>> sorted(m.coverage(threshold=50))  # {"L1.KV0": [residues it owns], ...}
        ['L0.KV0', 'L1.KV0']
    """
    o = KnockoutOptions.build(options, **settings)
    model = runnable(model)
    units = _check_map(model, o)
    _warn_overlap(batch, calibration)
    run = _run_settings(o)
    journal = _knockout_journal(o.resume, model, batch, calibration, units, run)
    clean, ko, unchanged, used, chunks = _knocked_out_correct(model, batch, units, calibration, journal,
                                                              progress=o.progress, **run)
    warn_unchanged([units[i].name for i in unchanged], f"knockout ({o.replacement})")
    return _knockout_result(model, batch, calibration, units, clean, ko, used, journal, chunks, o)


def _check_map(model, o: KnockoutOptions) -> list[Unit]:
    """The units of the map after every check of `knockout_map`'s own settings (the runner checks
    the rest before any forward)."""
    check_level(o.level)
    units = head_units(model.cfg, o.level, o.layers)
    check_at_least_one("n_boot", o.n_boot)
    if o.change not in CHANGES:
        raise ValueError(f"change={o.change!r} is invalid: allowed one of {sorted(CHANGES)}")
    floor = o.floor
    if isinstance(floor, bool) or not isinstance(floor, (int, float)) or not 0 <= floor <= 1:
        raise ValueError(f"floor={floor!r} out of range [0, 1]: the clean accuracy's interval lower bound, a fraction")
    return units


def _run_settings(o: KnockoutOptions) -> dict[str, Any]:
    """The runner's settings, also the journal's (a journal of other settings is refused)."""
    return dict(replacement=o.replacement, per_residue=o.per_residue, positions=o.positions, method=o.method,
                seed=o.seed, max_rows=o.max_rows)


def _relative_mask(curve: PhaseCurve, shape: tuple, o: KnockoutOptions) -> tuple[np.ndarray, dict | None]:
    """(masked cells, the reason for meta["masked"]): with change="relative", the residues whose
    clean accuracy is not reliably above `floor`; nothing is masked for the absolute change."""
    masked = np.zeros(shape, dtype=bool)
    if o.change != "relative":
        return masked, None
    unreliable = ~(curve.boot_lo >= o.floor)  # nan (no rows) is unreliable too
    masked[..., unreliable] = True
    return masked, {"reason": f"relative change not reported where the clean accuracy's {o.confidence:.0%} interval "
                              f"lower bound is below {o.floor:g} (dividing by a near-zero accuracy)",
                    "floor": o.floor, "residues": [int(r) for r in np.flatnonzero(unreliable)]}


def _knockout_result(model, batch: PhaseBatch, calibration, units: Sequence[Unit], clean: np.ndarray, ko: np.ndarray,
                     used: str, journal, chunks: int, o: KnockoutOptions) -> SpecializationMap:
    """The map: the paired bootstrap of the change per cell, the clean curve, the relative mask and
    the provenance."""
    res, R = batch.residue.cpu().numpy(), batch.modulus
    rel, lo, hi, _, acc_ko, p = accuracy_change(clean, ko, res, batch.example_id.cpu().numpy(), R, change=o.change,
                                                n_boot=o.n_boot, confidence=o.confidence, seed=o.seed)
    layer_ids = sorted({u.layer for u in units})
    n_unit = level_size(model.cfg, o.level)
    shape = (len(layer_ids), n_unit, R)
    pooled = pooled_change(clean, ko, batch.example_id.cpu().numpy(), change=o.change, n_boot=o.n_boot,
                           confidence=o.confidence, seed=o.seed, shape=shape[:-1])
    S = model_period(model)
    curve = PhaseCurve.from_correct(clean, batch, period=S if S and R % S == 0 else None, n_boot=o.n_boot, n_perm=200,
                                    confidence=o.confidence, seed=o.seed, label=f"{o.label} clean".strip())
    axis = unit_axis(o.level)
    masked, mask_note = _relative_mask(curve, shape, o)
    if mask_note is not None:
        rel, lo, hi, p = (np.where(masked.reshape(rel.shape), np.nan, a) for a in (rel, lo, hi, p))  # p too: out of the BH family
    return SpecializationMap(
        values=rel.reshape(shape), dims=("layer", axis, "residue"),
        coords={"layer": layer_ids, axis: unit_coords(model.cfg, o.level), "residue": list(range(R))},
        lo=lo.reshape(shape), hi=hi.reshape(shape), p=p.reshape(shape),
        extras={"acc_knockout": acc_ko.reshape(shape), "n_rows": np.broadcast_to(np.bincount(res, minlength=R), shape),
                "masked": masked, **pooled},
        clean=curve.to_dict(), direction=-1, clip=100.0,
        quantity="relative accuracy change (%)" if o.change == "relative" else "absolute accuracy change (pp)",
        meta={"label": o.label, "masked": mask_note,
              "intervention": {"kind": "knockout", "level": o.level, "replacement": o.replacement, "change": o.change,
                               "per_residue": o.per_residue, "positions": o.positions, "method": used,
                               "engine": model.engine, **path_meta(model, used)},
              "model": model_config(model), "task": batch.meta,
              "calibration": ({"kind": SELF, "rule": "leave-one-example-out mean of the evaluated batch"}
                              if isinstance(calibration, str) else getattr(calibration, "meta", None)),
              "seed": o.seed, "n_boot": o.n_boot, "confidence": o.confidence, "versions": versions(),
              **({} if journal is None else
                 {"resumed": journal.resumed("chunks", chunks)})})


def knockout(model, batch: PhaseBatch, calibration: PhaseBatch | Calibration | str | None, *, layer: int,
             kv_head: int | None = None, head: int | None = None, replacement: str = "mean",
             per_residue: bool = False, positions: Positions = "final", seed: int = 0, n_boot: int = 2000
             ) -> PhaseCurve:
    """Phase curve of the model with one unit knocked out: the query heads of `kv_head`, one
    query `head`, or (neither given) the whole `layer`.

    Example:
        >>> curve = knockout(model, batch, calib, layer=1, kv_head=0, n_boot=100)
        >>> curve.accuracy.shape  # per residue
        (4,)
    """
    model = runnable(model)
    if kv_head is not None and head is not None:
        raise ValueError("give kv_head or head, not both")
    level = "kv_head" if kv_head is not None else "head" if head is not None else "layer"
    index = kv_head if kv_head is not None else head  # None: the whole layer
    units = [u for u in head_units(model.cfg, level, [layer]) if u.index == index]
    if not units:
        raise ValueError(f"{level}={index} is invalid: allowed 0..{level_size(model.cfg, level) - 1}")
    rows, owner = token_rows(batch)
    clean, ko, _ = knockout_logits(model, rows, units, calibration, replacement=replacement, per_residue=per_residue,
                                   positions=positions, seed=seed, progress=False)  # one unit: no bar
    warn_unchanged([units[0].name] if unchanged_units(ko, clean) else [], f"knockout ({replacement})")
    correct = per_row(is_correct(ko[0], rows.answers).cpu(), owner, len(batch))
    return PhaseCurve.from_correct(correct, batch, n_boot=n_boot, n_perm=200, seed=seed,
                                   label=f"knockout {units[0].name}",
                                   config={"knockout": {"unit": units[0].name, "replacement": replacement}})

