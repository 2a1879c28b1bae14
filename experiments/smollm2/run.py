"""SmolLM2-135M-Instruct under training-free chunked KV compression: induction-copy accuracy by
phase, for W = S in {4, 8, 16}, every pooling rule and rotation anchor, against the uncompressed
model; a KV-head knockout map by residue on one compressed variant.

    python -m experiments.smollm2.run            # -> assets/results/smollm2.{md,json}, smollm2_knockout.json

Steps (all seeded; prompts of the screen, the sweep, the knockout and its calibration are disjoint):
1. Layer screen: compress one layer at a time (W8/S8 mean@post) on a screen batch; the layers whose
   compression alone costs >= `--screen-drop` points of induction accuracy are "the induction
   layers" every compressed setting wraps (compressing all 30 layers is also run, as a control).
2. Grid: `compression_settings(W, layers)` for each W, plus the same grid at W = 8 on the single
   layer whose compression costs most. Statistics: `sweep_row` (residues mod 2S, cluster = prompt).
3. Knockout: the W = 8 single-layer setting with the highest mean accuracy (of the worst layer, or
   of `--ko-grid-layer`); every KV head of
   `--ko-layers` (default the induction layers), mean-replaced at the final position
   (`interventions.knockout_map`, absolute change in points), on final-position induction prompts.

`--knockout-only` redoes step 3 and `--add-layer L ...` appends one-layer grids of more layers to
an existing smollm2.json (each records its command); `--render-only` rewrites smollm2.md from it.

`--resume`: every setting's minibatches and the knockout's chunks are journaled in
`OUT/.smollm2-journal` as they finish (`analysis.induction_sweep.SettingJournals`,
`measure.journal`); a killed run started again with `--resume` takes them back and gives the
uninterrupted run's result bit for bit. The journal is removed once the result is written; the
result records what was taken back (`resumed`).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from phaseinterp.backends.kv_compression import KVCompression, compress_attention, restore_attention
from phaseinterp.measure.gap import GAP_HEADER, GAP_NOTE, gap_text
from phaseinterp.measure.provenance import dumps, versions
from phaseinterp.analysis.induction_sweep import (SettingJournals, compression_settings, induction_correct, layer_screen,
                                                 sweep_row)
from phaseinterp.measure.journal import digest
from phaseinterp.measure.outputs import write_atomic
from phaseinterp.tasks.induction import induction_batch, induction_final_batch
from phaseinterp.units import Unit

OUT = Path(__file__).resolve().parents[2] / "assets" / "results"
SCREEN_SPEC = KVCompression(8, 8, "mean", "post")
JOURNAL = ".smollm2-journal"


def journals(args: argparse.Namespace, model: Any) -> SettingJournals | None:
    """The study's journals with `--resume`, else None; an unfinished journal without `--resume` is
    refused (continuing it or removing it is the user's choice)."""
    root = args.out / JOURNAL
    if not args.resume:
        if any(root.rglob("*.npz")):
            raise SystemExit(f"{root} holds the journal of an unfinished run: allowed --resume to continue it, "
                             "or remove the folder to start over")
        return None
    return SettingJournals(root, model)


def resumed(journal: SettingJournals | None) -> dict[str, int] | None:
    return None if journal is None else {"minibatches": journal.taken, "of": journal.units}


def run(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from phaseinterp.backends.smollm2 import load_smollm2

    torch.manual_seed(args.seed)
    t0 = time.time()
    log = (lambda *a: print(f"[{time.time() - t0:6.0f}s]", *a, flush=True)) if args.verbose else (lambda *a: None)
    model, _ = load_smollm2()
    log("loaded")
    journal = journals(args, model)
    common = dict(local=args.local, sink=args.sink)
    screen_batch = induction_batch(args.screen_prompts, args.length // 2, 2, seed=args.seed + 100)
    screen_clean = induction_correct(model, screen_batch, resume=journal)
    spec0 = KVCompression(**{**SCREEN_SPEC.to_dict(), **common})
    drops = layer_screen(model, screen_batch, spec0, screen_clean, resume=journal)
    layers = [int(l) for l in np.flatnonzero(drops <= -args.screen_drop)] or [int(np.argmin(drops))]
    worst_layer = int(np.argmin(drops))
    log("screen", np.round(drops, 1).tolist(), "->", layers)

    batch = induction_batch(args.prompts, args.length, 2, seed=args.seed)
    clean = induction_correct(model, batch, resume=journal)
    rows = [sweep_row(clean, clean, batch, W, None, n_boot=args.n_boot, n_perm=args.n_perm).to_dict() | {"grid": "baseline"}
            for W in sorted(set(args.windows) | {8})]  # 8: the single-layer grid's stride
    log("clean", float(clean.float().mean()))
    grids = [(f"layers {layers}", W, layers) for W in args.windows] + [(f"layer {worst_layer}", 8, [worst_layer])]
    grids += [("all layers", W, None) for W in args.windows[:1]] if args.all_layers_control else []
    outcomes: dict[str, Any] = {}
    for grid, W, chosen in grids:
        specs = [s for s in compression_settings(W, chosen, **common) if s.anchor in args.anchors]
        if grid == "all layers":
            specs = specs[:1]
        for spec in specs:
            correct = induction_correct(model, batch, spec, resume=journal)
            outcomes[f"{grid}|{spec.name}"] = correct
            rows.append(sweep_row(correct, clean, batch, W, spec, n_boot=args.n_boot, n_perm=args.n_perm).to_dict()
                        | {"grid": grid})
            log(grid, spec.name, f"{100 * rows[-1]['mean']:.1f}%", rows[-1]["verdict"])

    result = {"rows": rows, "screen": {"spec": spec0.to_dict(), "drop_pp": drops.tolist(), "layers": layers,
                                       "worst_layer": worst_layer, "threshold_pp": args.screen_drop,
                                       "clean": float(screen_clean.float().mean())},
              "settings": {k: v for k, v in vars(args).items() if k not in ("out", "verbose")},
              "command": "python -m experiments.smollm2.run " + " ".join(sys.argv[1:]),
              "cpu_time_s": time.time() - t0, "versions": versions()}
    result["knockout"] = knockout(model, result, args, journal)
    result["resumed"] = resumed(journal)
    log("knockout done")
    return result


def add_layer_grids(result: dict[str, Any], layers: list[int], args: argparse.Namespace) -> list[dict[str, Any]]:
    """Rows of the W8/S8 grid compressing one layer at a time, on the sweep's own prompts."""
    from phaseinterp.backends.smollm2 import load_smollm2

    s = result["settings"]
    model = load_smollm2()[0]
    journal = journals(args, model)
    batch = induction_batch(s["prompts"], s["length"], 2, seed=s["seed"])
    clean = induction_correct(model, batch, resume=journal)
    rows = []
    for layer in layers:
        for spec in compression_settings(8, [layer], local=s["local"], sink=s["sink"]):
            correct = induction_correct(model, batch, spec, resume=journal)
            rows.append(sweep_row(correct, clean, batch, 8, spec, n_boot=s["n_boot"], n_perm=s["n_perm"]).to_dict()
                        | {"grid": f"layer {layer}"})
    return rows


def knockout(model: Any, result: dict[str, Any], args: argparse.Namespace, journal: SettingJournals | None = None
             ) -> dict[str, Any]:
    """KV-head knockout map (absolute change) on the single-layer setting with the highest mean
    accuracy, over `--ko-layers` (default: the induction layers), residues mod `--ko-modulus`."""
    from phaseinterp.backends.smollm2 import smollm2_backend
    from phaseinterp.interventions import knockout_map

    t0 = time.time()
    grid_layer = result["screen"]["worst_layer"] if args.ko_grid_layer is None else args.ko_grid_layer
    single = [r for r in result["rows"] if r["grid"] == f"layer {grid_layer}"]
    if not single:
        raise ValueError(f"ko_grid_layer={grid_layer} has no one-layer grid: allowed "
                         f"{sorted(r['grid'] for r in result['rows'] if r['grid'].startswith('layer '))} (see --add-layer)")
    spec = KVCompression(**max(single, key=lambda r: r["mean"])["spec"])
    layers = args.ko_layers or result["screen"]["layers"]
    make = lambda seed: induction_final_batch(args.ko_per_residue, args.ko_len, args.ko_modulus,  # noqa: E731
                                              min_distance=args.ko_distance, seed=seed)
    batch, calib = make(args.seed + 1), make(args.seed + 2)
    # the compressed model's weights are the plain model's: the journal folder is keyed by the setting too
    resume = None if journal is None else journal.root / f"knockout-{digest(spec.to_dict(), layers)[:12]}"
    compress_attention(model, spec)
    try:
        kmap = knockout_map(smollm2_backend(model), batch, calib, level="kv_head", layers=layers, n_boot=args.n_boot,
                            max_rows=2 * len(batch), label=f"SmolLM2 {spec.name} layers {spec.layers}", resume=resume)
    finally:
        restore_attention(model)
    return {"setting": spec.name, "spec": spec.to_dict(), "map": kmap.to_dict(), "cpu_time_s": time.time() - t0,
            "settings": {k: getattr(args, k) for k in ("ko_per_residue", "ko_len", "ko_modulus", "ko_distance", "ko_layers",
                                                       "ko_grid_layer")},
            "command": "python -m experiments.smollm2.run " + " ".join(sys.argv[1:])}


def _ci(lo_hi) -> str:
    return f"[{lo_hi[0]:.1f}, {lo_hi[1]:.1f}]"


def _gap(row: dict[str, Any]) -> str:
    """Observed gap with the held-out gap and its interval; rows written before held-out gaps (their
    interval is the percentile interval of the replicates' max - min) keep their old form."""
    if "gap_heldout_pp" in row:
        return gap_text(row["gap_pp"], row["gap_heldout_pp"], row["gap_ci_pp"])
    return f"{row['gap_pp']:.1f} {_ci(row['gap_ci_pp'])}"


def _gap_header(result: dict[str, Any]) -> str:
    return GAP_HEADER if all("gap_heldout_pp" in r for r in result["rows"]) else "gap pp [replicate max - min, 95%]"


def _gap_note(result: dict[str, Any]) -> str:
    if _gap_header(result) == GAP_HEADER:
        return GAP_NOTE
    return ("Gaps: best minus worst residue, with the 95% range of the bootstrap replicates' best minus worst "
            "(this file predates held-out gaps, docs/statistics.md): a gap inside or below that range is what "
            "sampling noise alone produces. A rerun of the study reports held-out gaps.")


def summary(result: dict[str, Any]) -> list[str]:
    """Bullet points computed from the rows (never hand-edited): per grid, the accuracy range, the
    settings whose effect is periodic with period S, and the best worst-phase accuracy."""
    out = ["## Summary (computed from the tables below)", ""]
    base = {r["stride"]: r for r in result["rows"] if r["grid"] == "baseline"}
    for S, r in base.items():
        out.append(f"- Uncompressed, residues mod {2 * S}: mean {100 * r['mean']:.1f}%, worst {100 * r['worst']:.1f}%, "
                   f"gap {_gap(r)} pp; {r['verdict']}.")
    for grid in dict.fromkeys(r["grid"] for r in result["rows"] if r["grid"] != "baseline"):
        rows = [r for r in result["rows"] if r["grid"] == grid]
        periodic = [r["setting"] for r in rows if r["verdict"].endswith(f"consistent with period {r['stride']}")
                    and r["dominant_period"] in (r["stride"], None) and r["p_phase"] < 0.05]
        best = max(rows, key=lambda r: r["worst"])
        ref = base.get(rows[0]["stride"])
        ref_text = f" (uncompressed {100 * ref['mean']:.1f}%)" if ref else ""
        # a permutation verdict without a dominant period, whose gap the uncompressed model's own sampling noise
        # reaches, is no periodic weak spot: say which settings have both tests and which lie within noise
        spectral = [r["setting"] for r in rows if r["setting"] in periodic and r["dominant_period"] == r["stride"]]
        noise = {S: b["gap_ci_pp"][1] for S, b in base.items() if b.get("gap_ci_pp")}
        in_noise = [r["setting"] for r in rows if r["setting"] in periodic and r["setting"] not in spectral
                    and r["stride"] in noise and r["gap_pp"] <= noise[r["stride"]]]
        out.append(f"- {grid}: mean accuracy {100 * min(r['mean'] for r in rows):.1f}-"
                   f"{100 * max(r['mean'] for r in rows):.1f}% over {len(rows)} settings{ref_text}; phase effect "
                   f"consistent with period S in {len(periodic)}: {', '.join(periodic) or 'none'}; of these, "
                   f"dominant period S in {len(spectral)}" + (f" ({', '.join(spectral)})" if spectral else "")
                   + (f", and {len(in_noise)} without one have a gap within the uncompressed model's gap range at "
                      "the same modulus (sampling noise)" if noise else "")
                   + f"; highest worst-residue accuracy: {best['setting']} ({100 * best['worst']:.1f}%).")
    return out


def markdown(result: dict[str, Any]) -> str:
    """The results file: settings, screen, one table per grid, the knockout map's largest cells."""
    s, sc = result["settings"], result["screen"]
    extra = "".join(f" Then `{c}`." for c in result.get("supplements", []))
    out = ["# SmolLM2-135M-Instruct: phase sensitivity of training-free KV compression", "",
           f"Made by `{result['command']}` ({result['cpu_time_s'] / 60:.0f} min on one CPU core).{extra}", "",
           "Task: induction copying. Prompts BOS + x + x, x = "
           f"{s['length']} distinct random token ids in [1000, 20000); each query of the second copy must "
           "predict the next token, whose first-copy position p sets the residue r = p mod 2S (phase = p mod S). "
           f"{s['prompts']} prompts, {s['length'] - 1} rows each; intervals: 95% cluster bootstrap over prompts "
           f"({s['n_boot']} replicates); delta: compressed minus uncompressed accuracy in points, paired bootstrap; "
           "verdict: permutation tests at 5% (`PhaseCurve.verdict`); dominant period: `dominant_period`. "
           f"Compressed layers use a local window of {s['local']} exact tokens"
           + (f" and keep the first {s['sink']} token(s) exact" if s["sink"] else "") + ". " + _gap_note(result), "",
           f"Layer screen (W8/S8 mean@post, one layer at a time, {s['screen_prompts']} prompts of "
           f"{s['length'] // 2} tokens, clean {100 * sc['clean']:.1f}%): accuracy change per layer (pp) "
           + ", ".join(f"L{i} {d:+.0f}" for i, d in enumerate(sc["drop_pp"]))
           + f". Induction layers (drop >= {sc['threshold_pp']} pp): {sc['layers']}; worst single layer: "
           f"{sc['worst_layer']}.", ""]
    out += summary(result) + [""]
    header = ("| setting | mean % [CI] | delta pp [CI] | worst % (r) | best % (r) | " + _gap_header(result) + " | dominant period | "
              "verdict | accuracy % by phase 0..S-1 |\n|" + "---|" * 9)
    for grid in dict.fromkeys(r["grid"] for r in result["rows"]):
        out += [f"## {grid}" if grid != "baseline" else "## Uncompressed model (residues mod 2S)", "", header]
        for r in (r for r in result["rows"] if r["grid"] == grid):
            phases = " ".join(f"{100 * a:.0f}" for a in r["phase_accuracy"])
            dp = r["dominant_period"] if r["dominant_period"] is not None else "none"
            out.append(f"| {r['setting']} | {100 * r['mean']:.1f} {_ci([100 * x for x in r['mean_ci']])} | "
                       f"{r['delta_pp']:+.1f} {_ci(r['delta_ci_pp'])} | {100 * r['worst']:.1f} ({r['worst_residue']}) | "
                       f"{100 * r['best']:.1f} ({r['best_residue']}) | {_gap(r)} | {dp} | "
                       f"{r['verdict']} | {phases} |")
        out.append("")
    k = result["knockout"]
    m = k["map"]
    vals, lo, hi = (np.array(m[x], dtype=float) for x in ("values", "lo", "hi"))
    clean = m["clean"]["accuracy"]
    ks = k.get("settings", s)
    made = f" Made by `{k['command']}`." if k.get("command") and k["command"] != result["command"] else ""
    out += [f"## KV-head knockout on {k['setting']} (layers {k['spec']['layers']})", "",
            f"Mean replacement at the final position, final-position induction prompts of {ks['ko_len']} tokens "
            f"(target at least {ks['ko_distance']} tokens before the query), {ks['ko_per_residue']} per residue "
            f"mod {ks.get('ko_modulus', 16)}; KV heads of layers {m['coords']['layer']}.{made} "
            "Absolute change in points with 95% paired bootstrap intervals. Clean accuracy by residue (%): "
            + " ".join(f"{100 * a:.0f}" for a in clean) + ".", "",
            "| KV head | mean change pp | largest drop pp [CI] (residue) | residues with CI below 0 |", "|---|---|---|---|"]
    for li, layer in enumerate(m["coords"]["layer"]):
        for ki, kv in enumerate(m["coords"]["kv_head"]):
            v, l_, h_ = vals[li, ki], lo[li, ki], hi[li, ki]
            r = int(np.nanargmin(v))
            sig = [int(x) for x in np.flatnonzero(h_ < 0)]
            out.append(f"| {Unit('kv_head', layer, kv).name} | {np.nanmean(v):+.1f} | {v[r]:+.1f} {_ci([l_[r], h_[r]])} ({r}) | {sig or 'none'} |")
    out += ["", "Key: value text retrieval was not run: the issue measured 3 of 10 on this model, too weak "
            "to stratify by phase.", ""]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--prompts", type=int, default=16)
    p.add_argument("--length", type=int, default=128)
    p.add_argument("--windows", type=int, nargs="+", default=[4, 8, 16])
    p.add_argument("--local", type=int, default=16)
    p.add_argument("--sink", type=int, default=0)
    p.add_argument("--anchors", nargs="+", choices=["post", "first", "centre", "last"],
                   default=["post", "first", "centre", "last"], help="rotation anchors of the grids (default: all)")
    p.add_argument("--screen-prompts", type=int, default=4)
    p.add_argument("--screen-drop", type=float, default=20.0)
    p.add_argument("--all-layers-control", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--ko-per-residue", type=int, default=16)
    p.add_argument("--ko-modulus", type=int, default=8)
    p.add_argument("--ko-layers", type=int, nargs="+", default=None, help="default: the induction layers")
    p.add_argument("--ko-grid-layer", type=int, default=None,
                   help="knock out on the best setting of this layer's one-layer grid (default: the worst layer)")
    p.add_argument("--ko-len", type=int, default=64)
    p.add_argument("--ko-distance", type=int, default=24)
    p.add_argument("--n-boot", type=int, default=2000)
    p.add_argument("--n-perm", type=int, default=2000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--verbose", action="store_true")
    p.add_argument("--resume", action="store_true",
                   help=f"journal finished units in OUT/{JOURNAL} and take back those of a killed run")
    p.add_argument("--render-only", action="store_true", help="rewrite smollm2.md from an existing smollm2.json")
    p.add_argument("--knockout-only", action="store_true", help="redo the knockout of an existing smollm2.json")
    p.add_argument("--add-layer", type=int, nargs="+", default=None,
                   help="append the W8/S8 one-layer grid of these layers to an existing smollm2.json")
    args = p.parse_args(argv)
    if args.add_layer:  # append W8/S8 one-layer grids to an existing smollm2.json (same prompts)
        result = json.loads((args.out / "smollm2.json").read_text())
        result["rows"] += add_layer_grids(result, args.add_layer, args)
        result.setdefault("supplements", []).append("python -m experiments.smollm2.run " + " ".join(sys.argv[1:]))
        write_atomic(args.out / "smollm2.json", dumps(result))
    if args.knockout_only:  # redo the knockout on the sweep of an existing smollm2.json
        from phaseinterp.backends.smollm2 import load_smollm2

        result = json.loads((args.out / "smollm2.json").read_text())
        model = load_smollm2()[0]
        result["knockout"] = knockout(model, result, args, journals(args, model))
        write_atomic(args.out / "smollm2.json", dumps(result))
    if args.render_only or args.knockout_only or args.add_layer:
        write_atomic(args.out / "smollm2.md", markdown(json.loads((args.out / "smollm2.json").read_text())))
        if args.knockout_only or args.add_layer:
            shutil.rmtree(args.out / JOURNAL, ignore_errors=True)
        print(f"wrote {args.out / 'smollm2.md'}")
        return
    result = run(args)
    args.out.mkdir(parents=True, exist_ok=True)
    write_atomic(args.out / "smollm2.json", dumps(result))
    write_atomic(args.out / "smollm2.md", markdown(result))
    shutil.rmtree(args.out / JOURNAL, ignore_errors=True)  # the result is whole: the journal is spent
    print(f"wrote {args.out / 'smollm2.md'} and smollm2.json")


if __name__ == "__main__":
    main()
