"""Train the tiny DeepSeek Sparse Attention models (recipes "hf-deepseek-v32" and
"hf-deepseek-v32-seed1") and ship them to assets/checkpoints/dsa.

    python -m experiments.dsa.train            # 2 runs, one after another, one torch thread
    python -m experiments.dsa.study            # then the measurements (assets/results/dsa.{md,json})

Each run trains its recipe with the library trainer (`phaseinterp.train.train`) in `RUNS/NAME`, writes
its card (`train.card.make_card`) and ships it (`train.card.ship`); a shipped run is skipped, an
interrupted one resumes from its newest checkpoint.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

#: the shipped runs: recipe name -> seed
RUNS = {"hf-deepseek-v32": 0, "hf-deepseek-v32-seed1": 1}


def train_run(name: str, runs: Path, ship_to: Path, *, steps: int | None = None, eval_examples: int = 512) -> list[Path]:
    """Train (or resume), card and ship one run; returns the shipped paths."""
    import torch

    from phaseinterp.train import recipe, train
    from phaseinterp.train.card import make_card, ship, write_card

    torch.set_num_threads(1)
    spec, tcfg = recipe(name)
    if steps is not None:
        tcfg = tcfg.replace(steps=steps, warmup_steps=min(tcfg.warmup_steps, steps),
                            checkpoint_every=min(tcfg.checkpoint_every, steps))
    out = runs / name
    result = train(spec, tcfg, out, resume="latest" if (out / "checkpoints").is_dir() else None, progress=False,
                   name=name)
    write_card(make_card(result, spec, tcfg, name=name, eval_examples=eval_examples), out / "card.json")
    return ship(out, ship_to, name)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--names", nargs="+", default=list(RUNS), choices=list(RUNS))
    p.add_argument("--runs", type=Path, default=Path("runs/dsa"))
    p.add_argument("--ship", type=Path, default=Path("assets/checkpoints/dsa"))
    p.add_argument("--steps", type=int, default=None, help="training steps (default: the recipe's)")
    p.add_argument("--eval-examples", type=int, default=512, help="examples per residue of each card")
    args = p.parse_args(argv)
    failed = 0
    for name in args.names:
        if (args.ship / f"{name}.json").is_file():
            print(f"{name}: shipped, skipped", flush=True)
            continue
        try:
            for path in train_run(name, args.runs, args.ship, steps=args.steps, eval_examples=args.eval_examples):
                print(f"shipped {path}", flush=True)
        except (ValueError, RuntimeError) as err:  # the other run goes on; the exit code says one failed
            print(f"FAILED {name}: {type(err).__name__}: {err}", file=sys.stderr, flush=True)
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
