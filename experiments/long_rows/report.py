"""The long-row experiment's result page, rendered from its files: the calibration (cards of every
calibration run, the rule's choice recomputed from them), the first pass, the GPU measurements, and
what the table still needs.

    python -m experiments.long_rows.report            # -> assets/results/long_rows/{calibration.json, README.md}
    python -m experiments.long_rows.report --check    # exit 1 when those files are stale
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from experiments.long_rows.calibration import HIGH, LOW, TASKS, choose

RESULTS = Path("assets/results/long_rows")
CARDS = Path("assets/checkpoints/long_rows_calibration")


def calibration_rows(cards: Path = CARDS) -> list[dict[str, Any]]:
    """One row per calibration card: its member, task, optimizer setting and matched-task curve."""
    rows = []
    for path in sorted(cards.glob("long-cal-*.json")):
        if path.name.endswith(".metrics.jsonl"):
            continue
        card = json.loads(path.read_text())
        mix, tc, curve = card["train_config"]["mixture"], card["train_config"], card["phase_curve"]
        rows.append({"run": card["name"], "member": card["name"].removeprefix("long-cal-").split("-t")[0],
                     "task": [mix["seq_len"], mix["max_records"], mix["vocab_size"]], "lr": tc["lr"],
                     "warmup": tc["warmup_steps"], "steps": card["steps"], "learned": curve["learned"],
                     "mean": curve["mean"], "worst": curve["worst"], "best": curve["best"], "gap_pp": curve["gap_pp"],
                     "accuracy": curve["accuracy"], "modulus": curve["task"]["modulus"],
                     "weights_shipped": path.with_suffix(".safetensors").is_file()})
    return rows


def first_pass(folder: Path) -> list[dict[str, Any]]:
    """The first pass's runs: training-row query accuracy at the step its deadline stopped them."""
    out = []
    for path in sorted(folder.glob("long-cal-*.metrics.jsonl")):
        lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
        name = path.name.removesuffix(".metrics.jsonl")
        out.append({"run": name, "step": lines[-1]["step"], "query_acc": lines[-1]["acc"],
                    "acc_by_step": {str(x["step"]): round(x["acc"], 3) for x in lines[9::10]}})
    return out


