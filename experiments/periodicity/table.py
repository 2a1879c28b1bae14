"""The periodicity tables (docs/paper.md, claims 1-2) of the shipped checkpoints.

    python -m experiments.periodicity.table                        # assets/checkpoints -> assets/results

For every card `NAME.json` in the checkpoint folder, the sweep of `phaseinterp sweep` runs on
`NAME.safetensors` at one matched protocol: the card's evaluation task (`RecordLookup` with the
training vocabulary split, sequence length, records and demonstrations), residues mod 8 (the
lcm of all strides), the same prompts (task seed) for every model, bootstrap and permutation
statistics at the model's period P, the lcm of its strides (full attention: P = 4, the question
being whether it shows a period at all). Equivalent per checkpoint (the card next to the checkpoint sets the task):

    phaseinterp sweep assets/checkpoints/NAME.safetensors --modulus 8 --period P \\
        --protocol P --n-per-residue 512 --out DIR

Runs both padding protocols ("prefix": records contiguous, shifted together; "insequence": random
gaps between records) and writes, for each, to `OUT/PROTOCOL/`: `periodicity.json` (summary per
model, per-residue curves, the protocol and versions), `periodicity.csv` (one row per model and
residue), `periodicity.md` (the table) and `overlay.html` (all curves on one figure); and
`OUT/periodicity.md` with both tables.

Note: with residues mod 8, a stride-8 model has one period per curve, so its periodicity
statistics are undefined (NaN); a longer modulus would need prompts longer than the 64 tokens the
models were trained on.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd
import torch

from phaseinterp.measure.gap import GAP_HEADER, GAP_NOTE, gap_text
from phaseinterp.measure.provenance import jsonable, versions
from phaseinterp.train.result import MODULUS, architecture, sweep_checkpoint


def run(checkpoints: Path, out: Path, *, n_per_residue: int = 512, task_seed: int = 0, protocol: str = "prefix",
        n_boot: int = 2000, n_perm: int = 2000, names: list[str] | None = None) -> pd.DataFrame:
    """Sweep every carded checkpoint in `checkpoints`; write the table, CSV, JSON and figure to
    `out`; return the summary table."""
    from phaseinterp.plot import phase_figure, save_html

    torch.set_num_threads(1)
    cards = sorted(checkpoints.glob("*.json"))
    if names:
        cards = [c for c in cards if c.stem in names]
    if not cards:
        raise ValueError(f"no checkpoint cards (*.json) in {str(checkpoints)!r}")
    curves, rows, protocols = {}, [], {}
    for card_path in cards:
        card = json.loads(card_path.read_text())
        curve, task_kwargs = sweep_checkpoint(card_path.with_suffix(".safetensors"), card, n_per_residue=n_per_residue,
                                              task_seed=task_seed, protocol=protocol, n_boot=n_boot, n_perm=n_perm)
        curves[card["name"]] = curve
        protocols[card["name"]] = task_kwargs
        s = curve.summary()
        arch = architecture(card["model_config"])
        rows.append({"model": card["name"], "architecture": arch, "seed": card["seed"], "P": s["period"],
                     "mean": s["mean"], "worst": s["worst"], "best": s["best"], "gap_pp": s["gap_pp"],
                     "gap_heldout_pp": s["gap_heldout_pp"], "gap_lo_pp": s["gap_interval_pp"][0], "gap_hi_pp": s["gap_interval_pp"][1],
                     "p_phase": s["p_value"], "periodicity_pp": s["periodicity_pp"], "p_periodic": s["p_periodic"],
                     "spectral_share": s["spectral_share"], "spectral_baseline": s["spectral_baseline"],
                     "worst_residue": s["worst_residue"], "verdict": s["verdict"]})
        print(f"{card['name']:16s} mean {s['mean']:.3f} worst {s['worst']:.3f} gap {s['gap_pp']:5.1f} pp  {s['verdict']}", flush=True)
    table = pd.DataFrame(rows)
    table.attrs["accuracy"] = {k: c.accuracy.tolist() for k, c in curves.items()}
    out.mkdir(parents=True, exist_ok=True)
    pd.concat([c.to_pandas() for c in curves.values()]).to_csv(out / "periodicity.csv", index=False)
    payload = {"protocol": {"modulus": MODULUS, "n_per_residue": n_per_residue, "task_seed": task_seed,
                            "padding": protocol, "n_boot": n_boot, "n_perm": n_perm, "tasks": protocols},
               "summary": rows, "curves": {k: c.to_dict() for k, c in curves.items()}, "versions": versions()}
    (out / "periodicity.json").write_text(json.dumps(jsonable(payload), indent=1) + "\n")
    (out / "periodicity.md").write_text(_markdown(table, n_per_residue, protocol))
    save_html(phase_figure(curves), out / "overlay.html", root=out.parent)  # the protocols share one plotly.js: offline
    return table


def _markdown(table: pd.DataFrame, n_per_residue: int, protocol: str) -> str:
    head = ("| model | architecture | seed | P | mean | worst | " + GAP_HEADER + " | p(phase) | "
            "mean abs(A(r)-A(r+P)) (pp) | p(periodic) | spectral share (baseline) | verdict |\n|" + "---|" * 12 + "\n")
    lines = [
        f"| {r.model} | {r.architecture} | {r.seed} | {r.P} | {100 * r.mean:.1f} | {100 * r.worst:.1f} | "
        f"{gap_text(r.gap_pp, r.gap_heldout_pp, (r.gap_lo_pp, r.gap_hi_pp))} | {r.p_phase:.3g} | {r.periodicity_pp:.1f} | "
        f"{r.p_periodic:.3g} | {r.spectral_share:.2f} ({r.spectral_baseline:.2f}) | {r.verdict} |" for r in table.itertuples()]
    acc = [f"| {name} | " + " | ".join(f"{100 * a:.1f}" for a in curve) + " |" for name, curve in table.attrs["accuracy"].items()]
    acc_head = "| model | " + " | ".join(f"r={r}" for r in range(MODULUS)) + " |\n|" + "---|" * (MODULUS + 1) + "\n"
    return (f"## {protocol} padding\n\nRecord lookup, residues mod {MODULUS} (target key position), {n_per_residue} "
            "logical examples per residue, accuracies in %, intervals from a 2,000-replicate logical-example cluster "
            "bootstrap, p-values from permutation tests. " + GAP_NOTE + "\n\n" + head + "\n".join(lines) + "\n\nAccuracy by residue:\n\n"
            + acc_head + "\n".join(acc) + "\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--checkpoints", type=Path, default=Path("assets/checkpoints"))
    p.add_argument("--out", type=Path, default=Path("assets/results"))
    p.add_argument("--n-per-residue", type=int, default=512)
    p.add_argument("--task-seed", type=int, default=0)
    p.add_argument("--protocols", nargs="+", default=["prefix", "insequence"], choices=["prefix", "insequence"])
    p.add_argument("--n-boot", type=int, default=2000)
    p.add_argument("--n-perm", type=int, default=2000)
    p.add_argument("--names", nargs="*", help="only these checkpoints")
    args = p.parse_args(argv)
    parts = []
    for protocol in args.protocols:
        print(f"-- {protocol} padding", flush=True)
        run(args.checkpoints, args.out / protocol, n_per_residue=args.n_per_residue, task_seed=args.task_seed,
            protocol=protocol, n_boot=args.n_boot, n_perm=args.n_perm, names=args.names)
        parts.append((args.out / protocol / "periodicity.md").read_text())
    tasks = {json.dumps(json.loads(c.read_text())["data"]["eval_task"], sort_keys=True)
             for c in args.checkpoints.glob("*.json") if not args.names or c.stem in args.names}
    tasks = "; ".join(f"`RecordLookup({', '.join(f'{k}={v!r}' for k, v in json.loads(t).items() if k != 'protocol')})`"
                      for t in sorted(tasks))
    intro = ("# Phase sweep of the shipped checkpoints (docs/paper.md, claims 1-2)\n\n"
             "Reproduce: `python -m experiments.periodicity.table` (a minute or two on one core). Each checkpoint is "
             f"evaluated on its card's matched task ({tasks}), with the same prompts for every model. "
             "Figures: `PROTOCOL/overlay.html`.\n\n")
    (args.out / "periodicity.md").write_text(intro + "\n".join(parts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
