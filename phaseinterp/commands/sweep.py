"""`phaseinterp sweep`: accuracy by phase of a model on record lookup, written as JSON, CSV and HTML."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from phaseinterp.commands._common import Request, add_guard_args, add_model_args, add_period_arg, add_task_args, write_csv
from phaseinterp.commands._common import load_source as load_model  # the loader (tests stand a model in for it)

if TYPE_CHECKING:
    from phaseinterp.measure import PhaseCurve

DESCRIPTION = """Run the record-lookup phase sweep on a checkpoint, or on a random-weight model
(--preset NAME --seed N), and write DIR/curve.json, DIR/curve.csv and DIR/figure.html."""


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("sweep", help="phase sweep: accuracy per residue with intervals",
                              description=DESCRIPTION)
    add_model_args(p)
    add_task_args(p, n_per_residue=64)
    add_period_arg(p, "period P for the periodicity checks (default: the model's, lcm of its strides)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--n-perm", type=int, default=2000, help="permutations per test (default 2000)")
    p.add_argument("--label", help="curve label (default: checkpoint name or preset)")
    p.add_argument("--out", type=Path, required=True, help="output directory")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    add_guard_args(p, result="curve.json", resume=True)
    p.set_defaults(func=run)


def sweep(args: argparse.Namespace) -> PhaseCurve:
    """Build the model and the batch from the arguments (task defaults from the checkpoint's card,
    when it has one) and run the sweep."""
    from phaseinterp.measure import phase_sweep

    request = Request.build(args, load_model)
    batch = request.sample(args.n_per_residue)
    return phase_sweep(request.model, batch, batch_size=args.batch_size, period=args.period, device=args.device,
                       progress=not args.no_progress, label=args.label or request.label, n_boot=args.n_boot,
                       n_perm=args.n_perm, seed=args.task_seed, config={"source": request.source()},
                       resume=request.journal_for("sweep"))


def run(args: argparse.Namespace) -> int:
    from phaseinterp.plot import phase_figure, save_html

    curve = sweep(args)  # errors: one line through the CLI boundary (phaseinterp/cli.py)
    args.out.mkdir(parents=True, exist_ok=True)
    write_csv(curve.to_pandas(), args.out / "curve.csv")
    save_html(phase_figure(curve), args.out / "figure.html")
    curve.to_json(args.out / "curve.json")  # last: the folder is finished once it exists
    print(repr(curve))
    print(curve.to_pandas().to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    print(f"wrote {args.out / 'curve.json'}, {args.out / 'curve.csv'}, {args.out / 'figure.html'}")
    return 0
