"""The NSA study: phase curves, branch and KV-head knockouts and selection frequencies of every
shipped NSA checkpoint (issue 18; docs/nsa.md).

    python -m experiments.nsa.study       # assets/checkpoints/nsa/*.json -> assets/results/nsa.{md,json}

Per checkpoint, on its card's matched record-lookup task at residues mod R = 16 (two periods of
S = 8; rows lengthened to place every residue):

- phase curve, both padding protocols (`sweep_checkpoint`, as the zoo table: cluster-bootstrap
  intervals for the mean and the gap, permutation tests, dominant period);
- branch knockout (`interventions.nsa_branches.branch_knockout`): zero the compressed, selected or
  sliding branch of a layer at every position, and of the last layer at the query position only;
- KV-head knockout (`interventions.knockout_map` through `NSABackend`: mean replacement at the
  query position, calibration prompts disjoint), the paper's protocol;
- selection frequency (`analysis.nsa_selection.selection_frequency`): how often the blocks holding
  the target key and its value are among the k chosen, per layer, KV head and residue.

Each checkpoint's measurements are cached in `--cache` (default `runs/nsa_study_cache/NAME.json`,
keyed by the checkpoint's digest and the settings), so a rerun after more runs have shipped only
measures the new ones; `--fresh` ignores the cache.

`assets/results/nsa_answer.md`, when present, is the hand-written answer to "does selection
remove the weak phases, and at what k?" and is placed at the top of nsa.md (it cites the tables
this command writes below it).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from phaseinterp.measure.gap import GAP_HEADER, GAP_NOTE, gap_text
from phaseinterp.train.evaluate import rows_for
from experiments.nsa.members import NSA_ZOO, nsa_name
from phaseinterp.measure import dominant_period
from phaseinterp.train.rule import table_period

PROTOCOLS = ("prefix", "insequence")


def _curve_row(card_path: Path, card: dict, protocol: str, modulus: int, n_per_residue: int, n_boot: int, n_perm: int):
    from phaseinterp.train.result import sweep_checkpoint

    curve, task = sweep_checkpoint(card_path.with_suffix(".safetensors"), card, n_per_residue=n_per_residue, task_seed=0,
                                   protocol=protocol, n_boot=n_boot, n_perm=n_perm, modulus=modulus)
    s = curve.summary()
    return {"protocol": protocol, "modulus": modulus, "learned": bool(s["best"] >= 0.8), "mean": s["mean"],
            "mean_ci": list(s["mean_interval"]), "worst": s["worst"], "best": s["best"], "gap_pp": s["gap_pp"],
            "gap_heldout_pp": s["gap_heldout_pp"], "gap_ci_pp": list(s["gap_interval_pp"]),
            "best_residue": s["best_residue"], "worst_residue": s["worst_residue"],
            "p_phase": s["p_value"], "p_periodic": s["p_periodic"], "verdict": s["verdict"],
            "dominant_period": dominant_period(curve.accuracy), "accuracy": [float(a) for a in curve.accuracy], "task": task}


def study_checkpoint(card_path: Path, *, n_per_residue: int, n_interv: int, n_boot: int, n_perm: int) -> dict[str, Any]:
    """Every measurement of one shipped NSA checkpoint (see the module docstring)."""
    import torch

    from phaseinterp.analysis.nsa_selection import selection_frequency
    from phaseinterp.backends import backend_for
    from phaseinterp.checkpoint import load
    from phaseinterp.interventions import knockout_map
    from phaseinterp.interventions.nsa_branches import branch_knockout
    from phaseinterp.tasks import RecordLookup

    card = json.loads(card_path.read_text())
    cfg = card["model_config"]
    modulus = table_period(cfg["compress_stride"])
    card = {**card, "data": {**card["data"], "eval_task": rows_for(card["data"]["eval_task"], modulus)}}
    out: dict[str, Any] = {
        "model": card["name"], "member": card["name"].rsplit("-s", 1)[0].removeprefix("nsa-"), "seed": card["seed"],
        "W": cfg["compress_block"], "S": cfg["compress_stride"], "k": cfg["num_selected"],
        "sliding_window": cfg["sliding_window"], "steps": card["steps"], "cpu_time_s": card.get("cpu_time_s"),
        "final_loss": card["final_metrics"].get("loss"), "n_parameters": card["n_parameters"],
        "curves": [_curve_row(card_path, card, p, modulus, n_per_residue, n_boot, n_perm) for p in PROTOCOLS]}
    model = load(card_path.with_suffix(".safetensors")).eval()
    task = RecordLookup(**{**card["data"]["eval_task"], "protocol": "prefix"})
    batch = task.sample(n_interv, modulus, seed=0)
    calib = task.sample(n_interv // 2, modulus, seed=1, split="calibration")
    last = model.cfg.n_layers - 1
    with torch.no_grad():
        ko_all = branch_knockout(model, batch, n_boot=n_boot, label=card["name"])
        ko_final = branch_knockout(model, batch, layers=[last], positions="final", n_boot=n_boot, label=card["name"])
        ko_kv = knockout_map(backend_for(model), batch, calib, n_boot=n_boot, label=card["name"])
    out["interventions"] = {"n_per_residue": n_interv, "protocol": "prefix", "clean_accuracy": ko_all.clean["accuracy"],
                            "branch_all": _map_dict(ko_all), "branch_final": _map_dict(ko_final), "kv_head": _map_dict(ko_kv)}
    if model.cfg.num_selected:
        out["selection"] = [{key: (v.tolist() if isinstance(v, np.ndarray) else v)
                             for key, v in selection_frequency(model, batch, layer=layer).items()}
                            for layer in range(model.cfg.n_layers)]
    return out


def _map_dict(m) -> dict[str, Any]:
    """The rows of a SpecializationMap as labels -> per-residue values, with the interval bounds."""
    rows = {}
    for i, label in enumerate(m.row_labels()):
        rows[label] = {"pp": m.as_2d()[i].tolist(), "lo": m.as_2d(m.lo)[i].tolist(), "hi": m.as_2d(m.hi)[i].tolist(),
                       "acc_knockout": m.as_2d(m.extras["acc_knockout"])[i].tolist()}
    return {"quantity": m.quantity, "intervention": m.meta["intervention"], "rows": rows}


# ---- markdown ------------------------------------------------------------------------------------

def _pct(xs) -> str:
    return " ".join(f"{100 * x:.0f}" for x in xs)


def _summary_table(results: list[dict]) -> str:
    head = ("| model | W/S | k | seed | padding | steps (CPU s) | learned | mean % [95% CI] | worst % | " + GAP_HEADER + " | "
            "best r | worst r | dominant period | verdict |\n|" + "---|" * 14 + "\n")
    lines = []
    for r in results:
        for c in r["curves"]:
            learned = "yes" if c["learned"] else f"**no** (final loss {r['final_loss']:.2f})"
            cpu = f" ({r['cpu_time_s']:.0f})" if r.get("cpu_time_s") else ""
            lines.append(f"| {r['model']} | {r['W']}/{r['S']} | {r['k']} | {r['seed']} | {c['protocol']} | {r['steps']}{cpu} | "
                         f"{learned} | {100 * c['mean']:.1f} [{100 * c['mean_ci'][0]:.1f}, {100 * c['mean_ci'][1]:.1f}] | "
                         f"{100 * c['worst']:.1f} | {gap_text(c['gap_pp'], c['gap_heldout_pp'], c['gap_ci_pp'])} | "
                         f"{c['best_residue']} | {c['worst_residue']} | "
                         f"{c['dominant_period'] if c['dominant_period'] is not None else 'none'} | {c['verdict']} |")
    return head + "\n".join(lines) + "\n"


def _by_config(results: list[dict]) -> str:
    """Mean over seeds per configuration (prefix padding)."""
    head = "| configuration | seeds | learned | mean % | worst % | gap pp | dominant periods |\n|---|---|---|---|---|---|---|\n"
    lines = []
    for member in NSA_ZOO:
        rows = [r for r in results if r["member"] == member]
        if not rows:
            continue
        cs = [next(c for c in r["curves"] if c["protocol"] == "prefix") for r in rows]
        lines.append(f"| {member} | {', '.join(str(r['seed']) for r in rows)} | {sum(c['learned'] for c in cs)}/{len(cs)} | "
                     f"{np.mean([100 * c['mean'] for c in cs]):.1f} | {np.mean([100 * c['worst'] for c in cs]):.1f} | "
                     f"{np.mean([c['gap_pp'] for c in cs]):.1f} | "
                     f"{', '.join(str(c['dominant_period']) for c in cs)} |")
    return head + "\n".join(lines) + "\n"


def _mechanism_table(results: list[dict]) -> str:
    """Per model: last-layer branch knockouts (mean over residues) and, with selection, how often the
    last layer's chosen blocks include the target key's block (mean, worst residue) against chance
    (k of the blocks visible at the query), and the key-or-value block at the boundary phase S - 1."""
    head = ("| model | k | last layer: zero compress / select / sliding (mean pp) | key block chosen % (mean) | "
            "worst residue (%) | chance % | key-or-value block chosen at r = S-1 (%) |\n|---|---|---|---|---|---|---|\n")
    lines = []
    for r in results:
        rows = r["interventions"]["branch_all"]["rows"]
        last = max(int(label.split(".")[0][1:]) for label in rows)
        ko = " / ".join(f"{np.mean(rows[f'L{last}.{b}']['pp']):+.1f}" for b in ("compress", "select", "sliding"))
        sel = next((s for s in r.get("selection", []) if s["layer"] == last), None)
        if sel is None:
            lines.append(f"| {r['model']} | {r['k']} | {ko} | - | - | - | - |")
            continue
        key = np.asarray(sel["key_block"], dtype=float).mean(0)            # over KV heads -> [residue]
        either = np.asarray(sel["either"], dtype=float).mean(0)
        S = r["S"]
        query = r["curves"][0]["task"]["seq_len"] - 1
        visible = (query + 1) // S - 1                                     # entries with (j + 1) S - 1 < query
        boundary = [x for i, x in enumerate(either) if i % S == S - 1]
        lines.append(f"| {r['model']} | {r['k']} | {ko} | {100 * key.mean():.0f} | r{int(key.argmin())} "
                     f"({100 * key.min():.0f}) | {100 * min(1.0, r['k'] / visible):.0f} | "
                     f"{', '.join(f'{100 * x:.0f}' for x in boundary)} |")
    return head + "\n".join(lines) + "\n"


def _map_table(m: dict, modulus: int) -> str:
    head = "| unit | " + " | ".join(f"r{r}" for r in range(modulus)) + " |\n|" + "---|" * (modulus + 1) + "\n"
    lines = []
    for label, row in m["rows"].items():
        cells = []
        for v, lo, hi in zip(row["pp"], row["lo"], row["hi"]):
            mark = "*" if (lo is not None and hi is not None and (lo > 0 or hi < 0)) else ""
            cells.append(f"{v:+.0f}{mark}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return head + "\n".join(lines) + "\n"


def _selection_table(sel: list[dict]) -> str:
    out = []
    for s in sel:
        R = s["modulus"]
        head = (f"Layer {s['layer']} (k = {s['k']}): % of queries whose chosen blocks include the target key's block / "
                "its value's block, by residue, per KV head\n\n| KV head | which | "
                + " | ".join(f"r{r}" for r in range(R)) + " |\n|" + "---|" * (R + 2) + "\n")
        lines = []
        for h in range(len(s["key_block"])):
            for which in ("key_block", "value_block", "either"):
                lines.append(f"| {h} | {which.replace('_block', '')} | " + " | ".join(
                    f"{100 * x:.0f}" for x in s[which][h]) + " |")
        by_offset = np.asarray(s["by_offset"], dtype=float).mean(0)  # [residue, offset], mean over KV heads
        head2 = ("\nBlock position chosen, relative to the key's block (mean over KV heads, % of queries; a row "
                 "per offset):\n\n| offset | " + " | ".join(f"r{r}" for r in range(R)) + " |\n|" + "---|" * (R + 1) + "\n")
        rows2 = [f"| {o:+d} | " + " | ".join(f"{100 * x:.0f}" for x in by_offset[:, i]) + " |"
                 for i, o in enumerate(s["offsets"]) if by_offset[:, i].max() >= 0.01]
        out.append(head + "\n".join(lines) + "\n" + head2 + "\n".join(rows2) + "\n")
    return "\n".join(out)


def markdown(results: list[dict], args: argparse.Namespace, missing: list[str], answer: str | None) -> str:
    cmd = "python -m experiments.nsa.study" + ("" if args.checkpoints == Path("assets/checkpoints/nsa") else
                                                      f" --checkpoints {args.checkpoints}")
    parts = ["# Phase sensitivity in Native Sparse Attention (issue 18)\n",
             "Models: `native-sparse-attention-pytorch` 0.2.3 `SparseAttention` in our blocks (docs/nsa.md), trained with "
             "our trainer: `python -m experiments.nsa.train` (each run: `phaseinterp.train.train` on `nsa_recipe(NAME, seed=N)`, "
             "run folder runs/nsa/nsa-NAME-sN, shipped to assets/checkpoints/nsa). Every layer: compressed branch W/S, "
             "selection of k blocks of S tokens (k = 0: only the query's own block), sliding window 8 (the matched "
             "task's target record is >= 13 tokens before the query, so it must come through the compressed or selected "
             "branch). Measurements: `" + cmd + "` (this file and nsa.json).\n"]
    if missing:
        parts.append(f"Not trained: {', '.join(missing)}.\n")
    if answer:
        parts.append(answer.strip() + "\n")
    parts += ["## Phase curves\n",
              f"Matched record-lookup task (10 records, 6 demonstrations), {args.n_per_residue} logical examples per "
              "residue, residues mod 16 (two periods of S = 8; rows lengthened to 88 tokens), both padding protocols. "
              "Intervals: logical-example cluster bootstrap; verdict: permutation tests at 5%; dominant period: smallest "
              "period carrying 90% of the curve's spectral power. Learned: best residue >= 80%. " + GAP_NOTE + " Loss curves: "
              "`assets/checkpoints/nsa/NAME.metrics.jsonl`.\n", _summary_table(results),
              "\nMean over seeds (prefix padding):\n\n" + _by_config(results),
              "\nAccuracy (%) by residue r = 0..15:\n\n" + "\n".join(
                  f"- {r['model']} ({c['protocol']}): {_pct(c['accuracy'])}" for r in results for c in r["curves"]) + "\n",
              "## Mechanism at a glance\n",
              "Prefix padding, the knockout / selection batch below. Chance for 'key block chosen': k of the blocks "
              "visible at the query.\n", _mechanism_table(results),
              "## Knockouts\n",
              f"Prefix padding, {args.n_interv} logical examples per residue. Values: absolute accuracy change in "
              "percentage points per residue (`*`: the paired cluster-bootstrap 95% interval excludes 0). Branch knockout "
              "= the branch's output zeroed (before its gate); 'all positions' removes it from the layer, 'query position' "
              "only where the answer is read. KV-head knockout: the paper's protocol (mean over disjoint calibration "
              "prompts, query position, all query heads of the KV head).\n"]
    for r in results:
        iv, R = r["interventions"], r["curves"][0]["modulus"]
        parts.append(f"### {r['model']}\n\nClean accuracy (%): {_pct(iv['clean_accuracy'])}\n\n"
                     "Branches, all positions:\n\n" + _map_table(iv["branch_all"], R)
                     + "\nLast layer's branches, query position only:\n\n" + _map_table(iv["branch_final"], R)
                     + "\nKV heads (mean, query position):\n\n" + _map_table(iv["kv_head"], R)
                     + ("\n" + _selection_table(r["selection"]) if r.get("selection") else ""))
    return "\n".join(parts)


def run(args: argparse.Namespace) -> list[dict]:
    import torch

    from phaseinterp.measure.provenance import jsonable, versions

    torch.set_num_threads(1)
    cards = sorted(args.checkpoints.glob("*.json"))
    if not cards:
        raise ValueError(f"no NSA checkpoint cards (*.json) in {str(args.checkpoints)!r}: train them first "
                         "(python -m experiments.nsa.train)")
    from phaseinterp.checkpoint import read_metadata

    settings = {"n_per_residue": args.n_per_residue, "n_interv": args.n_interv, "n_boot": args.n_boot, "n_perm": args.n_perm}
    results = []
    for card in cards:
        key = {"digest": read_metadata(card.with_suffix(".safetensors")).get("digest"), **settings}
        cached = args.cache / card.name
        if not args.fresh and cached.is_file() and json.loads(cached.read_text()).get("key") == key:
            results.append(json.loads(cached.read_text())["result"])
        else:
            results.append(jsonable(study_checkpoint(card, **settings)))
            args.cache.mkdir(parents=True, exist_ok=True)
            cached.write_text(json.dumps({"key": key, "result": results[-1]}) + "\n")
        c = results[-1]["curves"][0]
        print(f"{results[-1]['model']:20s} mean {c['mean']:.3f} worst {c['worst']:.3f} gap {c['gap_pp']:5.1f} pp "
              f"period {c['dominant_period']}", flush=True)
    order = {nsa_name(m, s): i for i, (m, s) in enumerate((m, s) for s in (0, 1) for m in NSA_ZOO)}
    results.sort(key=lambda r: (list(NSA_ZOO).index(r["member"]) if r["member"] in NSA_ZOO else 99, r["seed"]))
    missing = [n for n in order if not (args.checkpoints / f"{n}.json").is_file()]
    answer_path = args.out / "nsa_answer.md"
    answer = answer_path.read_text() if answer_path.is_file() else None
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "nsa.md").write_text(markdown(results, args, missing, answer))
    payload = {"protocol": {"n_per_residue": args.n_per_residue, "n_interv": args.n_interv, "n_boot": args.n_boot,
                            "n_perm": args.n_perm}, "results": results, "not_trained": missing, "versions": versions()}
    (args.out / "nsa.json").write_text(json.dumps(jsonable(payload), indent=1) + "\n")
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--checkpoints", type=Path, default=Path("assets/checkpoints/nsa"))
    p.add_argument("--out", type=Path, default=Path("assets/results"))
    p.add_argument("--n-per-residue", type=int, default=128, help="logical examples per residue of the phase curves")
    p.add_argument("--n-interv", type=int, default=64, help="logical examples per residue of knockouts and selection")
    p.add_argument("--n-boot", type=int, default=1000)
    p.add_argument("--n-perm", type=int, default=1000)
    p.add_argument("--cache", type=Path, default=Path("runs/nsa_study_cache"), help="per-checkpoint results")
    p.add_argument("--fresh", action="store_true", help="measure every checkpoint again (ignore the cache)")
    run(p.parse_args(argv))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
