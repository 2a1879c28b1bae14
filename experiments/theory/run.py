"""The idealized model's claims as a result file: docs/paper.md, claim 6 (gradient flow ends in static, one-hot
concentration) and how coverage moves with the unembedding scale beta (heads pushed apart only when retrieval
saturates), from the library's theory experiments (b) and (c) at their defaults.

    python -m experiments.theory.run            # writes assets/results/theory.json (about 2 CPU minutes)

Per seed of (b): whether every head ends one-hot (max gate probability >= 0.9), static (the same position on
>= 90% of held-out chunks) and paired (value one position after its key), its coverage and worst phase's
accuracy. Per beta of (c): mean coverage over the seeds with the references (independent random picks,
Theorem 1's distinct positions) and the shares of one-hot and static seeds. `experiments.claims.claims`
reads the file.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from phaseinterp.measure.outputs import write_atomic

BETAS = [2.0, 3.0, 5.0, 7.0]


def measure(seeds: int, sweep_seeds: int, betas: list[float]) -> dict:
    from phaseinterp.measure.provenance import jsonable, versions
    from phaseinterp.theory import FlowConfig, TheoryConfig, run_seeds, run_sweep

    cfg, flow = TheoryConfig(), FlowConfig()
    b = run_seeds(cfg, flow, list(range(seeds)))
    c = run_sweep(cfg, flow, list(range(sweep_seeds)), grid={"beta": betas})
    per_seed = b.tables["seeds"][["seed", "all_onehot", "all_static", "all_paired", "coverage", "mean_accuracy",
                                  "worst_phase_accuracy"]]
    sweep = c.tables["sweep"].rename(columns={"value": "beta", "random_coverage": "random",
                                              "optimum_coverage": "theorem1"})
    return jsonable({
        "command": "python -m experiments.theory.run",
        "settings": {"theory_config": cfg.to_dict(), "flow_config": flow.to_dict(), "seeds": seeds,
                     "sweep_seeds": sweep_seeds, "betas": betas},
        "summary": b.tables["summary"].to_dict("records")[0],
        "seeds": per_seed.to_dict("records"),
        "sweep": sweep[["beta", "n_seeds", "coverage", "coverage_sem", "random", "theorem1", "onehot_paired_share",
                        "static_share"]].to_dict("records"),
        "versions": versions(),
    })


def write(path: Path, payload: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(payload, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, default=100, help="seeds of experiment (b), the claim-6 evidence")
    p.add_argument("--sweep-seeds", type=int, default=20, help="seeds per beta of experiment (c)")
    p.add_argument("--betas", type=float, nargs="+", default=BETAS)
    p.add_argument("--out", type=Path, default=Path("assets/results/theory.json"))
    args = p.parse_args(argv)
    for name in ("seeds", "sweep_seeds"):
        if getattr(args, name) < 2:
            raise ValueError(f"--{name.replace('_', '-')}={getattr(args, name)} is invalid: allowed an integer >= 2")
    import torch

    torch.set_num_threads(1)
    write(args.out, measure(args.seeds, args.sweep_seeds, args.betas))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
