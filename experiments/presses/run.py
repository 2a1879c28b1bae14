"""Selection presses on SmolLM2 by phase: uncompressed vs chunk selection (ChunkKV-like) vs token
selection (its SnapKV-like control) at equal budget, on the prose needle in a haystack.

    python -m experiments.presses.run            # -> assets/results/presses.json, experiments/presses/README.md

A chunk grid predicts weak phases where the needle straddles a chunk boundary; token-level selection
predicts none. Per-residue accuracy (residue of the needle value's first token mod 8, the grid's S)
and the permutation p-value for "no phase effect" (`measure.phase_sweep`, cluster = prompt).
`--render-only` rewrites the README's result section from the JSON.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from phaseinterp.backends.presses import SelectionPress, press_attention, restore_presses
from phaseinterp.measure import phase_sweep
from phaseinterp.measure.provenance import versions

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "assets" / "results" / "presses.json"
README = Path(__file__).with_name("README.md")
MARK = "<!-- results (rendered from assets/results/presses*.json by run.py) -->"


def presses(args: argparse.Namespace) -> list[SelectionPress | None]:
    layers = tuple(range(args.first_layer, 30))
    return [None] * (not args.no_baseline) + [SelectionPress(kind, args.chunk, args.budget, local=args.local, sink=args.sink, layers=layers)
                     for kind in ("chunk", "token")]


def measure(model, batch, settings: list[SelectionPress | None], *, period: int, batch_size: int = 8,
            n_boot: int = 500, n_perm: int = 500, seed: int = 0) -> list[dict]:
    """One row per setting (None: uncompressed): per-residue accuracy, bootstrap intervals, the
    permutation p-values. Leaves the model unpressed."""
    rows = []
    for press in settings:
        start = time.time()
        if press is None:
            restore_presses(model)
        else:
            press_attention(model, press)
        curve = phase_sweep(model, batch, period=period, batch_size=batch_size, n_boot=n_boot,
                            n_perm=n_perm, progress=False, seed=seed)
        rows.append({"press": None if press is None else press.to_dict(),
                     "name": "uncompressed" if press is None else press.name,
                     "accuracy": curve.accuracy.tolist(), "n": curve.n.tolist(),
                     "boot_lo": curve.boot_lo.tolist(), "boot_hi": curve.boot_hi.tolist(),
                     "mean": float(curve.accuracy.mean()), "p_value": float(curve.p_value),
                     "p_periodic": float(curve.p_periodic), "seconds": round(time.time() - start, 1)})
        print(rows[-1]["name"], [round(a, 2) for a in rows[-1]["accuracy"]], "p =", rows[-1]["p_value"], flush=True)
    restore_presses(model)
    return rows


def run(args: argparse.Namespace) -> dict:
    from phaseinterp.backends.smollm2 import load_smollm2
    from phaseinterp.tasks import ProseNeedle

    torch.set_num_threads(1)
    model, tok = load_smollm2()
    batch = ProseNeedle("smollm2", seq_len=args.seq_len, n_depths=args.n_depths).sample(
        n_per_residue=args.n_per_residue, modulus=args.modulus, seed=args.seed)
    rows = measure(model, batch, presses(args), period=args.chunk, batch_size=args.batch_size, n_boot=args.n_boot,
                   n_perm=args.n_perm, seed=args.seed)
    return {"question": "do chunk-selection presses show weak phases on the prose needle test, and token selection not?",
            "command": "python -m experiments.presses.run " + " ".join(args.argv),
            "config": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()
                       if k not in ("argv", "render_only")},
            "task": {"name": "ProseNeedle", "model": "smollm2", "prompts": len(batch)},
            "seed": args.seed, "versions": versions(), "rows": rows}


def render(result: dict, name: str) -> str:
    c = result["config"]
    head = "| setting | " + " | ".join(f"r={r}" for r in range(c["modulus"])) + " | mean | p (no phase effect) |"
    lines = [f"`{name}`. Command: `{result['command']}` ({result['task']['prompts']} prompts, "
             f"{c['seq_len']} tokens, residues mod {c['modulus']}, seed {result['seed']}).", "", head,
             "|" + "---|" * (c["modulus"] + 3)]
    for row in result["rows"]:
        acc = " | ".join(f"{a:.2f}" for a in row["accuracy"])
        lines.append(f"| {row['name']} | {acc} | {row['mean']:.2f} | {row['p_value']:.3f} |")
    lines.append("")
    for row in result["rows"]:  # the reading, computed: ceiling/floor regimes answer nothing about phase
        acc = row["accuracy"]
        where = "at ceiling" if min(acc) == 1.0 else "at floor" if max(acc) == 0.0 else None
        verdict = (f"{where} at every residue: no phase effect measurable here" if where else
                   f"weak phases (p = {row['p_value']:.3f} < 0.05; worst residue r={acc.index(min(acc))})"
                   if row["p_value"] < 0.05 else f"no phase effect detected (p = {row['p_value']:.3f})")
        lines.append(f"- {row['name']}: {verdict}.")
    return "\n".join(lines) + "\n"


def write_readme() -> None:
    """The README's result section: one table per result file (`presses.json`, `presses-*.json`)."""
    text = README.read_text()
    text = text[: text.index(MARK)] if MARK in text else text + "\n**Result.**\n\n" * ("**Result." not in text)
    tables = [render(json.loads(f.read_text()), f"assets/results/{f.name}") for f in sorted(OUT.parent.glob("presses*.json"))]
    README.write_text(text + MARK + "\n\n" + "\n".join(tables))


def main(argv: list[str] | None = None) -> None:
    import sys

    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument("--n-depths", type=int, default=2)
    p.add_argument("--n-per-residue", type=int, default=4)
    p.add_argument("--modulus", type=int, default=8)
    p.add_argument("--chunk", type=int, default=8)
    p.add_argument("--budget", type=int, default=4)
    p.add_argument("--local", type=int, default=64)
    p.add_argument("--sink", type=int, default=4)
    p.add_argument("--first-layer", type=int, default=15, help="press layers FIRST..29")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--n-boot", type=int, default=500)
    p.add_argument("--n-perm", type=int, default=500)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-baseline", action="store_true", help="skip the uncompressed row")
    p.add_argument("--out", type=Path, default=OUT, help="result file (assets/results/presses*.json are rendered)")
    p.add_argument("--render-only", action="store_true")
    args = p.parse_args(argv)
    args.argv = argv
    if args.render_only:
        write_readme()
        return
    result = run(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    write_readme()


if __name__ == "__main__":
    main()
