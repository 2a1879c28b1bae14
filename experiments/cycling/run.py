"""Gate cycling across the zoo (claim 5): every learned zoo run, every delta 1..S-1, all compressed
layers together and each alone, gates only (the paper's variant) and gates with payload maps.

    python -m experiments.cycling.run          # assets/results/cycling.{json,md}, docs/cycling.md's numbers

The json records its inputs (each checkpoint's sha256, the zoo tables' verdicts as run statuses),
the settings and the versions; cycling.md and the numbers block of docs/cycling.md are rendered
from it (`experiments.cycling.render`), and `test_cycling.py` fails when either is stale.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from experiments.cycling.members import PROTOCOL, SOURCES, sha256, zoo_runs
from phaseinterp.measure.outputs import write_atomic
from phaseinterp.measure.provenance import jsonable

COMMAND = "python -m experiments.cycling.run"
ROOT = Path(__file__).resolve().parents[2]


def write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, text)


def study(root: Path, *, n_all: int, n_layer: int, n_boot: int, task_seed: int, only: list[str] | None = None,
          previous: dict[str, Any] | None = None) -> dict[str, Any]:
    """The result record: every zoo run with its status, and the cycling results of those cycled.
    A record of `previous` (an earlier result with the same settings) is kept when its run has the same
    status and, if cycled, the same weights (sha256), so new seeds are added without cycling the rest again."""
    from phaseinterp.measure.provenance import versions

    from experiments.cycling.measure import cycle_run

    runs = zoo_runs(root)
    if only:
        unknown = sorted(set(only) - {r.name for r in runs})
        if unknown:
            raise ValueError(f"--runs {unknown}: no such zoo run; allowed {[r.name for r in runs]}")
        runs = [r for r in runs if r.name in only]
    settings = {"n_per_residue_all_layers": n_all, "n_per_residue_each_layer": n_layer, "n_boot": n_boot,
                "task_seed": task_seed}
    kept = {r["name"]: r for r in previous["runs"]} if previous and previous.get("settings") == settings else {}
    records, t_all = [], time.process_time()
    for run in runs:
        old = kept.get(run.name)
        if old is not None and old["status"] == run.status and (run.status != "cycled" or old["sha256"] == sha256(run.path)):
            records.append(old)
            continue
        rec = {"name": run.name, "member": run.member, "seed": run.seed, "architecture": run.architecture,
               "rope": run.rope, "status": run.status, "checkpoint": run.path.relative_to(root).as_posix()}
        if run.status == "cycled":
            t0 = time.process_time()
            rec["sha256"] = sha256(run.path)
            rec["result"] = cycle_run(run.path, n_all=n_all, n_layer=n_layer, n_boot=n_boot, task_seed=task_seed,
                                      protocol=PROTOCOL)
            rec["cpu_s"] = time.process_time() - t0
            print(f"{run.name:24s} S={rec['result']['stride']:2d} {rec['cpu_s']:6.1f} CPU s", flush=True)
        records.append(rec)
    return jsonable({"command": COMMAND, "protocol": PROTOCOL, "sources": [list(s) for s in SOURCES],
                     "settings": settings, "runs": records, "cpu_s": time.process_time() - t_all, "versions": versions()})


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n-all", type=int, default=32, help="logical examples per residue, all layers cycled")
    p.add_argument("--n-layer", type=int, default=16, help="logical examples per residue, each layer alone")
    p.add_argument("--n-boot", type=int, default=500)
    p.add_argument("--task-seed", type=int, default=0)
    p.add_argument("--runs", nargs="+", help="cycle only these zoo runs (card names)")
    p.add_argument("--root", type=Path, default=ROOT, help="repository root holding the checkpoints and zoo tables")
    p.add_argument("--out", type=Path, default=None, help="result folder (default ROOT/assets/results)")
    p.add_argument("--docs", type=Path, default=None, help="docs page whose numbers block is rewritten "
                   "(default ROOT/docs/cycling.md; 'none' to skip)")
    p.add_argument("--fresh", action="store_true", help="cycle every run again (default: keep the records of OUT/cycling.json "
                   "whose run kept its status and weights, when its settings are these)")
    p.add_argument("--render-only", action="store_true", help="re-render cycling.md and the docs block from cycling.json")
    args = p.parse_args(argv)

    import torch

    torch.set_num_threads(1)
    for name in ("n_all", "n_layer", "n_boot"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')}={getattr(args, name)} is invalid: allowed >= 1")
    out = args.out or args.root / "assets" / "results"
    from experiments.cycling.render import docs_page, markdown, summary

    if args.render_only:
        data = json.loads((out / "cycling.json").read_text())
    else:
        previous = None if args.fresh or not (out / "cycling.json").is_file() else json.loads((out / "cycling.json").read_text())
        data = study(args.root, n_all=args.n_all, n_layer=args.n_layer, n_boot=args.n_boot, task_seed=args.task_seed,
                     only=args.runs, previous=previous)
    data["summary"] = jsonable(summary(data))
    write_atomically(out / "cycling.json", json.dumps(data, indent=1) + "\n")

    md = markdown(data)
    write_atomically(out / "cycling.md", md)
    docs = args.docs or args.root / "docs" / "cycling.md"
    if str(docs) != "none" and docs.is_file():
        write_atomically(docs, docs_page(docs.read_text(), data))
    print(md.split("\n\n")[1] if "\n\n" in md else md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
