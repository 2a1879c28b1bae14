"""The zoo table in the paper's shape (docs/paper.md: what it reports, claims 1-3): every zoo checkpoint,
every seed, both padding protocols.

    python -m experiments.zoo.table      # assets/checkpoints/zoo/*.json -> assets/results/zoo.{md,json,csv}

Each checkpoint is swept on its card's matched task at residues mod `table_period(P)` (lcm(P, 8) for
the model's period P, doubled until it spans two periods, with rows lengthened to place every residue when training
used shorter ones), with a logical-example cluster bootstrap for the mean and the gap and
permutation tests for "any phase effect" and "period P". The dominant period is the smallest
period whose harmonics carry 90% of the residue curve's spectral power (`measure.dominant_period`).
A run whose best residue stays below `LEARNED_BEST` is reported with its budget and final
training loss (its loss curve is the shipped NAME.metrics.jsonl), never dropped.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from experiments.zoo.members import MEMBERS, ZOO, zoo_name
from phaseinterp.config import period_of
from phaseinterp.measure import correct_matrix, dominant_period, pack_correct
from phaseinterp.measure.gap import GAP_HEADER, GAP_NOTE, gap_text
from phaseinterp.tasks.names import PROTOCOLS
from phaseinterp.train.evaluate import LEARNED_BEST, accuracy_by_undemonstrated, exclusion_summary, rows_for
from phaseinterp.train.result import FULL_PERIOD, architecture, sweep_checkpoint
from phaseinterp.train.rule import WIDTH, table_period


def zoo_row(card_path: Path, protocol: str, *, n_per_residue: int, task_seed: int, n_boot: int, n_perm: int,
            model=None, task_changes: dict[str, Any] | None = None) -> dict[str, Any]:
    """One table row: a checkpoint under one padding protocol (`model`: the checkpoint, already loaded;
    `task_changes`: `RecordLookup` arguments that replace the card's matched task's, e.g. more records)."""
    card = json.loads(card_path.read_text())
    strides = sorted({c["stride"] for c in card["model_config"]["layers"] if c != "full"})
    modulus = table_period(period_of(strides))
    task = {**card["data"]["eval_task"], **(task_changes or {})}
    card = {**card, "data": {**card["data"], "eval_task": rows_for(task, modulus)}}
    curve, task = sweep_checkpoint(card_path.with_suffix(".safetensors"), card, n_per_residue=n_per_residue,
                                   task_seed=task_seed, protocol=protocol, n_boot=n_boot, n_perm=n_perm, modulus=modulus,
                                   model=model)
    s = curve.summary()
    return {
        "model": card["name"], "member": card["name"].rsplit("-s", 1)[0].removeprefix("zoo-"),
        "architecture": architecture(card["model_config"]), "kv_heads": card["model_config"]["n_kv_heads"],
        "S": strides[0] if len(strides) == 1 else None, "seed": card["seed"], "protocol": protocol, "modulus": modulus,
        "steps": card["steps"], "cpu_time_s": card.get("cpu_time_s"), "final_loss": card["final_metrics"].get("loss"),
        "learned": bool(s["best"] >= LEARNED_BEST), "mean": s["mean"], "mean_ci": list(s["mean_interval"]),
        "worst": s["worst"], "best": s["best"], "gap_pp": s["gap_pp"], "gap_heldout_pp": s["gap_heldout_pp"],
        "gap_ci_pp": list(s["gap_interval_pp"]),
        "best_residue": s["best_residue"], "worst_residue": s["worst_residue"], "p_phase": s["p_value"],
        "p_periodic": s["p_periodic"], "test_period": curve.period, "verdict": s["verdict"],
        "dominant_period": dominant_period(curve.accuracy), "accuracy": [float(a) for a in curve.accuracy], "task": task,
        "aligned_start": aligned_start(card["train_config"]["mixture"]),
        "correct": packed_correct(curve),
    }


def packed_correct(curve) -> dict[str, Any]:
    """The curve's per-example correctness, compactly (`measure.pack_correct`): what the member table's
    two-level bootstrap resamples (`python -m experiments.zoo.members_table`)."""
    matrix = correct_matrix(curve.correct, curve.residue, curve.example_id, curve.modulus)
    return {"examples": int(matrix.shape[0]), "bits": pack_correct(matrix)}


def aligned_start(mixture: dict[str, Any]) -> dict[str, int] | None:
    """The phase-aligned start of a card's training mixture (steps, modulus, phase), or None."""
    if not mixture.get("aligned_steps") or mixture.get("aligned_modulus", 1) == 1:
        return None
    return {k: mixture[f"aligned_{k}"] for k in ("steps", "modulus", "phase")}


