"""Activation patching (denoising): run the corrupt prompts, patch in one unit's clean
activation, and measure what comes back, per unit and residue, as

    absolute change (default)  100 * (acc_patched - acc_corrupt) in percentage points, both
                               scored against the clean answer, with a paired cluster-bootstrap
                               interval (`lo`, `hi`; `significant` where it excludes 0) and
                               bootstrap p-values (`p`; `significant_fdr`: BH across the map),
                               the statistics of the knockout maps (`stats.accuracy_change`);
    normalized                 (patched - corrupt) / (clean - corrupt) of the answer logit
                               difference, 1 = fully restored, 0 = no effect (always in
                               `extras["normalized"]`; the map's values with change="normalized").

Units: head outputs `z` ("z", grouped by `level`), the residual stream entering a layer at one
position ("resid"), one KV head's compressed entries of one branch ("entries") and its gate
weights ("gates").

One implementation, on a backend (our model behind `HookedBackend`: TransformerLens hooks, the
incremental path at the final position; HuggingFace models behind their nnsight backends, raw
ones wrapped with `backend_for`); "resid" needs a backend with `hook_resid_pre` (our model's),
the other units run everywhere the sites exist (entries and gates: models with compressors)."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch
from jaxtyping import Float, Int
from torch import Tensor

from phaseinterp.backends.prompts import units_per_forward
from phaseinterp.interventions.calibration import check_positions, site_positions
from phaseinterp.interventions.checks import check_at_least_one, check_position
from phaseinterp.interventions.options import PatchingOptions
from phaseinterp.interventions.knockout import is_correct, knockout_edit, path_meta, unit_axis, unit_coords
from phaseinterp.interventions.pairs import Pairing
from phaseinterp.interventions.runner import runnable, unchanged_units, warn_unchanged
from phaseinterp.interventions.stats import accuracy_change, by_residue, pooled_change
from phaseinterp.units import check_layers, check_level, head_units
from phaseinterp.measure.journal import journaled_chunks
from phaseinterp.measure.provenance import model_config, versions
from phaseinterp.measure.specialization import SpecializationMap

UNITS = ("z", "resid", "entries", "gates")
PATCH_CHANGES = ("absolute", "normalized")
BRANCHES = {"compress_k": "key", "compress_v": "value", "compress_kv": "kv"}
NAMED_SITES = ("key", "value", "final")


def logit_diff(logits: Float[Tensor, "*units batch vocab"], answer: Int[Tensor, " batch"],
               foil: Int[Tensor, " batch"]) -> Float[Tensor, "*units batch"]:
    """`logits[..., answer] - logits[..., foil]` per row, in float32 whatever the model's dtype (numpy has
    no bfloat16, and the difference of two bfloat16 logits would round to their precision)."""
    a = logits.gather(-1, answer.to(logits.device).expand(*logits.shape[:-1])[..., None])[..., 0]
    f = logits.gather(-1, foil.to(logits.device).expand(*logits.shape[:-1])[..., None])[..., 0]
    return a.float() - f.float()


def top_other(logits: Float[Tensor, "batch vocab"], exclude: Int[Tensor, "batch n"]) -> Int[Tensor, " batch"]:
    """Per row, the highest-logit token not in `exclude` (the foil of a logit difference)."""
    masked = logits.detach().clone()
    masked.scatter_(-1, exclude.to(logits.device), float("-inf"))
    return masked.argmax(-1)


def normalized_by_residue(patched: Float[np.ndarray, "unit row"], clean: Float[np.ndarray, " row"],
                          corrupt: Float[np.ndarray, " row"], residue: Int[np.ndarray, " row"], modulus: int,
                          rel_min: float | int) -> tuple[Float[np.ndarray, "unit residue"], Float[np.ndarray, " residue"]]:
    """Per unit and residue `sum(patched - corrupt) / sum(clean - corrupt)`, and the mean gap.

    nan where the residue's mean clean-corrupt gap is below `rel_min` times the metric's scale:
    the largest per-residue mean |clean|, |corrupt| or |clean - corrupt| (a gap that small is
    noise; e.g. a phase swap on full attention, where both runs are equally right)."""
    den = by_residue(clean - corrupt, residue, modulus)
    num = by_residue(patched - corrupt[None], residue, modulus)
    parts = [np.abs(den), np.abs(by_residue(clean, residue, modulus)), np.abs(by_residue(corrupt, residue, modulus))]
    scale = max((float(np.nanmax(p)) for p in parts if np.isfinite(p).any()), default=0.0)
    ok = np.abs(den) > max(rel_min * scale, 1e-12)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(ok[None], num / np.where(ok, den, 1.0)[None], np.nan), den


def _row_sites(pair: Pairing, site: Any, T: int) -> tuple[Tensor, Tensor]:
    """(corrupt position, clean position) of one resid site per row."""
    if isinstance(site, str):
        if site not in NAMED_SITES:
            raise ValueError(f"site={site!r} is invalid: allowed {list(NAMED_SITES)} or an int position")
        attr = {"key": "key_pos", "value": "value_pos", "final": "query_pos"}[site]
        return getattr(pair.corrupt, attr), getattr(pair.clean, attr)
    p = check_position(int(site), T)
    col = torch.full((len(pair),), p)
    return col, pair.align[:, p]


def activation_patching(model, pair: Pairing, *, options: PatchingOptions | None = None,
                        **settings: Any) -> SpecializationMap:
    """Denoising activation patching map per residue of the clean rows: the accuracy each unit's
    patch restores in percentage points with its interval (default), or the normalized logit
    difference restored.

    Settings come as keywords, as `options=PatchingOptions(...)` (`interventions.options`, the
    object the command line builds), or both: keywords override the options object.

    Args:
        model: our HookedCompressedTransformer (behind `HookedBackend`), a backend
            (`phaseinterp.backends`) or a raw HuggingFace causal LM (wrapped with `backend_for`).
        pair: clean/corrupt prompts (`phase_swap`, `mapping_swap`, `Pairing.custom`).
        unit: "z" (head outputs, grouped by `level` = "head", "kv_head" or "layer"), "resid"
            (residual stream entering each layer, one unit per site in `positions`), "entries"
            (all compressed entries of one branch and KV head) or "gates" (its gate weights).
        positions: for "z": "final" (default: each row's query position), "all", or absolute
            positions, patched together (corrupt position p receives clean position align[p]);
            for "resid": the sites, each "key", "value", "final" (per row) or an int
            (default ("key", "value", "final") when left at "final").
        layers: layers to scan (default all; compressed layers only for entries and gates).
        method: "auto" (z / resid at the final position on our model, and z at the final
            position on HF Llama / Qwen / Mistral decoders through the KV cache, on NSA, DeepSeek-V4
            and DSA, reuse the corrupt run, recomputing only that position; otherwise batched hook
            forwards), "incremental"
            or "hooks" (always on backends without the final-position path).
        rel_min: for the normalized metric, residues whose mean clean-corrupt gap is under
            `rel_min` x the metric's scale (largest per-residue mean |logit difference| of clean,
            corrupt or their gap) are nan (masked with that reason when change="normalized").
        max_rows: rows per batched computation.
        change: "absolute" (default): `100 * (acc_patched - acc_corrupt)` in pp, both scored
            against the clean answer, defined at every residue; "normalized": the normalized
            logit difference restored.
        n_boot, confidence, seed: the paired logical-example cluster bootstrap of the absolute
            change (the knockout maps' `paired_cluster_bootstrap`: the same resampled examples
            for the corrupt and the patched accuracy).
        progress: a progress bar over the patched units (default; `phaseinterp.progress`); False: silent.
        resume: a journal folder (`measure.journal`): each finished chunk of units (as many as one
            forward takes) records its per-row logit difference and correctness there, and chunks
            recorded by a killed run are taken from it; the map is the same bit for bit. A journal
            of another model, pairing or settings is refused; `meta["resumed"]` says what was taken.

    Returns:
        SpecializationMap (direction +1): values in pp with `lo`/`hi` (`significant`: the
        interval excludes 0; clip 100) and `p` (two-sided bootstrap p-values from the same
        replicates; `significant_fdr(q)`: BH across the map's cells), or with change="normalized"
        the normalized metric (clip 1; no interval, no p). Dims (layer, level, residue) for z (level "layer": axis "heads"
        = ["all"]), (layer, position, residue) for resid, and (layer, branch, kv_head, residue)
        for entries and gates (nan where a layer lacks a branch). Extras: "normalized",
        "change_pp", "change_pp_lo", "change_pp_hi", "change_pp_p", "acc_patched", the clean-corrupt gap per
        residue and "masked"; meta: clean/corrupt logit differences and accuracies.

    Raises:
        ValueError: naming the bad value and the allowed ones (unit, level, method, layers,
            positions, "resid" on a backend, entries / gates without compressors).

    Warns:
        UserWarning: naming units whose patch changed no logit.

    Example:
        >>> from phaseinterp.interventions import mapping_swap
        >>> m = activation_patching(model, mapping_swap(batch), unit="z", level="kv_head")
        >>> m.dims, m.shape
        (('layer', 'kv_head', 'residue'), (2, 1, 4))
    """
    o = PatchingOptions.build(options, **settings)
    model = runnable(model)
    if o.change not in PATCH_CHANGES:
        raise ValueError(f"change={o.change!r} is invalid: allowed one of {list(PATCH_CHANGES)}")
    check_at_least_one("n_boot", o.n_boot)
    layer_ids, positions, fast = _check_patching(model, pair, o.unit, o.level, o.positions, o.layers, o.method,
                                                 o.rel_min, o.max_rows)
    clean_logits = model.final_logits(pair.clean.tokens, pair.clean.query_pos)
    layout, labels, present, run, corrupt_logits = _patching_runner(model, pair, o.unit, o.level, positions, layer_ids,
                                                                    fast, o.max_rows)
    journal = _patching_journal(model, pair, o, positions, layer_ids, fast, labels)
    per = units_per_forward(len(pair.corrupt), o.max_rows, None if fast else pair.corrupt.tokens.shape[1])
    patched, unchanged = _patched_outcomes(pair, run, len(labels), corrupt_logits, per, journal,
                                           progress=o.progress, desc=f"patching {o.unit}")
    warn_unchanged([labels[i] for i in unchanged], f"patching {o.unit}")
    out = _patching_map(model, pair, clean_logits, corrupt_logits, patched, layout, present, o.rel_min,
                         _intervention(model, pair, o, positions, fast),
                         {"change": o.change, "n_boot": o.n_boot, "confidence": o.confidence, "seed": o.seed})
    if journal is not None:
        out.meta["resumed"] = journal.resumed("chunks", -(-len(labels) // per))
    return out


def _patching_journal(model, pair: Pairing, o: PatchingOptions, positions: Any, layer_ids: list[int], fast: bool,
                      labels: list[str]):
    """The journal of `o.resume` (None without one), keyed by the model, the pairing and the settings."""
    if o.resume is None:
        return None
    from phaseinterp.measure.journal import batch_fingerprint, model_fingerprint, open_journal

    return open_journal(o.resume, "patching", {
        "model": model_fingerprint(model), "clean": batch_fingerprint(pair.clean),
        "corrupt": batch_fingerprint(pair.corrupt), "foil": "none" if pair.foil is None else pair.foil,
        "settings": {"unit": o.unit, "level": o.level, "positions": positions, "layers": layer_ids, "fast": fast,
                     "max_rows": o.max_rows, "units": labels, "device": model.device.type}})


def _intervention(model, pair: Pairing, o: PatchingOptions, positions: Any, fast: bool) -> dict[str, Any]:
    """The map's meta["intervention"]: what was patched, how, and on which pairing."""
    method = "incremental" if fast else "hooks"
    return {"kind": "activation_patching", "unit": o.unit, "level": o.level if o.unit == "z" else None,
            "positions": positions, "method": method, "engine": model.engine, **path_meta(model, method),
            "pairing": pair.kind, "pairing_meta": pair.meta, "rel_min": o.rel_min, "change": o.change}


def _foil(pair: Pairing, corrupt_logits: Tensor) -> Tensor:
    return pair.foil if pair.foil is not None else top_other(corrupt_logits, pair.clean.answers)


def _patched_outcomes(pair: Pairing, run, n_units: int, corrupt_logits: Tensor, per: int, journal, *,
                      progress: bool = True, desc: str = "patching") -> tuple[dict[str, np.ndarray], list[int]]:
    """({"ld": patched logit difference [unit, row], "ok": patched correct [unit, row]}, unchanged
    units): the units in chunks of `per`, one forward each (`backends.prompts.units_per_forward`), each chunk recorded in
    `journal` when given and taken from it when already there."""
    clean = pair.clean
    answer, foil = clean.answer, _foil(pair, corrupt_logits)

    def compute(idx: list[int]) -> dict[str, np.ndarray]:
        patched = run(idx)
        return {"ld": logit_diff(patched, answer, foil).detach().cpu().numpy(),
                "ok": is_correct(patched, clean.answers).cpu().numpy(),
                "unchanged": np.isin(np.arange(len(idx)), unchanged_units(patched, corrupt_logits))}

    lds, oks, unchanged = [], [], []
    for idx, done in journaled_chunks(n_units, per, journal, compute, rows=len(clean), progress=progress, desc=desc):
        lds.append(done["ld"])
        oks.append(done["ok"])
        unchanged += [i for i, flag in zip(idx, done["unchanged"]) if flag]
    return {"ld": np.concatenate(lds), "ok": np.concatenate(oks)}, unchanged


def _check_patching(model, pair: Pairing, unit: str, level: str, positions: Any, layers: Sequence[int] | None,
                    method: str, rel_min: float | int, max_rows: int) -> tuple[list[int], Any, bool]:
    """(layers, positions, use the incremental path) after every argument check, before any forward."""
    if unit not in UNITS:
        raise ValueError(f"unit={unit!r} is invalid: allowed one of {list(UNITS)}")
    if unit == "resid" and "blocks.0.hook_resid_pre" not in model.hook_names():
        raise ValueError(f"unit='resid' is invalid on {model.describe()} (it has no hook_resid_pre): allowed "
                         f"{[u for u in UNITS if u != 'resid']}; 'resid' needs our HookedCompressedTransformer")
    if method not in ("auto", "incremental", "hooks"):
        raise ValueError(f"method={method!r} is invalid: allowed 'auto', 'incremental' or 'hooks'")
    if not 0 <= rel_min < 1:
        raise ValueError(f"rel_min={rel_min} out of range [0, 1)")
    check_at_least_one("max_rows", max_rows)
    T = pair.clean.tokens.shape[1]
    layer_ids = check_layers(layers, model.cfg.n_layers)
    if unit == "resid":
        if positions == "final":
            positions = NAMED_SITES
        positions = [positions] if isinstance(positions, (str, int)) else list(positions)
        for site in positions:
            _row_sites(pair, site, T)
    fast_ok = model.incremental_ok() and ((unit == "z" and positions == "final")
                                         or (unit == "resid" and list(positions) == ["final"]))
    if method == "incremental" and not fast_ok:
        why = model.incremental_fallback()
        raise ValueError("method='incremental' applies to unit 'z' at positions='final' or unit 'resid' at "
                         "the 'final' site only, on a backend with the final-position path (our model, NSA, DeepSeek-V4, DSA, "
                         f"a HF Llama / Qwen / Mistral / Gemma 3 decoder through its KV cache), without hooks; got unit={unit!r}, "
                         f"positions={positions!r} on {model.describe()}{'' if why is None else ': ' + why} "
                         "(allowed: method='hooks')")
    if unit == "z":
        check_level(level)
        check_positions(positions, T)
    return layer_ids, positions, fast_ok and method != "hooks"


def _patching_runner(model, pair: Pairing, unit: str, level: str, positions: Any, layer_ids: list[int], fast: bool,
                     max_rows: int) -> tuple:
    """(layout, unit labels, present cells or None, run(unit indices) -> their patched final logits
    [unit, batch, vocab], corrupt final logits): one patched run per unit, incremental at the final
    position when `fast`."""
    cfg, corrupt, clean = model.cfg, pair.corrupt, pair.clean
    present = None
    if unit == "z":
        units = head_units(cfg, level, layer_ids)
        labels = [u.name for u in units]
        layout = (("layer", unit_axis(level)), {"layer": layer_ids, unit_axis(level): unit_coords(cfg, level)})
    elif unit == "resid":
        labels = [f"{l}.{s}" for l in layer_ids for s in positions]
        layout = (("layer", "position"), {"layer": layer_ids, "position": list(positions)})
    if fast:  # z or resid at the final position: recompute only that position of the corrupt run
        run = model.final_position_run(corrupt.tokens, corrupt.query_pos)
        src = capture_final(model, clean, unit, layer_ids)

        def run_fast(idx: list[int]) -> Tensor:
            if unit == "z":
                chunk = [units[i] for i in idx]
                masks = torch.stack([u.mask(cfg, model.device) for u in chunk])
                return run.run_z([u.layer for u in chunk], masks, torch.stack([src[u.layer] for u in chunk]),
                                 max_rows=max_rows)
            chunk = [layer_ids[i] for i in idx]
            return run.run_resid(chunk, torch.stack([src[l] for l in chunk]), max_rows=max_rows)

        return layout, labels, present, run_fast, run.logits
    if unit == "z":
        edits = _z_edits(model, pair, units, positions, layer_ids)
    elif unit == "resid":
        edits = _resid_edits(model, pair, positions, layer_ids)
    else:
        layout, labels, present, edits = _branch_edits(model, clean, unit, layer_ids)

    def run_hooks(idx: list[int]) -> Tensor:
        return model.run_units(corrupt.tokens, corrupt.query_pos, [edits[i] for i in idx], max_rows=max_rows)

    return layout, labels, present, run_hooks, model.final_logits(corrupt.tokens, corrupt.query_pos)


def _patching_map(model, pair: Pairing, clean_logits: Tensor, corrupt_logits: Tensor, patched: dict, layout: tuple,
                  present: list | None, rel_min: float | int, intervention: dict, stats: dict) -> SpecializationMap:
    """The accuracy restored (pp, with its interval) or the normalized logit difference restored,
    per unit and residue, with the other metric in the extras and the provenance."""
    clean, corrupt = pair.clean, pair.corrupt
    answer = clean.answer
    foil = _foil(pair, corrupt_logits)
    ld_clean = logit_diff(clean_logits, answer, foil).cpu().numpy()
    ld_corrupt = logit_diff(corrupt_logits, answer, foil).cpu().numpy()
    ld_patched = patched["ld"]  # per unit and row (`_patched_outcomes`)
    res, R = clean.residue.cpu().numpy(), clean.modulus
    norm, gap = normalized_by_residue(ld_patched, ld_clean, ld_corrupt, res, R, rel_min)
    # the accuracy the patch restores: both runs scored against the clean answer, clusters = the
    # clean rows' logical examples (a pairing keeps one corrupt row per clean row)
    base_ok = is_correct(corrupt_logits, clean.answers).cpu().numpy()
    patched_ok = patched["ok"]
    pp, lo, hi, acc_corrupt, acc_patched, p = accuracy_change(base_ok, patched_ok, res, clean.example_id.cpu().numpy(),
                                                              R, change="absolute", n_boot=stats["n_boot"],
                                                              confidence=stats["confidence"], seed=stats["seed"])
    dims, coords = layout
    shape = tuple(len(coords[d]) for d in dims) + (R,)
    cells = lambda per_unit: _cells(per_unit, shape, present)  # noqa: E731
    small = np.isnan(norm).all(axis=0) if norm.size else np.zeros(R, dtype=bool)  # residues below rel_min
    normalized = stats["change"] == "normalized"
    masked = np.broadcast_to(small & normalized, shape).copy()  # pp changes are defined at every residue
    mask_note = None if not masked.any() else {
        "reason": f"the clean-corrupt logit difference gap is below rel_min={rel_min:g} x its scale: nothing to restore",
        "rel_min": rel_min, "residues": [int(r) for r in np.flatnonzero(small)]}
    pooled = pooled_change(base_ok, patched_ok, clean.example_id.cpu().numpy(), n_boot=stats["n_boot"],
                           confidence=stats["confidence"], seed=stats["seed"])
    extras = {"clean_minus_corrupt": np.broadcast_to(gap, shape), "masked": masked, "acc_patched": cells(acc_patched),
              **{k: _cells(v, shape[:-1], present) for k, v in pooled.items()}}  # the pp change, both modes
    if normalized:
        # the normalized values have no interval, so no p-value: the pp change's test rides along in the extras
        values, bounds, quantity, clip = cells(norm), (None, None, None), "normalized logit difference restored", 1.0
        extras.update(change_pp=cells(pp), change_pp_lo=cells(lo), change_pp_hi=cells(hi), change_pp_p=cells(p))
    else:
        values, bounds, quantity, clip = cells(pp), (cells(lo), cells(hi), cells(p)), "absolute accuracy change (pp)", 100.0
        extras["normalized"] = cells(norm)
    acc = lambda lg, b: by_residue((lg.argmax(-1).cpu()[:, None] == b.answers.cpu()).any(1).numpy().astype(float), res, R)  # noqa: E731
    return SpecializationMap(
        values=values, dims=(*dims, "residue"), coords={**coords, "residue": list(range(R))}, lo=bounds[0],
        hi=bounds[1], p=bounds[2], extras=extras, quantity=quantity, direction=1, clip=clip,
        meta={"intervention": intervention, "masked": mask_note,
              "logit_diff": {"clean": by_residue(ld_clean, res, R), "corrupt": by_residue(ld_corrupt, res, R)},
              "accuracy": {"clean": acc(clean_logits, clean), "corrupt": acc(corrupt_logits, corrupt),
                           "corrupt_on_clean_answers": acc_corrupt},
              "n_boot": stats["n_boot"], "confidence": stats["confidence"], "seed": stats["seed"],
              "model": model_config(model), "task": clean.meta, "versions": versions()})


def _cells(per_unit: np.ndarray, shape: tuple, present: list | None) -> np.ndarray:
    """Per-unit rows [unit, residue] laid out on the map's axes (nan where a unit is absent)."""
    if present is None:
        return per_unit.reshape(shape)
    out = np.full(shape, np.nan)
    for i, idx in enumerate(present):
        out[idx] = per_unit[i]
    return out


def _z_edits(model, pair: Pairing, units, positions, layer_ids) -> list:
    """Hook edits writing clean head outputs into the corrupt run at the sites (aligned)."""
    T, dev = pair.clean.tokens.shape[1], model.device
    pos = check_positions(positions, T)
    sites = site_positions(pos, pair.corrupt.query_pos, T)
    src_sites = pair.align.gather(1, sites) if pos != "final" else pair.clean.query_pos[:, None]
    acts = model.capture(pair.clean.tokens, [f"blocks.{l}.attn.hook_z" for l in layer_ids], src_sites.to(dev))
    src = {l: acts[f"blocks.{l}.attn.hook_z"] for l in layer_ids}
    return [knockout_edit(u, src[u.layer], sites, cfg=model.cfg) for u in units]


def _resid_edits(model, pair: Pairing, sites, layer_ids) -> list:
    """Hook edits writing the clean residual stream at each (layer, site) into the corrupt run."""
    T, dev = pair.clean.tokens.shape[1], model.device
    acts = model.capture(pair.clean.tokens, [f"blocks.{l}.hook_resid_pre" for l in layer_ids])
    rows = torch.arange(len(pair), device=dev)
    edits = []
    for l in layer_ids:
        for s in sites:
            dst, srcp = _row_sites(pair, s, T)
            value = acts[f"blocks.{l}.hook_resid_pre"][rows, srcp.to(dev)]
            edits.append({f"blocks.{l}.hook_resid_pre": _set_rows(dst, value)})
    return edits


def _branch_edits(model, clean, unit: str, layer_ids) -> tuple:
    """(layout, labels, cell index per unit, hook edits) for entries / gates of each compressed
    layer, branch and KV head."""
    comp = [(l, name) for l in layer_ids for name in model.compressor_names(l)]
    if not comp:
        raise ValueError(f"unit={unit!r} needs compressed layers; layers {layer_ids} have none "
                         f"(allowed: unit='z' on {model.describe()})")
    K = model.cfg.n_kv_heads
    comp_layers = sorted({l for l, _ in comp})
    branches = [b for b in BRANCHES if any(n == b for _, n in comp)]
    layout = (("layer", "branch", "kv_head"), {"layer": comp_layers, "branch": [BRANCHES[b] for b in branches],
                                               "kv_head": list(range(K))})
    hook = "hook_out" if unit == "entries" else "hook_gate"
    names = [f"blocks.{l}.attn.{b}.{hook}" for l, b in comp]
    acts = model.capture(clean.tokens, names)
    labels, present, edits = [], [], []
    for (l, b), name in zip(comp, names):
        for h in range(K):
            labels.append(f"{l}.{BRANCHES[b]}.{h}")
            present.append((comp_layers.index(l), branches.index(b), h))
            edits.append({name: _set_head(acts[name], h, unit)})
    return layout, labels, present, edits


def capture_final(model, batch, unit: str, layers: Sequence[int]) -> dict[int, Tensor]:
    """Per layer, the clean z [batch, head, d] ("z") or resid_pre [batch, d_model] ("resid") at
    each row's query position."""
    dev = model.device
    hook = "attn.hook_z" if unit == "z" else "hook_resid_pre"
    acts = model.capture(batch.tokens, [f"blocks.{l}.{hook}" for l in layers], batch.query_pos.to(dev)[:, None])
    return {l: acts[f"blocks.{l}.{hook}"][:, 0] for l in layers}


def _set_rows(pos: Tensor, values: Tensor):
    def edit(x: Tensor) -> Tensor:
        x = x.clone()
        x[torch.arange(x.shape[0], device=x.device), pos.to(x.device)] = values.to(x.dtype)
        return x
    return edit


def _set_head(source: Tensor, head: int, unit: str):
    axis = 2 if unit == "entries" else 3  # hook_out [b, entry, kv, d]; hook_gate [b, entry, offset, kv(, d)]

    def edit(x: Tensor) -> Tensor:
        x = x.clone()
        idx = (slice(None),) * axis + (head,)
        x[idx] = source[idx].to(x.dtype)
        return x
    return edit
