"""The zoo's members across seeds: one row per member and padding protocol, built from zoo tables.

    python -m experiments.zoo.members_table                      # assets/results + assets/results/zoo-seeds
    python -m experiments.zoo.members_table FOLDER ... --out assets/results
    python -m experiments.zoo.members_table --check              # exit 1 when zoo_members.* is stale

Reads `FOLDER/zoo.json` of every folder given (written by `python -m experiments.zoo.table`, whose rows
carry each seed's per-example correctness) and writes `zoo_members.{md,json}`: per member and protocol,
the seeds, the share that learned with its 95% Wilson interval, the median and range across seeds of the
mean, the worst residue and the held-out gap (over all seeds, and over the seeds that learned), and the
member's mean curve with a two-level bootstrap (seeds, then logical examples; `phaseinterp.measure.seeds`,
docs/statistics.md). No model is run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from phaseinterp.measure import (SeedRun, estimate_text, median_range_text, member_summary, unpack_correct,
                                 wilson_interval)
from phaseinterp.measure.provenance import jsonable, versions
from phaseinterp.tasks.names import PROTOCOLS

FOLDERS = (Path("assets/results"), Path("assets/results/zoo-seeds"))
OUT = Path("assets/results")
#: a recomputed per-seed statistic may differ from its zoo row by float rounding only
TOLERANCE = 1e-9


def load_rows(folders: list[Path], task_seed: int | None = None) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """Every row of `FOLDER/zoo.json` over `folders`, and the sources (path, sha256) they came from;
    `task_seed`: every folder must have been swept with it (the held-out split of each seed uses it)."""
    rows, sources, seen = [], [], {}
    for folder in folders:
        path = folder / "zoo.json"
        if not path.is_file():
            raise FileNotFoundError(f"{str(path)!r} does not exist: give folders written by `python -m experiments.zoo.table`")
        data = path.read_bytes()
        sources.append({"path": path.as_posix(), "sha256": hashlib.sha256(data).hexdigest()})
        table = json.loads(data)
        if task_seed is not None and table.get("protocol", {}).get("task_seed", task_seed) != task_seed:
            raise ValueError(f"{str(path)!r} was swept with task_seed={table['protocol']['task_seed']}, the member table "
                             f"splits examples with seed={task_seed}: allowed one task seed for every folder")
        for r in table["rows"]:
            key = (r["model"], r["protocol"])
            if key in seen:
                raise ValueError(f"{r['model']} ({r['protocol']}) is in both {seen[key]!r} and {str(path)!r}: a seed counts once")
            if "correct" not in r:
                raise ValueError(f"{r['model']} ({r['protocol']}) in {str(path)!r} has no per-example correctness "
                                 "(written before it was kept): rerun `python -m experiments.zoo.table` for that folder")
            seen[key] = str(path)
            rows.append({**r, "source": path.as_posix()})
    return rows, sources


def member_rows(rows: list[dict[str, Any]], *, n_boot: int = 2000, confidence: float = 0.95, seed: int = 0
                ) -> list[dict[str, Any]]:
    """One entry per (member, protocol): identification, the seeds' `MemberSummary.to_dict()`, and the
    share of seeds that learned in either protocol (`learned_any_protocol`)."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in sorted(rows, key=lambda r: (r["member"], PROTOCOLS.index(r["protocol"]), r["seed"])):
        groups.setdefault((r["member"], r["protocol"]), []).append(r)
    out = []
    for (member, protocol), runs in groups.items():
        moduli = sorted({r["modulus"] for r in runs})
        if len(moduli) > 1:
            raise ValueError(f"member {member} ({protocol}): its seeds were swept at residues mod {moduli}: one modulus per member")
        tasks = {json.dumps(r.get("task"), sort_keys=True) for r in runs}
        if len(tasks) > 1:  # e.g. a control folder on a harder task: its seeds are another member's
            raise ValueError(f"member {member} ({protocol}): its seeds were evaluated on {len(tasks)} different tasks "
                             f"({sorted(tasks)}): build one member table per task")
        summary = member_summary([SeedRun(unpack_correct(r["correct"]["bits"], r["correct"]["examples"]), r["learned"],
                                          label=r["model"]) for r in runs], n_boot=n_boot, confidence=confidence, seed=seed)
        for r, s in zip(runs, summary.per_seed):
            _agree(r, s)
        either = {r["seed"] for r in rows if r["member"] == member and r["learned"]}
        seeds = {r["seed"] for r in rows if r["member"] == member}
        first = runs[0]
        out.append({"member": member, "protocol": protocol, "architecture": first["architecture"], "S": first["S"],
                    "kv_heads": first["kv_heads"], "modulus": moduli[0], "seeds": [r["seed"] for r in runs],
                    "models": [r["model"] for r in runs], "sources": sorted({r["source"] for r in runs}),
                    "learned_any_protocol": _share(len(either), len(seeds), confidence),
                    **summary.to_dict()})
    return out