def markdown(rows: list[dict[str, Any]], n_per_residue: int, loss_curves: str = "assets/checkpoints/zoo") -> str:
    """The table, its legend and the accuracy curves; `loss_curves` is the folder of the runs' metrics.jsonl."""
    head = ("| member | architecture | KV | seed | padding | R | steps (CPU s) | learned | mean % [95% CI] | worst % | "
            f"{GAP_HEADER} | best r | dominant period | period verdict | training rows k = 1 / k >= 2 |\n|" + "---|" * 15 + "\n")
    lines = []
    for r in rows:
        cpu = f" ({r['cpu_time_s']:.0f})" if r["cpu_time_s"] else ""
        if r.get("aligned_start"):
            cpu += f", first {r['aligned_start']['steps']} at r = {r['aligned_start']['phase']}"
        learned = "yes" if r["learned"] else f"**no** (final loss {r['final_loss']:.2f})"
        lines.append(
            f"| {r['member']} | {r['architecture']} | {r['kv_heads']} | {r['seed']} | {r['protocol']} | {r['modulus']} | "
            f"{r['steps']}{cpu} | {learned} | {100 * r['mean']:.1f} [{100 * r['mean_ci'][0]:.1f}, {100 * r['mean_ci'][1]:.1f}] | "
            f"{100 * r['worst']:.1f} | {gap_text(r['gap_pp'], r['gap_heldout_pp'], r['gap_ci_pp'])} | "
            f"{r['best_residue']} | {r['dominant_period'] if r['dominant_period'] is not None else 'none'} | {r['verdict']} | "
            f"{_exclusion_text(r.get('training_rows'))} |")
    curves = "\n".join(f"- {r['model']} ({r['protocol']}): " + " ".join(f"{100 * a:.0f}" for a in r["accuracy"]) for r in rows)
    return ("Each row is one seed of one member. Seeds are the unit: each member across its seeds (share learned with "
            "its Wilson interval, median and range of mean, worst residue and held-out gap, the member curve with a "
            "two-level bootstrap) is in `assets/results/zoo_members.md`, built from this table's per-example "
            "correctness by `python -m experiments.zoo.members_table`.\n\n"
            f"Record lookup on each card's matched task, {n_per_residue} logical examples per residue, residues "
            f"mod R = lcm(S, 8) doubled to span two periods (full attention: 8, tested against period {FULL_PERIOD}); "
            "rows lengthened where training rows could not place every residue. Intervals: "
            "2,000-replicate logical-example cluster bootstrap; verdicts: permutation tests at 5%; dominant period: the "
            "smallest period whose harmonics carry 90% of the curve's spectral power (\"none\": none < R does). \"learned\": best "
            f"residue >= {100 * LEARNED_BEST:.0f}%. \"first N at r = p\": a phase-aligned start (for its first N steps "
            "every training query's key sat at residue p mod R; docs/training.md). \"training rows\": final-query accuracy on "
            "1,024 training rows with k = 1 undemonstrated record (answerable by exclusion, without matching the key) and "
            "with k >= 2 (exclusion alone scores 1/k there, 0.32 on these rows; `evaluate.accuracy_by_undemonstrated`, "
            "docs/training.md, \"The exclusion shortcut\"). "
            f"{GAP_NOTE} Loss curves: `{loss_curves}/NAME.metrics.jsonl`.\n\n"
            + head + "\n".join(lines) + "\n\nAccuracy (%) by residue r = 0..R-1:\n\n" + curves + "\n")


def _exclusion_text(summary: dict[str, Any] | None) -> str:
    return "" if summary is None else f"{summary['one']:.2f} / {summary['several']:.2f}"


def training_rows(card_path: Path, model, n_rows: int = 1024) -> dict[str, Any]:
    """`exclusion_summary` of a zoo checkpoint (`model`, loaded) on `n_rows` rows of its own training mixture."""
    from phaseinterp.train.data import Mixture

    card = json.loads(card_path.read_text())
    by_k = accuracy_by_undemonstrated(model, Mixture.from_dict(card["train_config"]["mixture"]), n_rows=n_rows)
    return exclusion_summary(by_k["by_undemonstrated"])


