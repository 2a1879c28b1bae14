"""Train the zoo (`experiments.zoo.members.ZOO`) by the recipe rule and ship it.

    python -m experiments.zoo.train                          # every member, seeds 0 and 1, 2 at a time
    python -m experiments.zoo.train --members w8s8 w8s8-kv4 --seeds 0 --jobs 1
    python -m experiments.zoo.train --compile                # each run's forward through torch.compile
    bash experiments/zoo/train_gpu.sh                        # the larger zoo on one GPU (width 256, 8 KV heads)
    python -m experiments.zoo.table                          # then the table (assets/results/zoo.md)

Each run is `phaseinterp train --recipe rule RULE-ARGUMENTS-OF-NAME --seed N --name zoo-NAME-sN --out
RUNS/zoo-NAME-sN --ship assets/checkpoints/zoo` (`members.rule_options`) in its own process with one torch thread; a run whose card is already
shipped is skipped, an interrupted one resumes from its newest checkpoint. Runs are ordered
cheapest first (or as given, with --in-order), so a partial pass still covers the most members.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from experiments.zoo.members import MEMBERS, ZOO, rule_options, zoo_name, zoo_recipe
from phaseinterp.train.rule import WIDTH


def cost(member: str) -> int:
    _, tcfg = zoo_recipe(member)
    return tcfg.steps * tcfg.mixture.seq_len


def options(args: argparse.Namespace) -> list[str]:
    """The `phaseinterp train` options that every run of this queue shares."""
    out = ["--eval-examples", str(args.eval_examples)]
    if args.width is not None:
        out += ["--width", str(args.width)]
    if args.device is not None:
        out += ["--device", args.device]
    if args.steps is not None:
        out += ["--steps", str(args.steps)]
    if args.compile:
        out.append("--compile")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--members", nargs="+", default=list(ZOO), choices=list(MEMBERS))
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    p.add_argument("--jobs", type=int, default=2, help="runs at a time (one thread each)")
    p.add_argument("--runs", type=Path, default=Path("runs/zoo"))
    p.add_argument("--ship", type=Path, default=Path("assets/checkpoints/zoo"))
    p.add_argument("--in-order", action="store_true", help="train the members in the order given (default: cheapest first)")
    p.add_argument("--width", type=int, help=f"d_model (default: the zoo's {WIDTH})")
    p.add_argument("--kv-heads", type=int, help="KV heads of every member (default: each member's own)")
    p.add_argument("--device", help="torch device of every run (default: CUDA when available, else CPU)")
    p.add_argument("--steps", type=int, help="training steps of every run (default: the rule's; a smoke test: 20)")
    p.add_argument("--compile", action="store_true",
                   help="compile each run's forward pass (1.7x the eager steps per second on CPU, benchmarks/results/train.json)")
    p.add_argument("--eval-examples", type=int, default=256, help="examples per residue of each card (default 256)")
    args = p.parse_args(argv)
    members = args.members if args.in_order else sorted(args.members, key=cost)
    name = lambda m, s: zoo_name(m, s, width=args.width or WIDTH, kv_heads=args.kv_heads)  # noqa: E731
    todo = [(m, s) for m in members for s in args.seeds if not (args.ship / f"{name(m, s)}.json").is_file()]

    def one(job: tuple[str, int]) -> int:
        member, seed = job
        out = args.runs / name(member, seed)
        cmd = [sys.executable, "-m", "phaseinterp.cli", "train", "--recipe", "rule", *rule_options(member, args.kv_heads),
               "--seed", str(seed), "--name", name(member, seed), "--out", str(out), "--ship", str(args.ship), "--no-progress", *options(args)]
        if (out / "checkpoints").is_dir():
            cmd.append("--resume")
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(f"{out}.log", "a") as log:
            code = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT)
        print(f"{'done' if code == 0 else f'FAILED ({code})'}: {name(member, seed)} (log {out}.log)", flush=True)
        return code

    print(f"{len(todo)} runs: " + ", ".join(name(m, s) for m, s in todo), flush=True)
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        codes = list(pool.map(one, todo))
    return int(any(codes))


if __name__ == "__main__":
    raise SystemExit(main())
