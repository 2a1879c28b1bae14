"""Render `docs/results.md`, the findings page, from the shipped result files (no number typed by hand).

    python -m experiments.claims.results_md            # rewrite docs/results.md
    python -m experiments.claims.results_md --check    # exit 1 when docs/results.md is stale

Every number on the page is read from a JSON file under `assets/results/` (found through
`phaseinterp.assets`): the periodicity tables, the zoo (and its extra seeds), the mitigation study, NSA and
SmolLM2. Sentences state what the files say (means, intervals, seed counts, test verdicts) and nothing more;
`experiments/claims/test_results_md.py` fails when the committed page differs from a fresh render.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from phaseinterp import assets
from phaseinterp.measure.seeds import estimate_text, median_range_text

#: The result files the page reads, relative to an assets folder.
INPUTS = {
    "prefix": "results/prefix/periodicity.json",
    "insequence": "results/insequence/periodicity.json",
    "zoo": "results/zoo.json",
    "zoo_seeds": "results/zoo-seeds/zoo.json",
    "zoo_members": "results/zoo_members.json",
    "mitigations": "results/mitigations/mitigations.json",
    "nsa": "results/nsa.json",
    "smollm2": "results/smollm2.json",
}
#: Where the page is written in a checkout.
DEFAULT_OUT = Path(__file__).resolve().parents[2] / "docs" / "results.md"


def load_inputs(root: Path | None = None) -> dict[str, dict]:
    """The parsed result files; `root` is an assets folder (default: found by `phaseinterp.assets`)."""
    data = {}
    for key, rel in INPUTS.items():
        path = (Path(root) / rel) if root is not None else assets.find(rel)
        if path is None or not path.is_file():
            where = path if path is not None else rel
            raise FileNotFoundError(f"result file {where} is missing: docs/results.md reads {sorted(INPUTS.values())}; "
                                    f"get them from {assets.SOURCE}")
        data[key] = json.loads(path.read_text())
    return data


def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def pp(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def interval(pair, scale: float = 1.0) -> str:
    if pair is None or pair[0] is None:
        return "-"
    return f"[{pair[0] * scale:.1f}, {pair[1] * scale:.1f}]"


def wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson score interval for k successes in n trials (95% by default)."""
    if n <= 0:
        raise ValueError(f"wilson: n={n} trials: allowed n >= 1")
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return out


def _period_ok(row: dict) -> bool:
    """The permutation test's verdict does not reject period S."""
    return f"consistent with period {row['S']}" in (row.get("verdict") or "")


def periodicity_section(data: dict, protocol: str) -> list[str]:
    summary = data[protocol]["summary"]
    proto = data[protocol]["protocol"]
    lines = [f"### {protocol} padding ({proto['n_per_residue']} examples per residue, residues mod {proto['modulus']})", ""]
    rows = [[r["model"], r["architecture"], r["seed"], pct(r["mean"]), pct(r["worst"]), pp(r["gap_heldout_pp"]),
             f"[{r['gap_lo_pp']:.1f}, {r['gap_hi_pp']:.1f}]", f"{r['p_phase']:.4f}", r["verdict"]] for r in summary]
    lines += table(["model", "architecture", "seed", "mean %", "worst %", "held-out gap pp", "gap interval", "p (phase)",
                    "permutation verdict"], rows)
    return lines + [""]


def zoo_rows(data: dict) -> list[dict]:
    return [dict(r, source="zoo") for r in data["zoo"]["rows"]] + [dict(r, source="zoo-seeds") for r in data["zoo_seeds"]["rows"]]


def zoo_summary(members: list[dict]) -> list[str]:
    """The member table (`zoo_members.json`): one row per member and protocol, across its seeds."""
    out = []
    for m in members:
        lo, hi = m["learned_interval"]
        spread, curve = m["spread"]["all"], m["curves"]["all"]
        out.append([m["member"], m["architecture"], m["S"] or "-", m["protocol"], m["n_seeds"],
                    f"{m['n_learned']} of {m['n_seeds']}", f"[{100 * lo:.0f}, {100 * hi:.0f}]",
                    median_range_text(spread, "mean", 100), median_range_text(spread, "worst", 100),
                    median_range_text(spread, "gap_heldout_pp"), estimate_text(curve, "mean", "mean_interval", 100),
                    estimate_text(curve, "seed_gap_pp", "seed_gap_interval_pp")])
    return table(["member", "architecture", "S", "padding", "seeds", "learned", "learned 95% Wilson %",
                  "mean % median (range)", "worst % median (range)", "held-out gap pp median (range)",
                  "member curve mean % [95% CI]", "seeds' held-out gap pp, average [95% CI]"], out)


def _learned_either(members: list[dict]) -> str:
    """Per member, once: seeds that learned in either protocol, of all its seeds, with the Wilson interval."""
    seen: dict[str, dict] = {}
    for m in members:
        seen.setdefault(m["member"], m["learned_any_protocol"])
    return "; ".join(f"{name} {s['learned']} of {s['seeds']} [{100 * s['interval'][0]:.0f}, {100 * s['interval'][1]:.0f}]%"
                     for name, s in seen.items())


