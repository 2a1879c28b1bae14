"""`phaseinterp sweep`: accuracy by phase of a model on record lookup, written as JSON, CSV and HTML."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from phaseinterp.tasks import PROTOCOLS, VARIANTS, RecordLookup, default_modulus

if TYPE_CHECKING:
    from phaseinterp.measure import PhaseCurve

DESCRIPTION = """Run the record-lookup phase sweep on a checkpoint, or on a random-weight model
(--preset NAME --seed N), and write DIR/curve.json, DIR/curve.csv and DIR/figure.html."""


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("sweep", help="accuracy by residue (phase) on record lookup",
                              description=DESCRIPTION)
    p.add_argument("checkpoint", nargs="?", help="checkpoint path (or use --preset)")
    p.add_argument("--preset", help="random-weight model of this preset instead of a checkpoint")
    p.add_argument("--seed", type=int, default=0, help="initialization seed for --preset (default 0)")
    p.add_argument("--modulus", type=int, help="residue modulus R (default: lcm of the model's strides)")
    p.add_argument("--stride", type=int, help="period S for the periodicity checks (default: lcm of strides)")
    p.add_argument("--n-per-residue", type=int, default=64, help="logical examples per residue (default 64)")
    p.add_argument("--protocol", choices=PROTOCOLS, default="prefix", help="padding protocol (default prefix)")
    p.add_argument("--task", choices=list(VARIANTS), default="lookup", help="task variant (default lookup)")
    p.add_argument("--n-records", type=int, default=64, help="records per prompt (default 64)")
    p.add_argument("--n-demos", type=int, default=8, help="demonstrations per prompt (default 8)")
    p.add_argument("--seq-len", type=int, help="prompt length (default: the shortest that fits)")
    p.add_argument("--task-seed", type=int, default=0, help="seed of the prompts (default 0)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--n-boot", type=int, default=2000, help="bootstrap replicates (default 2000)")
    p.add_argument("--n-perm", type=int, default=2000, help="permutations per test (default 2000)")
    p.add_argument("--device", help="torch device (default: the model's)")
    p.add_argument("--label", help="curve label (default: checkpoint name or preset)")
    p.add_argument("--out", type=Path, required=True, help="output directory")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(func=run)


def load_model(args: argparse.Namespace) -> torch.nn.Module:
    """The model named by the arguments: `load(CHECKPOINT)`, or a random-weight
    `HookedCompressedTransformer(preset(NAME))` initialized after `torch.manual_seed(seed)`."""
    if (args.checkpoint is None) == (args.preset is None):
        raise ValueError("give a CHECKPOINT path or --preset NAME (exactly one)")
    from phaseinterp import HookedCompressedTransformer, load, preset

    if args.preset is not None:
        torch.manual_seed(args.seed)
        return HookedCompressedTransformer(preset(args.preset)).eval()
    return load(args.checkpoint).eval()


def sweep(args: argparse.Namespace) -> PhaseCurve:
    """Build the model and the batch from the arguments and run the sweep."""
    from phaseinterp.measure import phase_sweep

    model = load_model(args)
    cfg = model.cfg
    if args.modulus is None:
        try:
            modulus = default_modulus(cfg.strides)
        except ValueError:
            raise ValueError("the model has full attention (no strides): give --modulus R") from None
    else:
        modulus = args.modulus
    task = RecordLookup.variant(args.task, vocab_size=cfg.vocab_size, n_records=args.n_records,
                                n_demos=args.n_demos, protocol=args.protocol, seq_len=args.seq_len)
    seq_len = task.geometry(modulus).seq_len
    if seq_len > cfg.n_ctx:
        raise ValueError(f"prompts of {seq_len} tokens exceed the model's n_ctx={cfg.n_ctx}; "
                         "lower --n-records, --n-demos or --modulus")
    batch = task.sample(args.n_per_residue, modulus, seed=args.task_seed)
    source = {"checkpoint": args.checkpoint} if args.checkpoint else {"preset": args.preset, "init_seed": args.seed}
    label = args.label or (Path(args.checkpoint).stem if args.checkpoint else f"{args.preset} (seed {args.seed})")
    return phase_sweep(model, batch, batch_size=args.batch_size, stride=args.stride, device=args.device,
                       progress=not args.no_progress, label=label, n_boot=args.n_boot, n_perm=args.n_perm,
                       seed=args.task_seed, config={"source": source})


def run(args: argparse.Namespace) -> int:
    from phaseinterp.plot import phase_figure, save_html

    try:
        curve = sweep(args)
    except (ValueError, KeyError) as err:
        print(f"phaseinterp sweep: error: {err}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    curve.to_json(args.out / "curve.json")
    curve.to_pandas().to_csv(args.out / "curve.csv", index=False)
    save_html(phase_figure(curve), args.out / "figure.html")
    print(repr(curve))
    print(curve.to_pandas().to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    print(f"wrote {args.out / 'curve.json'}, {args.out / 'curve.csv'}, {args.out / 'figure.html'}")
    return 0