def build(results: Path = RESULTS, cards: Path = CARDS) -> dict[str, Any]:
    rows = calibration_rows(cards)
    read = lambda name: json.loads((results / name).read_text())  # noqa: E731
    timing = [json.loads(x) for x in (results / "timing.jsonl").read_text().splitlines() if x.strip()]
    return {"rows": rows, "choice": choose(rows), "first_pass": first_pass(results / "first_pass"),
            "probe": read("probe.json"), "graph_check": read("graph_check.json"), "timing": timing,
            "gpu": (results / "gpu.txt").read_text().strip()}


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def markdown(data: dict[str, Any]) -> str:
    c, probe, g = data["choice"], data["probe"], data["graph_check"]
    t = data["timing"][-1]
    lines = [
        "# Long rows: calibration of the one recipe (issue 41)",
        "",
        "Rendered by `python -m experiments.long_rows.report` from the calibration cards "
        f"(`{CARDS.as_posix()}/`) and the GPU files beside this page. The rule (`experiments/long_rows/calibration.py`) "
        "was stated before the runs.",
        "",
        f"Trained on one {data['gpu'].split(',')[0]} by `bash experiments/long_rows/gpu.sh --calibrate-only --probe` "
        f"(`phaseinterp.train.fleet`: {t['runs']} runs, {t['steps']:,} steps in {t['wall_s']:.0f} s). CUDA graphs against "
        f"eager steps on the same GPU: largest weight difference {g['max_weight_diff']:.1e} after 8 steps.",
        "",
        "## The calibration runs (seed 0, matched task, prefix padding, 256 examples per residue)",
        "",
        "| member | row tokens x records (vocabulary) | lr | warm-up | steps | learned | mean % | worst % | best % | gap pp |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(data["rows"], key=lambda r: (r["lr"], r["warmup"], r["task"], r["member"])):
        lines.append(f"| {r['member']} | {r['task'][0]} x {r['task'][1]} ({r['task'][2]}) | {r['lr']:g} | {r['warmup']} | {r['steps']} | "
                     f"{'yes' if r['learned'] else '**no**'} | {_pct(r['mean'])} | {_pct(r['worst'])} | {_pct(r['best'])} | "
                     f"{r['gap_pp']:.1f} |")
    shares = ", ".join(f"{k}: {v:.0%}" for k, v in c["learned_share"].items())
    means = ", ".join(f"{k}: {_pct(v)}%" for k, v in c["control_mean_by_task"].items())
    lines += [
        "",
        "## The rule's choice",
        "",
        f"- Share of runs that learned, by setting: {shares}. Chosen: lr {c['lr']:g}, warm-up {c['warmup']}.",
        f"- Full attention's mean by task at that setting: {means}. Chosen: {c['records']} records in "
        f"{c['seq_len']}-token rows, vocabulary {c['vocab_size']}.",
        f"- Control within [{LOW:.0%}, {HIGH:.0%}]: **{'yes' if c['control_in_range'] else 'no'}**."
        + (" " + " ".join(n[0].upper() + n[1:] + "." for n in c["notes"]) if c["notes"] else ""),
        "",
    ]
    if not c["control_in_range"]:
        missing = [t for t in TASKS if f"{t[0]}x{t[1]}v{t[2]}" not in c["control_mean_by_task"]]
        lines += ["Full attention solves every task it learned so far, so on them the control could not fail: no table "
                  "is built on them."
                  + (" Still to train: " + ", ".join(f"{t[1]} records in {t[0]}-token rows, vocabulary {t[2]} "
                                                     f"(`python -m experiments.long_rows.train --members full w8s8 --task "
                                                     f"{t[0]} {t[1]} {t[2]}`)" for t in missing) + "." if missing else ""), ""]
    lines += [
        "## First pass (5,000-step grid stopped by its deadline; training-row query accuracy at the last step)",
        "",
        "| run | step | query accuracy |",
        "|---|---|---|",
        *[f"| {r['run']} | {r['step']} | {_pct(r['query_acc'])}% |" for r in data["first_pass"]],
        "",
        "## GPU throughput (`probe.json`: one W8/S8 step of 32 rows of 256 tokens, CUDA graph replay)",
        "",
        f"- one graph alone: {probe['one_graph_b32_ms']:.2f} ms per step; at 128 rows: {probe['one_graph_b128_ms']:.2f} ms",
        f"- 8 graphs on 8 streams side by side: {probe['8_graphs_side_by_side_ms_per_step']:.2f} ms per step; the "
        f"fleet's whole step (batch staging included): {probe['8_fleet_steps_ms_per_step']:.2f} ms",
        f"- the calibration fleet: {t['steps'] / t['wall_s']:.0f} steps per second over {t['runs']} runs",
        "",
    ]
    return "\n".join(lines)


def write(data: dict[str, Any], results: Path = RESULTS) -> None:
    (results / "calibration.json").write_text(json.dumps(data, indent=1) + "\n")
    (results / "README.md").write_text(markdown(data))


def stale(data: dict[str, Any], results: Path = RESULTS) -> list[str]:
    want = {"calibration.json": json.dumps(data, indent=1) + "\n", "README.md": markdown(data)}
    return [n for n, text in want.items() if not (results / n).is_file() or (results / n).read_text() != text]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--check", action="store_true", help="exit 1 when the rendered files are stale")
    args = p.parse_args(argv)
    data = build()
    if args.check:
        bad = stale(data)
        print(f"stale: {bad}; run `python -m experiments.long_rows.report`" if bad else "fresh")
        return int(bool(bad))
    write(data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
