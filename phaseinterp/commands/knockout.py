"""`phaseinterp knockout`: KV-head (or head, or layer) knockout map by residue, written as
JSON, CSV and HTML; optionally the head-output patching maps of a phase swap and a mapping swap."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from phaseinterp.commands._common import Request, add_guard_args, add_model_args, add_task_args, model_label, write_json
from phaseinterp.commands._common import load_source as load_model  # the loader (tests may stand a model in for it)
from phaseinterp.units import LEVELS

#: `SpecializationMap`'s significance rules (measure.specialization.SIGNIFICANCE; spelled out here so
#: that `--help` imports no numpy: tests/test_startup.py).
SIGNIFICANCE = ("fdr", "uncorrected")

DESCRIPTION = """Knock out the query heads of each KV head (--level) at the final position with their
mean over a disjoint calibration set (--replacement), on record lookup, and write
OUT/knockout_map.{json,csv,html}, OUT/clean_curve.json and OUT/summary.json. Works on a checkpoint
or on a random-weight model (--preset NAME --seed N). Significant cells are, by default, those
that survive Benjamini-Hochberg control of the false discovery rate across the map's cells
(--significance fdr, --fdr-q 0.05); --significance uncorrected marks every cell whose 95% interval
excludes 0 instead (~5% of null cells pass that one)."""


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("knockout", help="knockout map: accuracy change by (layer, KV head, residue)",
                              description=DESCRIPTION)
    add_model_args(p)
    add_task_args(p)
    p.add_argument("--n-calib", type=int, help="calibration examples per residue (default: --n-per-residue)")
    p.add_argument("--self-calibration", action="store_true",
                   help="no calibration batch: replace each row's z by its mean over the evaluated batch's other "
                        "logical examples (no calibration forward; needs --n-per-residue >= 2; --replacement mean)")
    p.add_argument("--level", choices=LEVELS, default="kv_head")
    p.add_argument("--replacement", choices=["mean", "zero", "resample"], default="mean")
    p.add_argument("--per-residue", action="store_true", help="mean / resample within the row's residue")
    p.add_argument("--positions", default="final",
                   help="'final' (default), 'all' or comma-separated absolute positions")
    p.add_argument("--method", choices=["auto", "incremental", "hooks"], default="auto")
    p.add_argument("--change", choices=["absolute", "relative"], default="absolute",
                   help="absolute change in percentage points (default; defined at weak residues too) or the paper's "
                        "relative change in %%, masked where clean accuracy is not reliably above chance (--floor)")
    p.add_argument("--floor", type=float, default=0.25,
                   help="with --change relative: the clean accuracy's interval lower bound (a fraction) below which a "
                        "residue is masked (default 0.25)")
    p.add_argument("--threshold", type=float, default=50.0,
                   help="a unit owns a residue when its knockout lowers accuracy by >= this many pp (%% with --change "
                        "relative) and the cell is significant (--significance; default 50)")
    p.add_argument("--significance", choices=SIGNIFICANCE, default="fdr",
                   help="which cells count as significant in the figures, the printed map and the coverage: 'fdr' "
                        "(default: Benjamini-Hochberg across the map's cells at --fdr-q, from per-cell bootstrap "
                        "p-values) or 'uncorrected' (each cell's 95%% interval excludes 0)")
    p.add_argument("--fdr-q", type=float, default=0.05,
                   help="the false discovery rate for --significance fdr, in (0, 1) (default 0.05)")
    p.add_argument("--patching", action="store_true",
                   help="also write head-output patching maps (phase swap +1, mapping swap): accuracy restored in pp "
                        "with a cluster-bootstrap interval (the normalized logit difference in their 'normalized' column)")
    p.add_argument("--max-rows", type=int, default=2048, help="rows per batched computation (default 2048)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    p.add_argument("--out", type=Path, required=True, help="output directory")
    add_guard_args(p, result="summary.json", resume=True)
    p.set_defaults(func=run)


def _positions(text: str):
    if text in ("final", "all"):
        return text
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--positions={text!r} is invalid: allowed 'final', 'all' or comma-separated ints") from None


def knockout_options(args: argparse.Namespace):
    """The knockout map's settings from the command line: the `KnockoutOptions` that
    `knockout_map(..., options=...)` takes (the journal folder comes from the request)."""
    from phaseinterp.interventions import KnockoutOptions

    return KnockoutOptions(level=args.level, replacement=args.replacement, per_residue=args.per_residue,
                           positions=_positions(args.positions), method=args.method, n_boot=args.n_boot,
                           seed=args.task_seed, max_rows=args.max_rows, label=model_label(args), change=args.change,
                           floor=args.floor, progress=not args.no_progress)


def patching_options(args: argparse.Namespace):
    """The settings of `--patching`'s head-output maps: the `PatchingOptions` that
    `activation_patching(..., options=...)` takes (z at the final position, the knockout's level,
    KV heads for whole layers)."""
    from phaseinterp.interventions import PatchingOptions

    return PatchingOptions(unit="z", level=args.level if args.level != "layer" else "kv_head", n_boot=args.n_boot,
                           seed=args.task_seed, max_rows=args.max_rows, progress=not args.no_progress)


def compute(args: argparse.Namespace) -> dict[str, Any]:
    from phaseinterp.interventions import activation_patching, knockout_map, mapping_swap, phase_swap

    from phaseinterp.measure.pvalues import check_q

    check_q(args.fdr_q)  # before the model runs: a bad q fails at once
    options = knockout_options(args)
    request = Request.build(args, load_model)
    batch = request.sample(args.n_per_residue)
    if args.self_calibration and args.n_calib is not None:
        raise ValueError("--n-calib and --self-calibration exclude each other: --self-calibration samples no calibration batch")
    calib = "self" if args.self_calibration else request.sample(args.n_calib or args.n_per_residue, split="calibration")
    model = request.model
    smap = knockout_map(model, batch, calib, options=options, resume=request.journal_for("knockout"))
    smap.meta["source"] = request.source()
    out = {"knockout": smap, "model": model, "batch": batch, "request": request}
    if args.patching:
        patching = patching_options(args)
        out["patch_mapping"] = activation_patching(model, mapping_swap(batch, seed=args.task_seed), options=patching,
                                                   resume=request.journal_for("patch_mapping"))
        out["patch_phase"] = activation_patching(model, phase_swap(batch, 1), options=patching,
                                                 resume=request.journal_for("patch_phase"))
    return out


def run(args: argparse.Namespace) -> int:
    from phaseinterp.analysis.map_summary import unit_summary
    from phaseinterp.analysis import SpecializationMap
    from phaseinterp.measure import PhaseCurve
    from phaseinterp.plot import phase_figure
    from phaseinterp.plot import map_figure, save_html

    res = compute(args)  # errors: one line through the CLI boundary (phaseinterp/cli.py)
    smap: SpecializationMap = res["knockout"]
    which, q = args.significance, args.fdr_q
    sig, rule = smap.significance(which, q)  # the one rule the figures, the table and the coverage use
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    smap.save(out / "knockout_map.json")
    smap.save(out / "knockout_map.csv")
    save_html(map_figure(smap, title=f"{model_label(args)}: KV-head knockout, {smap.quantity}", significance=which, q=q),
              out / "knockout_map.html")
    curve = PhaseCurve.from_dict(smap.clean)
    curve.to_json(out / "clean_curve.json")
    save_html(phase_figure(curve), out / "clean_curve.html")
    summary = {"source": res["request"].source(), "clean": curve.summary(), "threshold": args.threshold,
               "significance": smap.significance_summary(which, q),
               "coverage": smap.coverage(args.threshold, significant=which, q=q),
               "uncovered_residues": smap.uncovered(args.threshold, significant=which, q=q),
               "masked": smap.meta.get("masked"),
               "units": unit_summary(smap), "pooled": smap.pooled(q).to_dict(orient="records"),
               "top": smap.top(10).to_dict(orient="records"),
               "method": smap.meta["intervention"]["method"]}
    for key in ("patch_mapping", "patch_phase"):
        if key in res:
            res[key].save(out / f"{key}.json")
            res[key].save(out / f"{key}.csv")
            save_html(map_figure(res[key], significance=which, q=q), out / f"{key}.html")
            summary[key] = {"quantity": res[key].quantity, "top": res[key].top(6).to_dict(orient="records"),
                            "significance": res[key].significance_summary(which, q),
                            "coverage": res[key].coverage(args.threshold, significant=which, q=q)}
    write_json(out / "summary.json", summary)
    print(repr(curve))
    print(repr(smap))
    print(f"{'unit':>8} " + " ".join(f"{r:>7}" for r in smap.coords["residue"]))
    sig, masked = smap.as_2d(sig), smap.as_2d(smap.masked)
    for label, row, s, m in zip(smap.row_labels(), smap.as_2d(), sig, masked):
        cells = ["masked" if m[i] else "nan" if row[i] != row[i] else f"{row[i]:.0f}" if s[i] else f"({row[i]:.0f})"
                 for i in range(len(row))]
        print(f"{label:>8} " + " ".join(f"{c:>7}" for c in cells))
    counts = summary["significance"]
    print(f"  (value): not significant, {rule}; significant cells: {counts['fdr']} of {counts['cells']} at BH-FDR "
          f"q={q:g}, {counts['uncorrected']} with the uncorrected interval")
    for note in ("note", "note_estimable"):
        if counts.get(note):
            print(f"  note: {counts[note]}")
    if smap.meta.get("masked"):
        print(f"  masked: {smap.meta['masked']['reason']} (residues {smap.meta['masked']['residues']})")
    unit = "%" if smap.quantity.startswith("relative") else " pp"
    for u in summary["units"]:
        if u["mean"] is not None:
            print(f"  unit {u['unit']}: mean {u['mean']:.1f}{unit}, min {u['min']:.1f}{unit} (residue {u['worst_residue']}), "
                  f"range over residues {u['range']:.1f}{unit}")
    pooled = [u for u in summary["pooled"] if u["significant_fdr"]]
    print(f"  pooled over residues (each unit tested once, BH-FDR q={q:g} over {len(summary['pooled'])} units): "
          f"{len(pooled)} significant{': ' if pooled else ''}"
          + ", ".join(f"{u['unit']} {u['value']:+.1f}{unit}" for u in sorted(pooled, key=lambda u: u["p"])))
    if curve.n_correct.sum() == 0:
        print("note: the clean model is wrong at every residue: a knockout cannot lower its accuracy; "
              "knockouts need a model that retrieves")
    print(f"coverage (knockout <= -{args.threshold:g}{unit}, significant: {rule}): {json.dumps(summary['coverage'])}")
    print(f"residues no unit covers: {summary['uncovered_residues']}")
    for key in ("patch_mapping", "patch_phase"):
        if key in summary:
            print(f"{key} (restores >= {args.threshold:g} pp, significant: {summary[key]['significance']['rule']}): "
                  f"{json.dumps(summary[key]['coverage'])}")
    written = ["knockout_map.json", "knockout_map.csv", "knockout_map.html", "clean_curve.json", "clean_curve.html",
               *(f"{key}.{ext}" for key in ("patch_mapping", "patch_phase") if key in res for ext in ("json", "csv", "html")),
               "summary.json"]
    print(f"wrote {out}/: {', '.join(written)}")
    return 0