def zoo_section(data: dict) -> list[str]:
    rows = zoo_rows(data)
    runs = {(r["model"]) for r in rows}
    compressed = [r for r in rows if r["learned"] and r["member"] != "full" and r["p_phase"] < 0.05]
    spectral = [r for r in compressed if r.get("dominant_period") == r["S"]]
    perm = [r for r in compressed if _period_ok(r)]
    exceptions = [f"{r['model']} {r['protocol']}" for r in compressed if not _period_ok(r)]
    lines = ["## The zoo: every member trained by the recipe rule", "",
             "Each member is trained by the recipe rule (a function of W, S and the gate kind, `docs/training.md`); "
             "that does not make it a rule for every compressor: which window/stride pairs outside the zoo it trains "
             "is finding B7 of `assets/results/claims.md`.", "",
             f"Source: `assets/results/zoo.json` and `assets/results/zoo-seeds/zoo.json` ({len(runs)} runs, "
             f"{len(rows)} curves: both padding protocols, {data['zoo']['protocol']['n_per_residue']} examples per residue). "
             "\"Learned\" means the best residue reaches 80% on the matched task. Seeds are the unit: the table "
             "(`assets/results/zoo_members.json`, `python -m experiments.zoo.members_table`) summarizes each member "
             "under each padding protocol across its seeds: the share that learned under that protocol with its Wilson "
             "interval, the median and range across seeds (every seed, learned or not), and the member curve (the "
             "seeds' average) with a two-level bootstrap interval, seeds then examples (docs/statistics.md, \"Across "
             "seeds\"); the last column averages each seed's own held-out gap. The intervals of single curves "
             "further down are within one model.", ""]
    lines += zoo_summary(data["zoo_members"]["members"]) + [""]
    lines += ["Seeds that learned in either padding protocol, of all seeds run [95% Wilson interval]: "
              + _learned_either(data["zoo_members"]["members"]) + ".", ""]
    lines += [f"Of the {len(compressed)} curves of learned compressed runs with a phase effect (p < 0.05), "
              f"{len(spectral)} have dominant spectral period S, and the permutation test does not reject period S "
              f"for {len(perm)}; it rejects it for {len(exceptions)}: {', '.join(exceptions) if exceptions else 'none'}.", ""]
    # by architecture: the zoo's full-attention member is named full-kv4 (a filter on "full" once matched nothing)
    across = [m for m in data["zoo_members"]["members"] if m["architecture"] == "full attention"]
    if across:
        lines += ["Full attention across seeds: " + "; ".join(
            f"{m['member']} {m['protocol']} ({m['n_seeds']} seeds) mean {median_range_text(m['spread']['all'], 'mean', 100)}%, held-out gap "
            f"{median_range_text(m['spread']['all'], 'gap_heldout_pp')} pp (median (range))" for m in across)
            + ". A curve at ceiling cannot show a phase effect, so this control cannot fail here; claim 2 of "
              "`assets/results/claims.md` is judged on a harder task (`assets/results/control/`).", ""]
    lines += ["### Every run", ""]
    lines += table(["run", "protocol", "learned", "mean %", "worst %", "held-out gap pp", "gap interval",
                    "dominant period", "permutation verdict"],
                   [[r["model"], r["protocol"], "yes" if r["learned"] else "no", pct(r["mean"]), pct(r["worst"]),
                     pp(r["gap_heldout_pp"]), interval(r.get("gap_ci_pp")), r.get("dominant_period") or "none",
                     r["verdict"]] for r in rows])
    return lines + [""]


def mitigations_section(data: dict) -> list[str]:
    m = data["mitigations"]
    lines = ["## Mitigations at equal budget", "",
             f"Source: `assets/results/mitigations/mitigations.json` (seeds {m['settings']['seeds']}, "
             f"{m['settings']['n_per_residue']} examples per residue). One row per variant, its seeds side by side "
             "(never averaged: a seed that did not learn next to one at ceiling would average to a curve neither has); "
             "the interval is the held-out gap's bootstrap interval.", ""]

    def seeds(variant: str, cell) -> str:
        return "; ".join(cell(r) for r in m["rows"] if r["variant"] == variant)

    lines += table(["variant", "what it is", "seeds", "learned", "mean % per seed", "worst % per seed",
                    "held-out gap pp [interval] per seed"],
                   [[s["variant"], m["variants"].get(s["variant"], ""),
                     seeds(s["variant"], lambda r: str(r["seed"])), f"{s['learned']} of {s['seeds']}",
                     seeds(s["variant"], lambda r: pct(r["mean"])), seeds(s["variant"], lambda r: pct(r["worst"])),
                     seeds(s["variant"], lambda r: f"{pp(r.get('gap_heldout'))} [{pp(r['gap_lo'])}, {pp(r['gap_hi'])}]")]
                    for s in m["summary"]])
    lines += ["", "### Every run", ""]
    lines += table(["variant", "seed", "mean %", "worst %", "gap pp", "gap interval", "p (phase)"],
                   [[r["variant"], r["seed"], pct(r["mean"]), pct(r["worst"]), pp(r["gap_pp"]),
                     f"[{pp(r['gap_lo'])}, {pp(r['gap_hi'])}]", "-" if r["p_phase"] is None else f"{r['p_phase']:.4f}"]
                    for r in m["rows"]])
    return lines + [""]


