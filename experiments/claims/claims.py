"""Render `assets/results/claims.md`: the paper's six claims (docs/paper.md) and the findings beyond it, judged from the result files.

    python -m experiments.claims.claims            # rewrite claims.md, README.md's claims block, docs/training.md's sweep
    python -m experiments.claims.claims --check    # exit 1 when any of them is stale

Each claim carries its verdict and the rule that decides it, what it counts (seeds: "k of n seeds"), the evidence
rows (result file, run, protocol), the seeds behind it, both tests (spectral: `dominant_period`; permutation:
`p_phase`, `p_periodic`, verdict; adjusted across the family the claim pools, `claim_units`) and its exceptions
by name. A claim whose evidence is not in the files says "no result file" and is not a pass.
Optional inputs (the control on a harder task, the paper's variants, the rule's sweep, the member table across
seeds, gate cycling, the theory) are read when present. README.md quotes the verdict table between the markers
`<!-- claims:begin -->` and `<!-- claims:end -->`, docs/training.md the rule's sweep (B7) between
`<!-- rule-sweep:begin -->` and `<!-- rule-sweep:end -->` and the sentences of `claim_docs.BLOCKS` between their
own markers; `experiments/claims/test_claims.py` fails when any of these texts differs from a fresh render.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from phaseinterp import assets
from phaseinterp.measure.outputs import write_atomic
from experiments.claims import claim_checks as checks
from experiments.claims import claim_docs as docs
from experiments.claims import claim_findings as findings
from experiments.claims import claim_prose as prose
from experiments.claims import claim_sweeps as sweeps
from experiments.claims.claim_rows import evidence_table, interval, table

#: Result files the claims read, relative to an assets folder; a missing one makes its claims say "no result file".
INPUTS = {
    "zoo": "results/zoo.json",
    "zoo_seeds": "results/zoo-seeds/zoo.json",
    "control": "results/control/zoo.json",
    "variants": "results/variants/zoo.json",
    "rule_sweep": "results/rule-sweep/zoo.json",
    "zoo_members": "results/zoo_members.json",
    "cycling": "results/cycling.json",
    "theory": "results/theory.json",
    "prefix": "results/prefix/periodicity.json",
    "insequence": "results/insequence/periodicity.json",
    "heads": "results/zoo_heads_w8s8-kv4.json",
    "self_calibration": "results/self_calibration.json",
    "mitigations": "results/mitigations/mitigations.json",
    "nsa": "results/nsa.json",
    "smollm2": "results/smollm2.json",
    "undemo3_seeds": "results/rule/seeds-w8s8-undemo3.json",
    "undemo3_s0": "results/rule/pilot-w8s8-undemo3-s0.json",
    "undemo3_s1": "results/rule/pilot-w8s8-undemo3-s1.json",
}
#: Per-run curve files of the mitigation study (dominant period and verdict per seed).
MITIGATION_CURVES = "results/mitigations/curves"
#: The prose needle study's unit files (finding B8), one folder per model.
PROSE_UNITS = "results/prose_niah"
ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "assets" / "results" / "claims.md"
DEFAULT_README = ROOT / "README.md"
DEFAULT_TRAINING_DOC = ROOT / "docs" / "training.md"
BEGIN, END = "<!-- claims:begin -->", "<!-- claims:end -->"
SWEEP_BEGIN, SWEEP_END = "<!-- rule-sweep:begin -->", "<!-- rule-sweep:end -->"


def _root(root: Path | None) -> Path | None:
    if root is not None:
        return Path(root)
    found = assets.find(INPUTS["zoo"])
    return found.parents[1] if found is not None else None


def load_inputs(root: Path | None = None) -> dict:
    """The parsed result files (None where a file is missing) and `_paths`, each file's name as the page cites it."""
    base = _root(root)
    data: dict = {"_paths": {}}
    for key, rel in INPUTS.items():
        path = base / rel if base is not None else None
        if key == "control" and path is not None and not path.is_file() and path.parent.is_dir():
            # the control's table folder may name its json otherwise: take the zoo-shaped one
            path = next((p for p in sorted(path.parent.glob("*.json")) if "rows" in json.loads(p.read_text())), path)
            rel = f"results/control/{path.name}"
        data[key] = json.loads(path.read_text()) if path is not None and path.is_file() else None
        data["_paths"][key] = rel.removeprefix("results/")
    curves = base / MITIGATION_CURVES if base is not None else None
    prose_dir = base / PROSE_UNITS if base is not None else None
    data["prose_niah"] = ([json.loads(p.read_text()) for p in sorted(prose_dir.glob("*/T*.json"))]
                          if prose_dir is not None and prose_dir.is_dir() else None)
    data["_paths"]["prose_niah"] = PROSE_UNITS.removeprefix("results/") + "/"
    data["prose_rescue"] = ([json.loads(p.read_text()) for p in sorted(prose_dir.glob("*/rescue-*.json"))]
                            if prose_dir is not None and prose_dir.is_dir() else [])
    data["mitigation_curves"] = ({p.stem: json.loads(p.read_text()) for p in sorted(curves.glob("*.json"))}
                                 if curves is not None and curves.is_dir() else {})
    return data


