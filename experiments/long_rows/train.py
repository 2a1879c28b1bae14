"""The long-row runs on CPU, one process and one torch thread per run, resumable: the queue that
trains what no GPU session has (slow: about 1 s per step of a 256-token batch on one core).

    python -m experiments.long_rows.train --members full w8s8 --seeds 0 --task 256 96 512 --lr 1e-3
    python -m experiments.long_rows.train ... --steps 8000 --jobs 2 --out runs/long_rows_cpu

Each run is `train(recipe(MEMBER, SEED, ...), OUT/NAME, resume="latest")` (members.recipe), then its card
(`OUT/NAME/card.json`); a run with a card is skipped, an interrupted one continues from its checkpoint.
NAME is `long-MEMBER-tTOKENSnRECORDSvVOCAB-lrLR-sSEED`.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from experiments.long_rows.members import MEMBERS, recipe


def name(member: str, seed: int, task: tuple[int, int, int], lr: float) -> str:
    return f"long-{member}-t{task[0]}n{task[1]}v{task[2]}-lr{lr:g}-s{seed}"


def one(args: list[str]) -> int:
    """Train and card one run (in this process)."""
    import torch

    from phaseinterp.train.card import make_card, write_card
    from phaseinterp.train.loop import train

    torch.set_num_threads(1)
    member, seed, tokens, records, vocab, lr, steps, out, eval_examples = args
    model_cfg, tcfg = recipe(member, int(seed), seq_len=int(tokens), records=int(records), vocab_size=int(vocab),
                             lr=float(lr))
    if int(steps):
        tcfg = tcfg.replace(steps=int(steps), warmup_steps=min(tcfg.warmup_steps, int(steps)), checkpoint_every=int(steps))
    tcfg = tcfg.replace(checkpoint_every=min(500, tcfg.steps), device="cpu")
    result = train(model_cfg, tcfg, out, resume="latest", progress=False, name=Path(out).name)
    write_card(make_card(result, model_cfg, tcfg, name=Path(out).name, eval_examples=int(eval_examples)),
               Path(out) / "card.json")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--members", nargs="+", required=True, choices=sorted(MEMBERS))
    p.add_argument("--seeds", nargs="+", type=int, default=[0])
    p.add_argument("--task", nargs=3, type=int, metavar=("TOKENS", "RECORDS", "VOCAB"), default=[256, 56, 256])
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--steps", type=int, default=0, help="steps of every run (default: the rule's)")
    p.add_argument("--eval-examples", type=int, default=256)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--out", type=Path, default=Path("runs/long_rows_cpu"))
    p.add_argument("--one", nargs=9, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.one:
        return one(args.one)
    task = tuple(args.task)
    todo = [(m, s) for m in args.members for s in args.seeds if not (args.out / name(m, s, task, args.lr) / "card.json").is_file()]

    def run(job: tuple[str, int]) -> int:
        member, seed = job
        out = args.out / name(member, seed, task, args.lr)
        out.parent.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "experiments.long_rows.train", "--members", member, "--one", member, str(seed),
               *map(str, task), str(args.lr), str(args.steps), str(out), str(args.eval_examples)]
        with open(f"{out}.log", "a") as log:
            code = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT)
        print(f"{'done' if code == 0 else f'FAILED ({code})'}: {out.name}", flush=True)
        return code

    print(f"{len(todo)} runs", flush=True)
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        return int(any(list(pool.map(run, todo))))


if __name__ == "__main__":
    raise SystemExit(main())
