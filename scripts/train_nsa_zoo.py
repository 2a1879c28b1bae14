"""Train the NSA zoo (`phaseinterp.train.nsa_zoo.NSA_ZOO`, two seeds each) and ship it.

    python scripts/train_nsa_zoo.py                   # 8 runs, one at a time, seed 0 of every member first
    python -m phaseinterp.train.nsa_study              # then the measurements (assets/results/nsa.md)

Each run is `phaseinterp train --recipe nsa --member NAME --seed N --out RUNS/nsa-NAME-sN --ship
assets/checkpoints/nsa` in its own process with one torch thread; a run whose card is already
shipped is skipped, an interrupted one resumes from its newest checkpoint.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path


def main() -> int:
    from phaseinterp.train.nsa_zoo import NSA_ZOO, nsa_name

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--members", nargs="+", default=list(NSA_ZOO), choices=list(NSA_ZOO))
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    p.add_argument("--runs", type=Path, default=Path("runs/nsa"))
    p.add_argument("--ship", type=Path, default=Path("assets/checkpoints/nsa"))
    p.add_argument("--steps", type=int, help="training steps of every run (default: nsa_zoo.STEPS)")
    p.add_argument("--eval-examples", type=int, default=256, help="examples per residue of each card")
    args = p.parse_args()
    failed = 0
    for seed in args.seeds:  # seed 0 of every member first: a partial pass covers every member once
        for member in args.members:
            name = nsa_name(member, seed)
            if (args.ship / f"{name}.json").is_file():
                print(f"{name}: shipped, skipped", flush=True)
                continue
            out = args.runs / name
            cmd = [sys.executable, "-m", "phaseinterp.cli", "train", "--recipe", "nsa", "--member", member,
                   "--seed", str(seed), "--out", str(out), "--ship", str(args.ship), "--no-progress",
                   "--eval-examples", str(args.eval_examples), "--threads", "1"]
            if args.steps is not None:
                cmd += ["--steps", str(args.steps)]
            if out.is_dir():
                cmd.append("--resume")
            print(" ".join(cmd), flush=True)
            failed += subprocess.run(cmd).returncode != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