def evaluate(data: dict) -> list[checks.Claim]:
    """Every claim, in the paper's order, then the findings beyond the paper."""
    return [checks.claim1(data), checks.claim2(data), checks.claim3(data), checks.claim4(data), findings.claim5(data),
            findings.claim6(data), findings.exclusion(data), findings.nsa(data), findings.smollm2(data),
            findings.multi_offset(data), findings.theory_coverage(data), sweeps.variants(data),
            sweeps.rule_sweep(data), prose.prose(data)]


def members_section(data: dict) -> list[str]:
    """Each member across its seeds (`zoo_members.json`, `experiments.zoo.members_table`): share learned
    with its Wilson interval, and the member's mean curve with its two-level bootstrap (seeds, then examples)."""
    lines = ["## Members across seeds", ""]
    d = data.get("zoo_members")
    if d is None:
        return lines + ["Two-level bootstrap (seeds, then examples) of each member's mean curve "
                        "(`assets/results/zoo_members.json`): no result file yet. Until then the seeds lines above "
                        "give each member's share learned with its Wilson interval, from the zoo tables.", ""]
    out = []
    for m in d["members"]:
        curve, spread = m["curves"]["all"], m["spread"]["all"]
        gaps = {k: spread[k]["gap_heldout_pp"] for k in ("median", "low", "high")}
        out.append([m["member"], m["protocol"], len(m["seeds"]),
                    f"{m['n_learned']} of {m['n_seeds']} {interval([100 * x for x in m['learned_interval']])}",
                    f"{100 * curve['mean']:.1f} {interval([100 * x for x in curve['mean_interval']])}",
                    f"{curve['gap_heldout_pp']:.1f} {interval(curve['gap_interval_pp'])}",
                    f"{gaps['median']:.1f} ({gaps['low']:.1f} to {gaps['high']:.1f})"])
    lines += [f"Source: `{data['_paths']['zoo_members']}` (all seeds, learned or not; per protocol). The mean curve "
              "averages the seeds; its held-out gap can be small when seeds' weak phases sit at different residues, "
              "so each seed's own held-out gap is given too (median and range).", ""]
    return lines + table(["member", "protocol", "seeds", "learned [Wilson 95%]", "mean % [two-level 95%]",
                          "mean curve's held-out gap pp [two-level 95%]", "seeds' held-out gaps pp: median (range)"],
                         out) + [""]


def claim_section(c: checks.Claim) -> list[str]:
    head = f"## Claim {c.key}: {c.title}" if c.key.isdigit() else f"## Beyond the paper ({c.key}): {c.title}"
    lines = [head, "", f"*{c.statement}*", "", f"**Verdict: {c.verdict}.** Rule: {c.rule}.", ""]
    lines += [f"- Counted: {c.count or 'nothing to count'}"]
    lines += [f"- Evidence: {', '.join(f'`{s}`' for s in c.sources) or 'no result file'}"
              + (f" ({len(c.rows)} rows below)" if c.rows else "")]
    lines += [f"- Tests: {c.tests or 'no curve to test'}"]
    lines += ["- Seeds: " + ("; ".join(c.seeds) if c.seeds else "none")]
    lines += [f"- Exceptions ({len(c.exceptions)}): " + ("; ".join(c.exceptions) if c.exceptions else "none")]
    lines += [f"- {f}" for f in c.findings] + [""]
    if c.table:
        lines += c.table + [""]
    if c.rows:
        lines += evidence_table(c.rows) + [""]
    return lines


def summary_table(claims: list[checks.Claim]) -> list[str]:
    return table(["claim", "verdict", "counted", "exceptions", "evidence"],
                 [[f"{c.key}. {c.title}", c.verdict, c.count or "-", len(c.exceptions),
                   ", ".join(f"`{s}`" for s in c.sources) or "no result file"] for c in claims])