def nsa_section(data: dict) -> list[str]:
    n = data["nsa"]
    results = n["results"]
    learned = {r["model"] for r in results if any(c["learned"] for c in r["curves"])}
    lines = ["## Native Sparse Attention", "",
             f"Source: `assets/results/nsa.json` ({len(results)} runs, {n['protocol']['n_per_residue']} examples per "
             f"residue; k = selected blocks, 0 = selection off). {len(learned)} of {len(results)} runs learned "
             f"(best residue >= 80% in some protocol): {', '.join(sorted(learned)) or 'none'}.", ""]
    rows = []
    for r in results:
        for c in r["curves"]:
            rows.append([r["model"], r["k"], c["protocol"], "yes" if c["learned"] else "no", pct(c["mean"]),
                         pct(c["worst"]), pct(c["best"]), pp(c["gap_heldout_pp"]), interval(c.get("gap_ci_pp")),
                         c.get("dominant_period") or "none", c["verdict"]])
    lines += table(["run", "k", "protocol", "learned", "mean %", "worst %", "best %", "held-out gap pp",
                    "gap interval", "dominant period", "permutation verdict"], rows)
    return lines + [""]


def smollm2_section(data: dict) -> list[str]:
    s = data["smollm2"]
    lines = ["## SmolLM2-135M with training-free KV compression", "",
             f"Source: `assets/results/smollm2.json` ({s['settings']['prompts']} prompts per residue, length "
             f"{s['settings']['length']}). Induction-copy accuracy; delta is against the uncompressed model. The gap "
             "interval is a bootstrap range of the max-min gap, which is positive even without a phase effect: "
             "read it with the p-value and the verdict, and against the uncompressed rows' gap intervals (sampling "
             "noise alone at these prompt counts). L16 in a setting is the local window of 16 tokens.", ""]
    rows = [[r["setting"], ", ".join(map(str, (r.get("spec") or {}).get("layers") or [])) or "-", r["modulus"],
             pct(r["mean"]), interval(r["mean_ci"], 100), pp(r["delta_pp"]),
             interval(r["delta_ci_pp"]), pp(r.get("gap_pp")), interval(r.get("gap_ci_pp")),
             "-" if r.get("p_phase") is None else f"{r['p_phase']:.4f}", r.get("dominant_period") or "none",
             r.get("verdict", "-")] for r in s["rows"]]
    lines += table(["setting", "compressed layers", "modulus", "mean %", "mean interval", "delta pp", "delta interval", "gap pp",
                    "gap interval", "p (phase)", "dominant period", "verdict"], rows)
    return lines + [""]


def render(data: dict[str, dict] | None = None) -> str:
    """The text of docs/results.md from the parsed result files (`load_inputs()` when None)."""
    data = load_inputs() if data is None else data
    lines = ["# Results", "",
             "<!-- Generated by `python -m experiments.claims.results_md` from assets/results/*.json; do not edit by "
             "hand. experiments/claims/test_results_md.py fails when this page is stale. -->", "",
             "What the shipped result files say, table by table. Accuracies are record-lookup (or, for SmolLM2, "
             "induction-copy) accuracy by the needle's residue; the gap is best minus worst residue, the held-out "
             "gap picks the best and worst residue on one half of the examples and measures them on the other; "
             "p (phase) is the permutation test for any phase effect, and the permutation verdict says whether the "
             "curve is consistent with period S (`docs/statistics.md`). Unless a table says otherwise, every "
             "interval is within one model: seeds vary more than that (see the zoo's per-member table).", "",
             "## Periodicity of the first shipped checkpoints", "",
             "Source: `assets/results/prefix/periodicity.json` and `assets/results/insequence/periodicity.json`.", ""]
    lines += periodicity_section(data, "prefix") + periodicity_section(data, "insequence")
    lines += zoo_section(data) + mitigations_section(data) + nsa_section(data) + smollm2_section(data)
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Render docs/results.md from the shipped result files.")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the page to write (default: docs/results.md)")
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 when the page differs from a fresh render")
    args = p.parse_args(argv)
    text = render()
    if args.check:
        current = args.out.read_text() if args.out.is_file() else None
        if current != text:
            print(f"{args.out} is stale: run `python -m experiments.claims.results_md`", file=sys.stderr)
            return 1
        print(f"{args.out} is up to date")
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"wrote {args.out} ({len(text.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
