"""The long-row table beside the paper's controlled table: every arm across its seeds (share learned
with a Wilson interval; median and range over seeds of mean, worst residue and held-out gap), and the
rule-generalization sweep on long rows.

    python -m experiments.long_rows.table assets/results/long_rows/part-1 ... --out assets/results/long_rows
    python -m experiments.long_rows.table ... --check        # exit 1 when table.{md,json} are stale

Reads each folder's zoo.json (written by `gpu.py`, one row per seed and protocol, with per-example
correctness) through the zoo's member table (`experiments.zoo.members_table.build`); the paper's
numbers come from `paper_table.json` (docs/paper.md: what it reports). Arms with no runs yet are listed as such.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from experiments.long_rows.members import ARMS, SEEDS, SWEEP, SWEEP_SEEDS
from experiments.zoo.members_table import build

PAPER = Path(__file__).with_name("paper_table.json")


def _median_range(spread: dict[str, Any], key: str, scale: float) -> str:
    if not spread.get("n") or spread["median"].get(key) is None:
        return "n/a"
    return f"{scale * spread['median'][key]:.1f} ({scale * spread['low'][key]:.1f} to {scale * spread['high'][key]:.1f})"


def rows(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per arm or sweep pair and protocol, member names without the `long-` prefix."""
    out = []
    for m in payload["members"]:
        spread = m["spread"]["all"]
        out.append({"member": m["member"].removeprefix("long-"), "protocol": m["protocol"], "seeds": m["seeds"],
                    "learned": m["n_learned"], "n": m["n_seeds"], "learned_interval": m["learned_interval"],
                    "mean": _median_range(spread, "mean", 100), "worst": _median_range(spread, "worst", 100),
                    "gap": _median_range(spread, "gap_heldout_pp", 1)})
    return out


def markdown(table: list[dict[str, Any]], command: str) -> str:
    paper = json.loads(PAPER.read_text())
    by = {(r["member"], r["protocol"]): r for r in table}
    lines = ["# Long rows: the table beside the paper's", "", f"Reproduce: `{command}`.", "",
             f"Paper: {paper['source']}. Ours: every arm trained on long rows by one recipe "
             "(`experiments/long_rows/README.md`), seeds as the unit: learned = best residue >= 80% on the matched task "
             "(95% Wilson interval of the share); mean, worst residue and held-out gap as median (range) over all seeds, "
             "learned or not.", ""]
    for protocol in ("prefix", "insequence"):
        lines += [f"## Arms ({protocol} padding)", "",
                  "| arm | paper: mean / worst / gap | seeds | learned [95% Wilson] | mean % | worst % | held-out gap pp |",
                  "|---|---|---|---|---|---|---|"]
        for arm in ARMS:
            p = next((r for r in paper["rows"] if r["member"] == arm), None)
            ref = f"{p['mean']} / {p['worst']} / {p['gap_pp']} ({p['paper']})" if p else ""
            r = by.get((arm, protocol))
            if r is None:
                lines.append(f"| {arm} | {ref} | not trained yet ({len(SEEDS)} seeds planned) | | | | |")
                continue
            lo, hi = r["learned_interval"]
            lines.append(f"| {arm} | {ref} | {len(r['seeds'])} | {r['learned']} of {r['n']} [{100 * lo:.0f}, {100 * hi:.0f}] | "
                         f"{r['mean']} | {r['worst']} | {r['gap']} |")
        lines.append("")
    lines += ["## The rule's generalization sweep on long rows (prefix padding)", "",
              "| pair | seeds | learned [95% Wilson] | mean % | held-out gap pp |", "|---|---|---|---|---|"]
    for pair in SWEEP:
        r = by.get((pair, "prefix"))
        if r is None:
            lines.append(f"| {pair} | not trained yet ({len(SWEEP_SEEDS)} seeds planned) | | | |")
            continue
        lo, hi = r["learned_interval"]
        lines.append(f"| {pair} | {len(r['seeds'])} | {r['learned']} of {r['n']} [{100 * lo:.0f}, {100 * hi:.0f}] | "
                     f"{r['mean']} | {r['gap']} |")
    notes = [f"- {r['paper']}: {r['note']}" for r in paper["rows"] if r.get("note")]
    return "\n".join(lines + ["", "Notes on the pairing with the paper's rows:", *notes, ""])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("folders", nargs="+", type=Path, help="folders holding a zoo.json of long-row runs")
    p.add_argument("--out", type=Path, default=Path("assets/results/long_rows"))
    p.add_argument("--n-boot", type=int, default=2000)
    p.add_argument("--check", action="store_true")
    args = p.parse_args(argv)
    command = " ".join(["python -m experiments.long_rows.table", *(f.as_posix() for f in args.folders), "--out",
                        args.out.as_posix()])
    table = rows(build(args.folders, n_boot=args.n_boot))
    text, data = markdown(table, command), json.dumps({"rows": table}, indent=1) + "\n"
    if args.check:
        bad = [n for n, t in (("table.md", text), ("table.json", data))
               if not (args.out / n).is_file() or (args.out / n).read_text() != t]
        print(f"stale: {bad}" if bad else "fresh", file=sys.stderr if bad else sys.stdout)
        return int(bool(bad))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "table.md").write_text(text)
    (args.out / "table.json").write_text(data)
    print(f"wrote {args.out}/table.md ({len(table)} rows)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