def render(data: dict | None = None) -> str:
    """The text of claims.md."""
    data = load_inputs() if data is None else data
    claims = evaluate(data)
    lines = ["# Claims, judged from the result files", "",
             "<!-- Generated by `python -m experiments.claims.claims` from assets/results/; do not edit by hand. "
             "experiments/claims/test_claims.py fails when this page is stale. -->", "",
             "the paper's six claims (docs/paper.md) and the findings beyond the paper. Each states the rule that decides its verdict; "
             "only \"holds\" and \"holds with exceptions\" are a pass, and a claim without a result file is none. "
             "The unit is a seed (one trained run): a seed's protocols are judged together and the counts are seeds "
             "(\"counted\"), curves only as detail. p-values a verdict pools are corrected across the tests it pools "
             "(Benjamini-Hochberg or Holm, named in each rule with the family's size). "
             "Spectral test: the curve's dominant period (the smallest period carrying 90% of its spectral power). "
             "Permutation test: p (phase) for any phase effect, p (period S) and the verdict for period S "
             "(`docs/statistics.md`, \"Claims: seeds and multiplicity\"). Intervals of single curves are within one "
             "model; seeds vary more.", ""]
    lines += summary_table(claims) + [""]
    for c in claims:
        lines += claim_section(c)
    lines += members_section(data)
    return "\n".join(lines).rstrip() + "\n"


def readme_block(data: dict | None = None) -> str:
    """The verdict table README.md quotes (between the claims markers)."""
    data = load_inputs() if data is None else data
    claims = evaluate(data)
    rows = [[f"{c.key}. {c.title}", c.verdict, c.count or "-", len(c.exceptions)] for c in claims]
    return "\n".join([BEGIN, *table(["claim", "verdict", "counted", "exceptions"], rows), END])


def sweep_block(data: dict | None = None) -> str:
    """The rule's generalization sweep as docs/training.md quotes it: finding B7's verdict, findings and exceptions."""
    c = sweeps.rule_sweep(load_inputs() if data is None else data)
    lines = [SWEEP_BEGIN, f"Verdict (finding B7 of `assets/results/claims.md`): **{c.verdict}**. Rule: {c.rule}.", ""]
    lines += [f"- {f}" for f in c.findings] + [f"- Exception: {e}" for e in c.exceptions]
    return "\n".join([*lines, SWEEP_END])


def training_blocks(data: dict | None = None) -> list[tuple[str, str, str]]:
    """(block, begin marker, end marker) for every block docs/training.md quotes: the rule's sweep (B7) and
    `claim_docs.BLOCKS`."""
    data = load_inputs() if data is None else data
    return [(sweep_block(data), SWEEP_BEGIN, SWEEP_END)] + [(docs.block(name, data), *docs.markers(name))
                                                            for name in docs.BLOCKS]


def with_block(text: str, block: str, begin: str = BEGIN, end: str = END) -> str:
    """`text` with the part from `begin` to `end` (markers included) replaced by `block`."""
    if begin not in text or end not in text:
        raise ValueError(f"the page has no block to render into: add the markers {begin} and {end}")
    head, rest = text.split(begin, 1)
    return head + block + rest.split(end, 1)[1]


def _write(path: Path, text: str) -> None:
    """Atomically: a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, text)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Render assets/results/claims.md (and README.md's claims block) from the "
                                            "result files.")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the page to write (default: assets/results/claims.md)")
    p.add_argument("--readme", type=Path, default=DEFAULT_README, help="the README whose claims block to update")
    p.add_argument("--training-doc", type=Path, default=DEFAULT_TRAINING_DOC,
                   help="the page whose rule-sweep block to update (default: docs/training.md)")
    p.add_argument("--root", type=Path, default=None, help="an assets folder to read (default: found by phaseinterp.assets)")
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 when a text differs from a fresh render")
    args = p.parse_args(argv)
    data = load_inputs(args.root)
    text = render(data)
    pages = [(args.out, args.out.read_text() if args.out.is_file() else None, text)]
    if args.readme.is_file():
        now = args.readme.read_text()
        pages.append((args.readme, now, with_block(now, readme_block(data))))
    if args.training_doc.is_file():
        now = new = args.training_doc.read_text()
        for block, begin, end in training_blocks(data):
            new = with_block(new, block, begin, end)
        pages.append((args.training_doc, now, new))
    if args.check:
        stale = [str(path) for path, now, new in pages if now != new]
        if stale:
            print(f"stale: {', '.join(stale)}: run `python -m experiments.claims.claims`", file=sys.stderr)
            return 1
        print(f"{', '.join(str(path) for path, _, _ in pages)}: up to date")
        return 0
    for path, now, new in pages:
        if now != new:
            _write(path, new)
    print(f"wrote {args.out} ({len(text.splitlines())} lines)"
          + "".join(f" and {path}'s block" for path, now, new in pages[1:] if now != new))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
