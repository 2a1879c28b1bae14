"""The mitigation study: train every mitigation variant at equal budget and seeds, then write the
table (mean, worst phase, gap, periodicity p-value, cache entries per token, training CPU time), the
figure (worst-phase accuracy against KV memory) and knockout maps of the best mitigation next to
the baseline.

    python -m experiments.mitigations.run --out assets/results/mitigations --jobs 2   # all variants, seeds 0 and 1 (~35 min, 2 cores)
    python -m experiments.mitigations.run --quick --out /tmp/m                         # 30 steps per run: checks the pipeline only
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from experiments.mitigations.experiment import Settings
from experiments.mitigations.experiment import run as run_experiment
from experiments.mitigations.outputs import knockout_comparison, write_outputs
from experiments.mitigations.variants import VARIANTS


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, help="output folder (runs are resumed from it)")
    p.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS),
                   help="variants to run (default: all)")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1], help="training seeds (default 0 1)")
    p.add_argument("--steps", type=int, help="training steps per run (default: the recipe's 2000)")
    p.add_argument("--n-per-residue", type=int, default=256, help="evaluation examples per residue (default 256)")
    p.add_argument("--n-boot", type=int, default=1000, help="bootstrap replicates (default 1000)")
    p.add_argument("--jobs", type=int, default=1, help="runs trained in parallel, one core each (default 1)")
    p.add_argument("--no-reuse-shipped", action="store_true",
                   help="retrain runs whose recipe and seed match a shipped checkpoint")
    p.add_argument("--no-knockout", action="store_true", help="skip the knockout maps")
    p.add_argument("--quick", action="store_true", help="30 steps, 16 examples per residue, 200 replicates")
    p.add_argument("--png", action="store_true", help="also write PNG figures (needs kaleido and a browser)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    quick = dict(steps=30, n_per_residue=16, n_boot=200, n_perm=200) if args.quick else {}
    try:
        settings = Settings(seeds=tuple(args.seeds), steps=quick.get("steps", args.steps),
                            n_per_residue=quick.get("n_per_residue", args.n_per_residue),
                            n_boot=quick.get("n_boot", args.n_boot), n_perm=quick.get("n_perm", args.n_boot),
                            reuse_shipped=not args.no_reuse_shipped)
        result = run_experiment(args.out, args.variants, settings, jobs=args.jobs)
        maps = None
        if not args.no_knockout and result["best"] is not None and "baseline" in args.variants:
            maps = knockout_comparison(result["rows"], result["best"], n_per_residue=settings.n_per_residue,
                                       seed=settings.task_seed)
    except ValueError as err:
        print(f"experiments.mitigations.run: error: {err}", file=sys.stderr)
        return 2
    written = write_outputs(args.out, result, settings, maps, png=args.png)
    print(result["summary"].to_string(index=False, float_format=lambda x: f"{x:.3g}"))
    if result["best"] is not None:
        print(f"best mitigation (highest worst-phase accuracy, mean over seeds): {result['best']}")
    print("wrote " + ", ".join(str(p) for p in written))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