def _share(k: int, n: int, confidence: float) -> dict[str, Any]:
    lo, hi = wilson_interval(np.array([k]), np.array([n]), confidence)
    return {"learned": k, "seeds": n, "interval": [float(lo[0]), float(hi[0])]}


def _agree(row: dict[str, Any], stats: dict[str, Any]) -> None:
    """The unpacked correctness reproduces the row's own statistics (else the row's bits are not its curve's)."""
    if stats["gap_heldout_pp"] is None or row["gap_heldout_pp"] is None:
        keys = ("mean", "worst", "gap_pp")
    else:
        keys = ("mean", "worst", "gap_pp", "gap_heldout_pp")
    bad = [k for k in keys if abs(stats[k] - row[k]) > TOLERANCE]
    if bad or [round(a, 12) for a in row["accuracy"]] != [round(a, 12) for a in _accuracy(row)]:
        raise ValueError(f"{row['model']} ({row['protocol']}): its per-example correctness gives {bad or 'accuracy'} "
                         f"different from the row's: rerun `python -m experiments.zoo.table`")


def _accuracy(row: dict[str, Any]) -> list[float]:
    return unpack_correct(row["correct"]["bits"], row["correct"]["examples"]).mean(0).tolist()


def build(folders: list[Path], *, n_boot: int = 2000, confidence: float = 0.95, seed: int = 0) -> dict[str, Any]:
    """The member table's payload (what `zoo_members.json` holds)."""
    rows, sources = load_rows(folders, task_seed=seed)
    return jsonable({"sources": sources, "settings": {"n_boot": n_boot, "confidence": confidence, "seed": seed},
                     "members": member_rows(rows, n_boot=n_boot, confidence=confidence, seed=seed), "versions": versions()})


