"""`phaseinterp gates`: gate statistics (effective offsets, profiles), gate cycling with its
predicted phase-curve shift, gate attribution against real overrides, and training dynamics."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from phaseinterp.commands._common import (Loaded, Request, add_guard_args, add_model_args, add_task_args, model_label, write_csv,
                                          write_json)
from phaseinterp.commands._common import load_source as load_model  # the loader (tests may stand a model in for it)

DESCRIPTION = """Gate analysis of a compressed model on record lookup. Writes OUT/gate_stats.{csv,json},
OUT/gate_profiles.csv, OUT/gate_plane.html, OUT/gate_profiles.html, OUT/cycling.{json,csv,html},
OUT/attribution.{json,csv,html} and, with --dynamics, OUT/dynamics.{csv,html}."""


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("gates", help="gate statistics, gate cycling and gate attribution", description=DESCRIPTION)
    add_model_args(p)
    add_task_args(p, n_per_residue=32)
    p.add_argument("--layers", type=int, nargs="+", help="compressed layers to analyse (default all)")
    p.add_argument("--deltas", type=int, nargs="+", help="gate cycling shifts (default 1..S-1)")
    p.add_argument("--no-cycling", action="store_true", help="skip gate cycling")
    p.add_argument("--no-attribution", action="store_true", help="skip gate attribution")
    p.add_argument("--override", choices=["uniform"], default="uniform", help="attribution reference (default uniform)")
    p.add_argument("--mode", choices=["denoise", "noise"], default="denoise", help="attribution mode (default denoise)")
    p.add_argument("--dynamics", nargs="*", type=Path, metavar="PATH",
                   help="checkpoints (files or folders of *.safetensors) for gate dynamics; with no PATH, the "
                        "folder named like CHECKPOINT next to it (shipped intermediate checkpoints)")
    p.add_argument("--max-rows", type=int, default=2048, help="rows per batched computation (default 2048)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    p.add_argument("--out", type=Path, required=True, help="output directory")
    add_guard_args(p, result="summary.json", resume=True)
    p.set_defaults(func=run)


def dynamics_paths(args: argparse.Namespace) -> list[Path]:
    """Checkpoint files for --dynamics, sorted by their recorded step."""
    from phaseinterp.analysis import checkpoint_step

    paths = list(args.dynamics)
    if not paths:
        if not args.checkpoint:
            raise ValueError("--dynamics without PATH needs a CHECKPOINT (its sibling folder holds the series)")
        ck = Path(args.checkpoint)
        paths = [ck.with_suffix("")]
    files: list[Path] = []
    for p in paths:
        if p.is_dir():
            files += sorted(p.glob("*.safetensors"))
        elif p.is_file():
            files.append(p)
        else:
            raise ValueError(f"--dynamics path {str(p)!r} does not exist")
    if args.checkpoint and Path(args.checkpoint) not in files:
        files.append(Path(args.checkpoint))
    if not files:
        raise ValueError(f"no *.safetensors checkpoints under {[str(p) for p in paths]}")
    return sorted(files, key=lambda f: checkpoint_step(f, 10**12))


def attribution_options(args: argparse.Namespace):
    """Gate attribution's settings from the command line: the `AttributionOptions` that
    `gate_attribution(..., options=...)` takes."""
    from phaseinterp.interventions import AttributionOptions

    return AttributionOptions(override=args.override, mode=args.mode, layers=args.layers, max_rows=args.max_rows,
                              progress=not args.no_progress)


def compute(args: argparse.Namespace) -> dict[str, Any]:
    from phaseinterp.analysis import gate_dynamics, gate_profiles, gate_statistics
    from phaseinterp.interventions import compressors, gate_attribution, gate_cycling

    loaded = Loaded.of(load_model(args))
    if not loaded.model.cfg.strides:
        raise ValueError("the model has no compressed layers: nothing to analyse (gates exist only in compressed layers)")
    request = Request.build(args, lambda _: loaded)
    model, modulus, batch = request.model, request.modulus, request.sample(args.n_per_residue)
    tokens = batch.tokens.to(args.device)
    out: dict[str, Any] = {"model": model, "batch": batch, "request": request,
                           "stats": gate_statistics(model, tokens, layers=args.layers),
                           "profiles": gate_profiles(model, tokens, layers=args.layers)}
    if not args.no_cycling:
        comps = compressors(model, args.layers)
        by_stride: dict[int, list[int]] = {}
        for layer, _, comp in comps:
            if comp.kind.learned:
                by_stride.setdefault(comp.cc.stride, [])
                if layer not in by_stride[comp.cc.stride]:
                    by_stride[comp.cc.stride].append(layer)
        out["cycling"] = []
        for S, layers in sorted(by_stride.items()):
            if modulus % S:
                continue
            out["cycling"] += gate_cycling(model, batch, args.deltas, layers=layers, n_boot=args.n_boot,
                                           seed=args.task_seed, progress=not args.no_progress,
                                           resume=request.journal_for("cycling"))
    if not args.no_attribution and any(c.kind.learned for _, _, c in compressors(model, args.layers)):
        out["attribution"] = gate_attribution(model, batch, options=attribution_options(args))
    if args.dynamics is not None:
        out["dynamics"] = gate_dynamics(dynamics_paths(args), tokens.cpu(), layers=args.layers)
    return out


def run(args: argparse.Namespace) -> int:
    from phaseinterp.measure.provenance import model_config, versions
    from phaseinterp.plot import (cycling_figure, gate_attribution_figure, gate_dynamics_figure, gate_plane_figure,
                                  gate_profile_figure, map_figure, save_html)

    res = compute(args)  # errors: one line through the CLI boundary (phaseinterp/cli.py)
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    label = model_label(args)
    stats, profiles = res["stats"], res["profiles"]
    write_csv(stats, out / "gate_stats.csv")
    write_csv(profiles, out / "gate_profiles.csv")
    save_html(gate_plane_figure(stats, title=f"{label}: gate concentration"), out / "gate_plane.html")
    save_html(gate_profile_figure(profiles), out / "gate_profiles.html")
    summary: dict[str, Any] = {"source": res["request"].source(), "model": model_config(res["model"]), "versions": versions(),
                               "task": res["batch"].meta, "gate_stats": stats.to_dict(orient="records")}
    print(f"{label}: gate concentration (effective offsets, 1 = one-hot .. W = uniform)")
    print(stats[["layer", "branch", "kv_head", "window", "static", "per_window"]].to_string(
        index=False, float_format=lambda x: f"{x:.2f}"))
    peaks = profiles.loc[profiles.groupby(["layer", "branch", "kv_head"], sort=False)["g"].idxmax()]
    summary["profile_peaks"] = peaks[["layer", "branch", "kv_head", "phase", "g"]].to_dict(orient="records")
    print("profile peaks (value gates rolled by -1):",
          ", ".join(f"{r.layer}.{r.branch}.{r.kv_head}->r{r.phase} (g={r.g:.1f})" for r in peaks.itertuples()))
    if "cycling" in res and res["cycling"]:
        cyc = res["cycling"]
        import pandas as pd

        write_csv(pd.concat([c.to_pandas() for c in cyc]), out / "cycling.csv")
        write_json(out / "cycling.json", [c.to_dict() for c in cyc])
        save_html(cycling_figure(cyc, title=f"{label}: gate cycling"), out / "cycling.html")
        summary["cycling"] = [c.summary() for c in cyc]
        print("baseline accuracy by residue:", [round(float(a), 3) for a in cyc[0].baseline.accuracy])
        for c in cyc:
            print(f"  {c!r}; cycled worst residue {c.cycled.worst_residue}")
    if "attribution" in res:
        ga = res["attribution"]
        ga.attribution.save(out / "attribution.json")
        ga.attribution.save(out / "attribution.csv")
        ga.exact.save(out / "attribution_exact.json")
        save_html(map_figure(ga.attribution), out / "attribution.html")
        save_html(gate_attribution_figure(ga), out / "attribution_vs_exact.html")
        summary["attribution"] = {"reference": ga.meta["reference"], "spearman": ga.spearman,
                                  "spearman_units": ga.spearman_units,
                                  "top": ga.attribution.top(8, by="pos").to_dict(orient="records")}
        print(f"{ga!r}")
    if "dynamics" in res:
        dyn = res["dynamics"]
        write_csv(dyn, out / "dynamics.csv")
        save_html(gate_dynamics_figure(dyn, title=f"{label}: gate concentration during training"), out / "dynamics.html")
        summary["dynamics"] = dyn.to_dict(orient="records")
        steps = sorted(int(x) for x in dyn["step"].unique())
        print(f"dynamics over {len(steps)} checkpoints (steps {steps[0]} .. {steps[-1]})")
    write_json(out / "summary.json", summary)
    print(f"wrote {out}/gate_stats.csv, gate_plane.html, gate_profiles.html"
          + (", cycling.*" if "cycling" in res else "") + (", attribution.*" if "attribution" in res else "")
          + (", dynamics.*" if "dynamics" in res else "") + ", summary.json")
    return 0