def run(checkpoints: Path, out: Path, *, n_per_residue: int = 256, task_seed: int = 0, n_boot: int = 2000,
        n_perm: int = 2000, protocols: tuple[str, ...] = PROTOCOLS, width: int | None = None,
        kv_heads: int | None = None, only: list[str] | None = None, members: list[str] | None = None,
        seeds: tuple[int, ...] = (0, 1), command: str = "python -m experiments.zoo.table") -> list[dict[str, Any]]:
    """Sweep every zoo card in `checkpoints`; write zoo.md, zoo.json and zoo.csv to `out`. `width`,
    `kv_heads`, `members` (default: all of `ZOO`) and `seeds` name the zoo the folder should hold
    (`zoo_name`), for the list of runs not trained yet; `command` is the table's "Reproduce" line.
    `only` (card names) sweeps those cards and keeps every other card's rows from `out/zoo.json`,
    which must have been written with the same sweep settings."""
    import pandas as pd
    import torch

    from phaseinterp.checkpoint import load
    from phaseinterp.measure.provenance import jsonable, versions

    torch.set_num_threads(1)
    cards = sorted(checkpoints.glob("*.json"))
    if not cards:
        raise ValueError(f"no zoo checkpoint cards (*.json) in {str(checkpoints)!r}")
    settings = {"n_per_residue": n_per_residue, "task_seed": task_seed, "n_boot": n_boot, "n_perm": n_perm}
    kept = _kept_rows(out / "zoo.json", settings, only, {c.stem for c in cards}) if only else {}
    rows = []
    for card in cards:
        model = load(card.with_suffix(".safetensors"))
        summary = training_rows(card, model)
        for protocol in protocols:
            if (card.stem, protocol) in kept:
                rows.append({**kept[(card.stem, protocol)], "training_rows": summary})
                continue
            rows.append({**zoo_row(card, protocol, n_per_residue=n_per_residue, task_seed=task_seed, n_boot=n_boot, n_perm=n_perm,
                                   model=model), "training_rows": summary})
            r = rows[-1]
            print(f"{r['model']:22s} {protocol:10s} mean {r['mean']:.3f} best {r['best']:.3f} gap {r['gap_pp']:5.1f} pp "
                  f"period {r['dominant_period']}  {r['verdict']}", flush=True)
    names = [zoo_name(m, seed, width=width or WIDTH, kv_heads=kv_heads) for m in members or ZOO for seed in seeds]
    missing = [n for n in names if not (checkpoints / f"{n}.json").is_file()]
    train = "python -m experiments.zoo.train" + (f" --members {' '.join(members)}" if members else "") + (
        f" --seeds {' '.join(map(str, seeds))}" if tuple(seeds) != (0, 1) else "") + (
        f" --ship {checkpoints.as_posix()}" if checkpoints.as_posix() != "assets/checkpoints/zoo" else "")
    note = (f"Not trained yet ({len(missing)} of {len(names)} runs; `{train}` trains what is "
            f"missing): {', '.join(missing)}.\n\n" if missing else "")
    out.mkdir(parents=True, exist_ok=True)
    (out / "zoo.md").write_text("# The zoo: phase curves of every compressor (docs/paper.md, claims 1-3)\n\n"
                                f"Reproduce: `{command}`.\n\n" + note + markdown(rows, n_per_residue, checkpoints.as_posix()))
    payload = {"protocol": settings, "rows": rows, "not_trained": missing, "versions": versions()}
    (out / "zoo.json").write_text(json.dumps(jsonable(payload), indent=1) + "\n")
    flat = [{**{k: v for k, v in r.items() if k not in ("accuracy", "task", "training_rows", "correct")},
             **{f"training_rows_{k}": v for k, v in (r.get("training_rows") or {}).items()}} for r in rows]
    pd.DataFrame(flat).to_csv(out / "zoo.csv", index=False)
    return rows


def _kept_rows(previous: Path, settings: dict[str, int], only: list[str], names: set[str]) -> dict[tuple[str, str], dict]:
    """Rows of `previous` (a zoo.json) for every card not in `only`, keyed by (card name, protocol)."""
    unknown = sorted(set(only) - names)
    if unknown:
        raise ValueError(f"--only {' '.join(unknown)}: no such card; allowed {sorted(names)}")
    if not previous.is_file():
        raise FileNotFoundError(f"--only keeps the other rows of {str(previous)!r}, which does not exist: run the whole table")
    table = json.loads(previous.read_text())
    if table["protocol"] != settings:
        raise ValueError(f"--only: {str(previous)!r} was swept with {table['protocol']}, this sweep uses {settings}: "
                         "run the whole table")
    return {(r["model"], r["protocol"]): r for r in table["rows"] if r["model"] not in only}


def _without_only(argv: list[str]) -> list[str]:
    """The arguments that reproduce the whole table: `--only` and its names dropped."""
    kept, skipping = [], False
    for a in argv:
        if a.startswith("--"):
            skipping = a == "--only" or a.startswith("--only=")
        if not skipping:
            kept.append(a)
    return kept


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--checkpoints", type=Path, default=Path("assets/checkpoints/zoo"))
    p.add_argument("--out", type=Path, default=Path("assets/results"))
    p.add_argument("--n-per-residue", type=int, default=256)
    p.add_argument("--protocols", nargs="+", default=list(PROTOCOLS), choices=PROTOCOLS)
    p.add_argument("--n-boot", type=int, default=2000)
    p.add_argument("--n-perm", type=int, default=2000)
    p.add_argument("--width", type=int, help="the zoo's width, when not the shipped one (names the missing runs)")
    p.add_argument("--kv-heads", type=int, help="the zoo's KV heads, when overridden (names the missing runs)")
    p.add_argument("--only", nargs="+", metavar="NAME", help="sweep only these cards (e.g. zoo-w12s12-s0) and keep the "
                   "other cards' rows from OUT/zoo.json")
    p.add_argument("--members", nargs="+", choices=list(MEMBERS), help="the members the folder should hold (default: all)")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1], help="the seeds the folder should hold (default: 0 1)")
    args = p.parse_args(argv)
    command = " ".join(["python -m experiments.zoo.table", *_without_only(sys.argv[1:] if argv is None else argv)])
    run(args.checkpoints, args.out, n_per_residue=args.n_per_residue, n_boot=args.n_boot, n_perm=args.n_perm,
        protocols=tuple(args.protocols), width=args.width, kv_heads=args.kv_heads, only=args.only,
        members=args.members, seeds=tuple(args.seeds), command=command)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
