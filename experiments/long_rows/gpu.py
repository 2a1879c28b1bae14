"""The long-row experiment in one go on one GPU: calibration, every run of the table and the sweep
(`phaseinterp.train.fleet`), cards, and the per-seed table with both padding protocols.

    python -m experiments.long_rows.gpu --out runs/long_rows_gpu             # on a CUDA machine, minutes
    python -m experiments.long_rows.gpu --out /tmp/lr --device cpu --smoke   # the same path in seconds, on CPU
    bash experiments/long_rows/gpu.sh                                          # on a device machine: wheels, run, pack

Writes OUT/calibration.json (the rule's rows and choice, `calibration.choose`), OUT/runs/NAME (run
folders with card.json), OUT/checkpoints/NAME.{safetensors,json,metrics.jsonl} (shipped runs) and
OUT/results/zoo.{md,json,csv} (one row per seed and protocol, the zoo table's format, which
`python -m experiments.zoo.members_table OUT/results` summarizes across seeds). Runs that did not finish
by the deadline are checkpointed where they stopped and listed in OUT/not_finished.json.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from experiments.long_rows.calibration import CALIBRATION_STEPS, GRID, choose
from experiments.long_rows.members import recipe, run_name, table_runs

SMOKE = {"steps": 4, "batch_size": 4}


def _configs(member: str, seed: int, task: tuple[int, int, int], lr: float, smoke: bool, *, warmup: int = 100,
             steps: int | None = None):
    model_cfg, tcfg = recipe(member, seed, seq_len=task[0], records=task[1], vocab_size=task[2], lr=lr)
    tcfg = tcfg.replace(warmup_steps=warmup, **({} if steps is None else {"steps": steps, "checkpoint_every": steps}))
    if smoke:
        tcfg = tcfg.replace(steps=SMOKE["steps"], batch_size=SMOKE["batch_size"], warmup_steps=1,
                            checkpoint_every=SMOKE["steps"], log_every=2)
    return model_cfg, tcfg.replace(device="auto")


def calibration_name(member: str, task: tuple[int, int, int], lr: float, warmup: int) -> str:
    vocab = "" if task[2] == 256 else f"v{task[2]}"
    return f"long-cal-{member}-t{task[0]}n{task[1]}{vocab}-lr{lr:g}-w{warmup}-s0"


def _fleet(names: list[str], specs: dict[str, tuple], runs_dir: Path, args, deadline_s: float) -> list[str]:
    """Train the runs of `names` that have not reached their last step; returns those that still have not."""
    from phaseinterp.train.fleet import FleetRun, train_fleet
    from phaseinterp.train.state import latest_checkpoint

    done = lambda n: latest_checkpoint(runs_dir / n) is not None and _step(runs_dir / n) == specs[n][1].steps  # noqa: E731
    todo = [n for n in names if not done(n)]  # an unfinished run continues from its checkpoint
    if todo:
        t0 = time.perf_counter()
        results = train_fleet([FleetRun(n, *specs[n], runs_dir / n) for n in todo], device=args.device,
                              workers=args.workers, deadline_s=deadline_s, resume=True)
        wall, steps = time.perf_counter() - t0, sum(r.step for r in results if r is not None)
        print(f"fleet: {len(todo)} runs, {steps} steps in {wall:.0f} s ({steps / wall:.0f} steps/s)", flush=True)
        with open(runs_dir.parent / "timing.jsonl", "a") as f:
            f.write(json.dumps({"runs": len(todo), "steps": steps, "wall_s": round(wall, 1)}) + "\n")
    return [n for n in names if not done(n)]


def graph_check(out: Path, device: str) -> dict[str, Any]:
    """CUDA graphs against eager steps on the same device: one W8/S8 run of 8 steps both ways."""
    import torch

    from phaseinterp.train.fleet import FleetRun, train_fleet

    model_cfg, tcfg = recipe("w8s8", 0, seq_len=256, records=24, lr=1e-3)
    tcfg = tcfg.replace(steps=8, batch_size=8, warmup_steps=2, log_every=2)
    res = {g: train_fleet([FleetRun(f"check-{g}", model_cfg, tcfg, out / f"graph_check_{g}")], device=device, graphs=g,
                          workers=1, report=None)[0] for g in (True, False)}
    diff = max(float((a - b).abs().max()) for a, b in zip(res[True].model.state_dict().values(),
                                                           res[False].model.state_dict().values()))
    check = {"max_weight_diff": diff, "loss_graphs": [m["loss"] for m in res[True].metrics],
             "loss_eager": [m["loss"] for m in res[False].metrics], "torch": torch.__version__,
             "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"}
    (out / "graph_check.json").write_text(json.dumps(check, indent=1) + "\n")
    print(f"graph check: max weight difference {diff:.2e} after 8 steps; losses {check['loss_graphs']} vs "
          f"{check['loss_eager']}", flush=True)
    return check


def probe(out: Path, device: str, n: int = 8, reps: int = 30) -> dict[str, float]:
    """Milliseconds per captured W8/S8 step: one graph alone, `n` graphs on `n` streams side by side,
    the fleet's whole step (staging included), and one graph at 4x the batch (latency or bandwidth?)."""
    import torch

    from phaseinterp.train.data import make_batch
    from phaseinterp.train.fleet import FleetRun, encode_batch, start_run

    def timed(fn) -> float:
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
        return 1000 * (time.perf_counter() - t) / reps

    result = {}
    for batch in (32, 128):
        model_cfg, tcfg = recipe("w8s8", 0, seq_len=256, records=24, lr=1e-3)
        tcfg = tcfg.replace(batch_size=batch, steps=10 ** 6)
        arrays = encode_batch(make_batch(tcfg.mixture, 0, 2000, batch))
        runs = [start_run(FleetRun(f"probe{i}", model_cfg, tcfg, out / "probe" / f"b{batch}-{i}"), torch.device("cuda"), True)
                for i in range(n if batch == 32 else 1)]
        for r in runs:
            for step in range(5):
                r.run_step(step, arrays)

        def replay(rs):
            for r in rs:
                with torch.cuda.stream(r.stream):
                    r.graph.replay()

        result[f"one_graph_b{batch}_ms"] = timed(lambda rs=runs[:1]: replay(rs))
        if batch == 32:
            result[f"{n}_graphs_side_by_side_ms_per_step"] = timed(lambda rs=runs: replay(rs)) / n
            result[f"{n}_fleet_steps_ms_per_step"] = timed(lambda rs=runs, a=arrays: [r.run_step(10, a) for r in rs]) / n
    (out / "probe.json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"probe: {result}", flush=True)
    return result


def _step(run_dir: Path) -> int:
    from phaseinterp.checkpoint import read_metadata
    from phaseinterp.train.state import latest_checkpoint

    return int(read_metadata(latest_checkpoint(run_dir))["extra"]["step"])


def _finish_job(job: tuple) -> list[dict[str, Any]]:
    """Card (evaluated on `device`), shipped files and, with `settings`, the table rows of one run."""
    name, run_dir, ship_dir, (model_cfg, tcfg), device, eval_examples, settings = job
    import torch

    from experiments.zoo.table import training_rows, zoo_row
    from phaseinterp.checkpoint import load
    from phaseinterp.tasks.names import PROTOCOLS
    from phaseinterp.train.card import make_card, ship, write_card
    from phaseinterp.train.loop import TrainResult
    from phaseinterp.train.state import latest_checkpoint

    torch.set_num_threads(1)
    run_dir, ship_dir = Path(run_dir), Path(ship_dir)
    ckpt = latest_checkpoint(run_dir)
    model = load(ckpt).to(device).eval()
    if not (run_dir / "card.json").is_file():
        lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
        result = TrainResult(model=model, run_dir=run_dir, step=_step(run_dir), checkpoint=ckpt,
                             wall_time_s=lines[-1]["elapsed_s"] if lines else 0.0)
        write_card(make_card(result, model_cfg, tcfg, name=name, eval_examples=eval_examples), run_dir / "card.json")
    ship(run_dir, ship_dir, name)
    card = ship_dir / f"{name}.json"
    curve = json.loads(card.read_text())["phase_curve"]
    print(f"  {name}: mean {curve['mean']:.3f} best {curve['best']:.3f} gap {curve['gap_pp']:.1f} pp", flush=True)
    if settings is None:
        return []
    settings = dict(settings)
    summary = training_rows(card, model, n_rows=settings.pop("training_rows"))
    return [{**zoo_row(card, p, model=model, **settings), "training_rows": summary} for p in PROTOCOLS]


def finish(names: list[str], specs: dict[str, tuple], runs_dir: Path, ship_dir: Path, args,
           settings: dict[str, int] | None) -> list[dict[str, Any]]:
    """`_finish_job` for every finished run of `names`, `args.jobs` processes at a time."""
    device = "cuda" if args.device != "cpu" and _cuda() else "cpu"
    jobs = [(n, str(runs_dir / n), str(ship_dir), specs[n], device, args.eval_examples, settings) for n in names
            if (runs_dir / n / "checkpoints").is_dir()]
    if args.jobs <= 1:
        parts = [_finish_job(j) for j in jobs]
    else:
        with multiprocessing.get_context("spawn").Pool(min(args.jobs, max(len(jobs), 1))) as pool:
            parts = pool.map(_finish_job, jobs, chunksize=1)
    return [r for part in parts for r in part]


def write_table(rows: list[dict[str, Any]], ship_dir: Path, out: Path, settings: dict[str, int], command: str,
                not_finished: list[str]) -> None:
    """OUT/zoo.{md,json,csv} in the zoo table's format."""
    import pandas as pd

    from experiments.zoo.table import markdown
    from phaseinterp.measure.provenance import jsonable, versions

    out.mkdir(parents=True, exist_ok=True)
    note = f"Not finished: {', '.join(not_finished)}.\n\n" if not_finished else ""
    (out / "zoo.md").write_text("# Long rows: every arm trained on long rows by one recipe\n\n"
                                f"Reproduce: `{command}`.\n\n" + note + markdown(rows, settings["n_per_residue"], ship_dir.as_posix()))
    (out / "zoo.json").write_text(json.dumps(jsonable({"protocol": settings, "rows": rows, "not_trained": not_finished,
                                                       "versions": versions()}), indent=1) + "\n")
    flat = [{k: v for k, v in r.items() if k not in ("accuracy", "task", "training_rows", "correct")} for r in rows]
    pd.DataFrame(flat).to_csv(out / "zoo.csv", index=False)


def calibrate(args, specs: dict, runs_dir: Path, ship_dir: Path, deadline_s: float) -> dict | None:
    """Train and card the calibration grid; write OUT/calibration.json; the rule's choice (None: unfinished)."""
    specs.update({calibration_name(*g): _configs(g[0], 0, g[1], g[2], args.smoke, warmup=g[3], steps=CALIBRATION_STEPS)
                  for g in GRID})
    names = [calibration_name(*g) for g in GRID]
    unfinished = _fleet(names, specs, runs_dir, args, deadline_s=deadline_s)
    finish(names, specs, runs_dir, ship_dir, args, None)
    rows = []
    for g, name in zip(GRID, names):
        if (runs_dir / name / "card.json").is_file():
            card = json.loads((runs_dir / name / "card.json").read_text())
            curve = card["phase_curve"]
            rows.append({"member": g[0], "task": list(g[1]), "lr": g[2], "warmup": g[3], "steps": card["steps"],
                         "learned": curve["learned"], "mean": curve["mean"], "best": curve["best"],
                         "worst": curve["worst"], "run": name})
    choice = choose(rows) if rows and not unfinished else None
    (args.out / "calibration.json").write_text(json.dumps({"rows": rows, "choice": choice, "unfinished": unfinished,
                                                           "smoke": args.smoke}, indent=1) + "\n")
    return choice


def part_of(runs: list[tuple[str, int]], part: str) -> list[tuple[str, int]]:
    """Runs of part "K/N": the runs dealt round-robin, longest first, so each part costs about the same."""
    k, n = (int(x) for x in part.split("/"))
    if not 1 <= k <= n:
        raise ValueError(f"--part {part} is invalid: allowed K/N with 1 <= K <= N")
    ranked = sorted(runs, key=lambda r: (-recipe(r[0], r[1], records=24, lr=1e-3)[1].steps, r))
    return [r for i, r in enumerate(ranked) if i % n == k - 1]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=Path("runs/long_rows_gpu"))
    p.add_argument("--device", default="auto", help="torch device (default: CUDA when available)")
    p.add_argument("--workers", type=int, help="batch-making processes (default: CPU cores - 1)")
    p.add_argument("--jobs", type=int, default=12, help="table rows evaluated at a time (processes)")
    p.add_argument("--eval-examples", type=int, default=256, help="examples per residue of each card")
    p.add_argument("--n-per-residue", type=int, default=256, help="examples per residue of the table")
    p.add_argument("--n-boot", type=int, default=2000)
    p.add_argument("--n-perm", type=int, default=2000)
    p.add_argument("--budget-s", type=float, default=480.0, help="wall-clock seconds for everything (training stops "
                   "early enough to leave the table its time)")
    p.add_argument("--table-s", type=float, default=100.0, help="seconds kept for the table")
    p.add_argument("--smoke", action="store_true", help=f"tiny runs ({SMOKE}) and a short table: a check of the path")
    p.add_argument("--members", nargs="+", help="only these table members (a partial table; default all)")
    p.add_argument("--part", help="K/N: only the K-th of N equal shares of the table's runs (one GPU session each)")
    p.add_argument("--calibration", type=Path, help="a calibration.json whose rule choice to use (no calibration runs)")
    p.add_argument("--calibrate-only", action="store_true", help="train and card the calibration grid only (all of the "
                   "budget but the table's share), then stop")
    p.add_argument("--probe", action="store_true", help="first time graph replays alone and side by side (probe.json)")
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    left = lambda: args.budget_s - (time.perf_counter() - t0)  # noqa: E731
    runs_dir, ship_dir = args.out / "runs", args.out / "checkpoints"
    runs_dir.mkdir(parents=True, exist_ok=True)
    if _cuda() and args.device != "cpu" and not args.smoke:
        graph_check(args.out, args.device)
        if args.probe:
            probe(args.out, args.device)

    specs: dict[str, tuple] = {}
    if args.calibration is not None:
        choice = json.loads(args.calibration.read_text())["choice"]
    else:
        share = 1.0 if args.calibrate_only else 0.35
        choice = calibrate(args, specs, runs_dir, ship_dir, deadline_s=max(left() - args.table_s, 1) * share)
    if choice is None or args.calibrate_only:
        print(f"calibration {'done' if choice else 'unfinished'}: no table", flush=True)
        return 0 if args.calibrate_only else 1
    task = (choice["seq_len"], choice["records"], choice.get("vocab_size", 256))
    print(f"table: lr {choice['lr']} (warm-up {choice['warmup']}), {task[1]} records in {task[0]}-token rows, "
          f"vocabulary {task[2]} ({choice['notes']})", flush=True)

    wanted = [(m, s) for m, s in table_runs() if args.members is None or m in args.members]
    wanted = part_of(wanted, args.part) if args.part else wanted
    names = [run_name(m, s) for m, s in wanted]
    specs.update({n: _configs(m, s, task, choice["lr"], args.smoke, warmup=choice["warmup"]) for n, (m, s) in zip(names, wanted)})
    for n, (m, s) in zip(names, wanted):  # seed 0 of a calibration run with the same configs is that run
        cal = runs_dir / calibration_name(m, task, choice["lr"], choice["warmup"])
        if s == 0 and specs.get(cal.name, (None, None))[1] == specs[n][1] and cal.is_dir() and not (runs_dir / n).exists():
            shutil.copytree(cal, runs_dir / n)
            (runs_dir / n / "card.json").unlink(missing_ok=True)  # made again under its table name
    unfinished = _fleet(names, specs, runs_dir, args, deadline_s=max(left() - args.table_s, 1))
    (args.out / "not_finished.json").write_text(json.dumps(unfinished) + "\n")
    small = {"n_per_residue": 16, "n_boot": 100, "n_perm": 100} if args.smoke else {}
    settings = {"n_per_residue": args.n_per_residue, "task_seed": 0, "n_boot": args.n_boot, "n_perm": args.n_perm, **small}
    rows = finish([n for n in names if n not in unfinished], specs, runs_dir, ship_dir, args,
                  {**settings, "training_rows": 32 if args.smoke else 1024})
    command = "python -m experiments.long_rows.gpu " + " ".join(sys.argv[1:] if argv is None else argv)
    write_table(rows, ship_dir, args.out / "results", settings, command, unfinished)
    print(f"table: {len(rows)} rows in {time.perf_counter() - t0:.0f} s; not finished: {unfinished}", flush=True)
    return 0


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


if __name__ == "__main__":
    raise SystemExit(main())