def table_lines(members: list[dict[str, Any]], which: str) -> list[str]:
    """The markdown table of `members` over all seeds (`which="all"`) or the seeds that learned ("learned")."""
    head = ["member", "architecture", "padding", "seeds", "learned [95% Wilson]", "mean % median (range)",
            "worst % median (range)", "held-out gap pp median (range)", "member curve: mean % [95% CI]",
            "member curve: held-out gap pp [95% CI]", "seeds' held-out gap pp, average [95% CI]"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for m in members:
        spread, curve = m["spread"][which], m["curves"][which]
        lo, hi = m["learned_interval"]
        used = m["n_seeds"] if which == "all" else m["n_learned"]
        cells = [m["member"], m["architecture"], m["protocol"], f"{used} ({', '.join(map(str, m['seeds']))})" if which == "all"
                 else str(used), f"{m['n_learned']} of {m['n_seeds']} [{100 * lo:.0f}, {100 * hi:.0f}]",
                 median_range_text(spread, "mean", 100), median_range_text(spread, "worst", 100),
                 median_range_text(spread, "gap_heldout_pp", 1), estimate_text(curve, "mean", "mean_interval", 100),
                 estimate_text(curve, "gap_heldout_pp", "gap_interval_pp"), estimate_text(curve, "seed_gap_pp", "seed_gap_interval_pp")]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def markdown(payload: dict[str, Any], command: str) -> str:
    """zoo_members.md: the two tables (all seeds; learned seeds), their legend, and each member curve."""
    s = payload["settings"]
    members = payload["members"]
    curves = [f"- {m['member']} ({m['protocol']}, {m['n_seeds']} seeds): "
              + " ".join(f"{100 * a:.0f}" for a in m["curves"]["all"]["accuracy"]) for m in members]
    return "\n".join([
        "# The zoo's members across seeds", "",
        f"Reproduce: `{command}`. Sources: " + ", ".join(f"`{x['path']}`" for x in payload["sources"]) + ".", "",
        "Seeds are the unit: each row summarizes one member under one padding protocol across its seeds "
        "(`phaseinterp.measure.seeds`, docs/statistics.md, \"Across seeds\"). \"learned\": the seeds whose best residue "
        "reaches 80% under this protocol, with the 95% Wilson interval of that share. Median (range): across seeds of "
        "each seed's mean accuracy, worst residue and held-out gap. The member curve is the average of the seeds' "
        f"curves; its intervals are a {s['n_boot']:,}-replicate two-level bootstrap (seeds with replacement, then "
        "logical examples within each drawn seed; with few seeds the seed level can only reuse the seeds there "
        "are). Its held-out gap picks the best and worst residue of the member curve on one half of every seed's "
        "examples and measures them on the other; seeds whose weak phases differ flatten it, so the last column "
        "averages each seed's own held-out gap. A seed that did not learn is in the first table, never dropped; "
        "the second table uses the seeds that learned only.", "",
        "## All seeds", "", *table_lines(members, "all"), "",
        "## Seeds that learned", "", *table_lines(members, "learned"), "",
        "## Member curves (all seeds), accuracy % by residue r = 0..R-1", "", *curves, ""])


def write(payload: dict[str, Any], out: Path, command: str) -> None:
    """zoo_members.json and zoo_members.md in `out`, each written atomically."""
    out.mkdir(parents=True, exist_ok=True)
    for name, text in (("zoo_members.json", json.dumps(payload, indent=1) + "\n"), ("zoo_members.md", markdown(payload, command))):
        tmp = out / f".{name}.tmp"
        tmp.write_text(text)
        tmp.replace(out / name)


def stale(payload: dict[str, Any], out: Path, command: str) -> list[str]:
    """The files in `out` that differ from `payload` (versions aside: they name this machine's libraries)."""
    bad = []
    path = out / "zoo_members.json"
    old = json.loads(path.read_text()) if path.is_file() else None
    if old is None or {**old, "versions": None} != {**payload, "versions": None}:
        bad.append(str(path))
    md = out / "zoo_members.md"
    if not md.is_file() or md.read_text() != markdown(payload, command):
        bad.append(str(md))
    return bad


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("folders", nargs="*", type=Path, default=list(FOLDERS), help="zoo table folders (default: "
                   + " ".join(map(str, FOLDERS)) + ")")
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--n-boot", type=int, default=2000)
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 when the files in OUT are stale")
    args = p.parse_args(argv)
    # the folders and settings in full, however they were given: --check compares the same line
    command = " ".join(["python -m experiments.zoo.members_table", *(f.as_posix() for f in args.folders), "--out",
                        args.out.as_posix(), *([] if args.n_boot == 2000 else ["--n-boot", str(args.n_boot)])])
    payload = build(args.folders, n_boot=args.n_boot)
    if args.check:
        bad = stale(payload, args.out, command)
        if bad:
            print(f"stale: {', '.join(bad)}: run `{command}`", file=sys.stderr)
            return 1
        print(f"{args.out}/zoo_members.{{md,json}} are up to date")
        return 0
    write(payload, args.out, command)
    print(f"wrote {args.out}/zoo_members.md and zoo_members.json ({len(payload['members'])} rows)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
