"""Self-calibrated knockout maps (`calibration="self"`) against maps with a disjoint calibration
batch of the same size, on shipped zoo models: do they name the same owners?

    python -m experiments.self_calibration.run          # writes assets/results/self_calibration.json

Per model: 128 logical examples per residue (mod the zoo table's R), a calibration batch of 128 per
residue from the "calibration" split; the absolute difference between the two maps in pp (mean and
max over cells), the share of self-calibrated cells inside the calibration-batch map's 95% interval,
the owners of each map at a 30 pp threshold and the CPU seconds of each map (the first, with a
calibration batch, includes its calibration forward).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

MODELS = ["zoo-w8s8-kv4-s0", "zoo-w8s8-kv4-s1", "zoo-w4s4-s0", "zoo-full-kv4-s0"]


def compare(name: str, checkpoints: Path, n_per_residue: int) -> dict:
    import phaseinterp
    from phaseinterp.interventions import clear_calibrations, knockout_map
    from phaseinterp.tasks import RecordLookup
    from phaseinterp.train.evaluate import rows_for
    from phaseinterp.train.rule import table_period

    path = checkpoints / f"{name}.safetensors"
    model = phaseinterp.load(path).eval()
    card = json.loads(path.with_suffix(".json").read_text())
    R = table_period(model.cfg.residue_modulus)
    task = RecordLookup(**rows_for(card["data"]["eval_task"], R))
    batch = task.sample(n_per_residue, R, seed=0)
    calib = task.sample(n_per_residue, R, seed=0, split="calibration")
    clear_calibrations()
    t0 = time.process_time()
    split = knockout_map(model, batch, calib)
    t1 = time.process_time()
    own = knockout_map(model, batch, "self")
    t2 = time.process_time()
    diff = np.abs(own.values - split.values)
    return {"modulus": R, "cells": int(diff.size), "mean_abs_pp": float(diff.mean()), "max_abs_pp": float(diff.max()),
            "inside_interval": float(((own.values >= split.lo) & (own.values <= split.hi)).mean()),
            "owners_calibration_batch": split.coverage(30), "owners_self": own.coverage(30),
            "cpu_s_calibration_batch": t1 - t0, "cpu_s_self": t2 - t1}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", nargs="+", default=MODELS)
    p.add_argument("--n-per-residue", type=int, default=128)
    p.add_argument("--checkpoints", type=Path, default=Path("assets/checkpoints/zoo"))
    p.add_argument("--out", type=Path, default=Path("assets/results/self_calibration.json"))
    args = p.parse_args(argv)

    import torch

    from phaseinterp.measure.provenance import versions

    torch.set_num_threads(1)
    rows = {name: compare(name, args.checkpoints, args.n_per_residue) for name in args.models}
    print("| model | mean abs diff (pp) | max abs diff (pp) | cells inside its interval | owners (30 pp) "
          "| CPU s: batch / self |\n|---|---|---|---|---|---|")
    for name, r in rows.items():
        same = "same" if r["owners_calibration_batch"] == r["owners_self"] else "differ"
        print(f"| {name} | {r['mean_abs_pp']:.2f} | {r['max_abs_pp']:.1f} | {100 * r['inside_interval']:.0f}% of "
              f"{r['cells']} | {same} | {r['cpu_s_calibration_batch']:.1f} / {r['cpu_s_self']:.1f} |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"command": "python -m experiments.self_calibration.run", "n_per_residue": args.n_per_residue,
                                    "threshold_pp": 30, "versions": versions(), "models": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
