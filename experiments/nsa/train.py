"""Train the NSA zoo (`experiments.nsa.members.NSA_ZOO`, two seeds each) and ship it.

    python -m experiments.nsa.train                   # 8 runs, one at a time, seed 0 of every member first
    python -m experiments.nsa.study                   # then the measurements (assets/results/nsa.md)

Each run trains `nsa_recipe(NAME, seed=N)` with the library trainer (`phaseinterp.train.train`, one
torch thread) in `RUNS/nsa-NAME-sN`, writes its card (`train.card.make_card`) and ships it to
`assets/checkpoints/nsa` (`train.card.ship`); a run whose card is already shipped is skipped, an
interrupted one resumes from its newest checkpoint. Needs `pip install 'phaseinterp[nsa]'`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from experiments.nsa.members import NSA_ZOO, STEPS, nsa_name, nsa_recipe


def train_member(member: str, seed: int, runs: Path, ship_to: Path, *, steps: int = STEPS,
                 eval_examples: int = 256) -> list[Path]:
    """Train (or resume), card and ship one NSA zoo run; returns the shipped paths."""
    import torch

    from phaseinterp.train import train
    from phaseinterp.train.card import make_card, ship, write_card

    torch.set_num_threads(1)
    name = nsa_name(member, seed)
    model_cfg, tcfg = nsa_recipe(member, seed=seed, steps=steps)
    out = runs / name
    result = train(model_cfg, tcfg, out, resume="latest" if (out / "checkpoints").is_dir() else None,
                   progress=False, name=name)
    write_card(make_card(result, model_cfg, tcfg, name=name, eval_examples=eval_examples), out / "card.json")
    return ship(out, ship_to, name)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--members", nargs="+", default=list(NSA_ZOO), choices=list(NSA_ZOO))
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    p.add_argument("--runs", type=Path, default=Path("runs/nsa"))
    p.add_argument("--ship", type=Path, default=Path("assets/checkpoints/nsa"))
    p.add_argument("--steps", type=int, default=STEPS, help=f"training steps of every run (default {STEPS})")
    p.add_argument("--eval-examples", type=int, default=256, help="examples per residue of each card")
    args = p.parse_args(argv)
    failed = 0
    for seed in args.seeds:  # seed 0 of every member first: a partial pass covers every member once
        for member in args.members:
            name = nsa_name(member, seed)
            if (args.ship / f"{name}.json").is_file():
                print(f"{name}: shipped, skipped", flush=True)
                continue
            try:
                for path in train_member(member, seed, args.runs, args.ship, steps=args.steps,
                                         eval_examples=args.eval_examples):
                    print(f"shipped {path}", flush=True)
            except (ValueError, RuntimeError) as err:  # the other runs go on; the exit code says one failed
                print(f"FAILED {name}: {type(err).__name__}: {err}", file=sys.stderr, flush=True)
                failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
