"""PAPER.md's six claims, judged from the result files (`phaseinterp.report.claims` renders them).

Each function takes the parsed inputs (`claims.load_inputs`; a missing file is None) and returns a `Claim`:
its verdict by a rule stated in the claim itself, the evidence rows, the seeds behind it and the exceptions by
name. Verdicts: "holds" (every evidence row passes), "holds with exceptions" (most pass; the rest are named),
"does not hold", "cannot fail" (the evidence could not have shown a failure, e.g. a control at ceiling) and
"no result file". Only "holds" and "holds with exceptions" count as a pass.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from phaseinterp.report.claim_rows import FULL_TOLERANCE_PP, Row, interval, num, pct, periodicity_row, zoo_row
from phaseinterp.report.claim_rows import p as fmt_p
from phaseinterp.report.results_md import wilson

PASSING = ("holds", "holds with exceptions")
NO_FILE = "no result file"


@dataclass
class Claim:
    key: str
    title: str
    statement: str
    rule: str
    verdict: str = NO_FILE
    sources: list[str] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)
    seeds: list[str] = field(default_factory=list)
    exceptions: list[str] = field(default_factory=list)
    tests: str = ""

    @property
    def passes(self) -> bool:
        return self.verdict in PASSING


def share_verdict(passing: int, total: int) -> str:
    if total == 0:
        return "does not hold"
    if passing == total:
        return "holds"
    return "holds with exceptions" if 2 * passing > total else "does not hold"


def tests_line(rows: list[Row]) -> str:
    """Both tests over the rows, as counts."""
    if not rows:
        return "no curve to test"
    spectral = sum(r.spectral_ok for r in rows)
    perm = sum(r.permutation_ok for r in rows)
    return (f"spectral test: {spectral} of {len(rows)} curves have dominant period S; permutation test: "
            f"{perm} of {len(rows)} are consistent with period S, {len(rows) - perm} are not")


def zoo_rows(data: dict, keys=("zoo", "zoo_seeds")) -> list[Row]:
    rows = []
    for key in keys:
        if data.get(key) is not None:
            for r in data[key]["rows"]:
                row = zoo_row(r, data["_paths"][key])
                if key == "control":  # same member names, another task: never pooled with the zoo's seeds
                    row.member = f"{member_of(row)} (harder task)"
                rows.append(row)
    return rows


def member_of(run) -> str:
    """A row's member (its table's `member` field), else from a run name: zoo-w8s8-kv4-s1 -> w8s8-kv4."""
    if isinstance(run, Row):
        return run.member or member_of(run.run)
    return run.removeprefix("zoo-").rsplit("-s", 1)[0]


def seeds_of(rows: list[Row]) -> list[str]:
    """Per member: its seeds, and which learned (a seed counts as learned when it learned in either protocol)."""
    members: dict[str, dict[int, bool]] = {}
    for r in rows:
        members.setdefault(member_of(r), {})
        seed = r.seed if r.seed is not None else -1
        members[member_of(r)][seed] = members[member_of(r)].get(seed, False) or bool(r.learned)
    out = []
    for m, seeds in members.items():
        learned = sorted(s for s, ok in seeds.items() if ok)
        lo, hi = wilson(len(learned), len(seeds))
        out.append(f"{m}: seeds {sorted(seeds)}, learned {len(learned)} of {len(seeds)} "
                   f"(95% Wilson [{100 * lo:.0f}, {100 * hi:.0f}]%)")
    return out


def claim1(data: dict) -> Claim:
    c = Claim("1", "Periodic in the needle position with period S, for every compressor",
              "Retrieval accuracy is periodic in the needle position with period S, for every compressor.",
              "every curve of a learned compressed run with a phase effect (p (phase) < 0.05) must pass both tests "
              "(spectral: dominant period S; permutation: consistent with period S); holds when all do, "
              "with exceptions when most do")
    zoo = [r for r in zoo_rows(data, ("zoo", "zoo_seeds", "control", "variants", "rule_sweep"))
           if not member_of(r).startswith("full")]
    shipped = []
    for protocol in ("prefix", "insequence"):
        if data.get(protocol) is not None:
            d = data[protocol]
            shipped += [periodicity_row(r, d["curves"][r["model"]], protocol, data["_paths"][protocol])
                        for r in d["summary"] if r["model"] != "full" and r.get("P")]
    if not zoo and not shipped:
        return c
    c.sources = sorted({r.source for r in zoo + shipped})
    tested = [r for r in zoo + shipped if r.learned and r.phase_effect]
    c.rows = tested
    c.tests = tests_line(tested)
    c.exceptions = [f"{r.name} (spectral: {r.dominant or 'none'}; permutation: {r.verdict})"
                    for r in tested if not (r.spectral_ok and r.permutation_ok)]
    for label, group in (("zoo", [r for r in tested if r in zoo]), ("shipped checkpoints", [r for r in tested if r in shipped])):
        if group:
            c.findings.append(f"{label}: {len(group)} curves; {tests_line(group)}.")
    untested = [r for r in zoo + shipped if not r.learned and r.phase_effect]
    c.findings.append("Curves with a phase effect whose run did not reach 80% at any residue (not counted): "
                      + ("; ".join(f"{r.name} ({r.source}; spectral: {r.dominant or 'none'}; permutation: {r.verdict}, "
                                   f"p (period S) {fmt_p(r.p_periodic)})" for r in untested) or "none") + ".")
    unlearned = sorted({r.run for r in zoo if not r.learned} - {r.run for r in zoo if r.learned})
    c.findings.append(f"Runs that learned in neither protocol are not evidence either way ({len(unlearned)}): "
                      f"{', '.join(unlearned) or 'none'}.")
    members = sorted({member_of(r) for r in zoo})
    shown = sorted({member_of(r) for r in tested if r in zoo and r.spectral_ok and r.permutation_ok})
    missing = [m for m in members if m not in shown]
    c.findings.append(f"Compressor members with at least one curve passing both tests: {len(shown)} of {len(members)}"
                      + (f"; none for {', '.join(missing)}." if missing else "."))
    c.seeds = seeds_of(zoo)
    passing = len(tested) - len(c.exceptions)
    c.verdict = share_verdict(passing, len(tested))
    if missing and c.verdict == "holds":
        c.verdict = "holds with exceptions"
    c.exceptions += [f"{m}: no curve passes both tests" for m in missing]
    return c


def _control_members(rows: list[Row]) -> dict[str, list[Row]]:
    out: dict[str, list[Row]] = {}
    for r in rows:
        out.setdefault(member_of(r), []).append(r)
    return out


def claim2(data: dict) -> Claim:
    c = Claim("2", "Full attention shows no such period", "Full attention shows no such period.",
              f"on the harder task (`control/`), every learned full-attention seed's held-out gap interval covers 0 or stays "
              f"within {FULL_TOLERANCE_PP:g} pp, its mean lies between 50% and 90% (below ceiling, so it could fail), "
              "and every compressed member has a learned curve with a phase effect passing both period-S tests; "
              "full-attention curves at ceiling (worst residue >= 99%) cannot fail and are no pass")
    matched = [r for r in zoo_rows(data) if member_of(r).startswith("full")]
    for protocol in ("prefix", "insequence"):
        if data.get(protocol) is not None:
            d = data[protocol]
            matched += [periodicity_row(r, d["curves"][r["model"]], protocol, data["_paths"][protocol])
                        for r in d["summary"] if r["model"] == "full"]
    control = zoo_rows(data, ("control",))
    all_full = [r for r in control if member_of(r).startswith("full")]
    full = [r for r in all_full if r.learned]  # a run that did not learn is reported, not evidence either way
    c.rows = all_full + [r for r in control if r not in all_full and r.learned] + matched
    c.sources = sorted({r.source for r in c.rows})
    if matched:
        ceiling = sum(r.at_ceiling for r in matched)
        c.findings.append(f"Matched task: {ceiling} of {len(matched)} full-attention curves are at ceiling (worst residue "
                          f">= 99%; mean {pct(min(r.mean for r in matched))}-{pct(max(r.mean for r in matched))}%), "
                          "so they cannot show a phase effect: that control cannot fail.")
    if not control:
        c.findings.append("The control on a harder task (`assets/results/control/zoo.json`): no result file yet.")
        c.verdict = "cannot fail" if matched and all(r.at_ceiling for r in matched) else NO_FILE
        c.tests = tests_line(matched)
        c.seeds = seeds_of(matched)
        return c
    c.seeds = seeds_of(control)
    c.tests = tests_line([r for r in control if r.learned and r.phase_effect])
    bad_full = [r for r in full if not r.within_tolerance()]
    c.exceptions += [f"{r.name}: held-out gap {num(r.gap_pp)} pp {interval(r.gap_ci)} neither covers 0 nor stays within "
                     f"{FULL_TOLERANCE_PP:g} pp" for r in bad_full]
    off_range = [r for r in full if r.mean is None or not 0.5 <= r.mean <= 0.9]
    c.exceptions += [f"{r.name}: mean {pct(r.mean)}% outside 50-90%" for r in off_range]
    unlearned = [r for r in all_full if not r.learned]
    if unlearned:
        c.findings.append(f"Harder task, full attention that did not learn (reported, not counted): "
                          f"{', '.join(sorted({r.name for r in unlearned}))}.")
    if full:
        c.findings.append(f"Harder task, full attention: {len(full) - len(bad_full)} of {len(full)} learned curves have a held-out "
                          f"gap interval that covers 0 or stays within {FULL_TOLERANCE_PP:g} pp; means "
                          f"{pct(min(r.mean for r in full))}-{pct(max(r.mean for r in full))}%.")
    compressed = {m: rs for m, rs in _control_members(control).items() if not m.startswith("full")}
    for m, rs in sorted(compressed.items()):
        good = [r for r in rs if r.learned and r.phase_effect and r.spectral_ok and r.permutation_ok]
        seeds = sorted({r.seed for r in good})
        c.findings.append(f"Harder task, {m}: {len(good)} of {len(rs)} curves show a period-S phase effect "
                          f"(both tests), from seeds {seeds or 'none'}.")
        if not good:
            c.exceptions.append(f"{m}: no curve with a period-S phase effect")
    if not full:
        c.exceptions.append("no learned full-attention member in control/")
    if not compressed:
        c.exceptions.append("no compressed member in control/ to show period-S gaps beside full attention")
    if full and all(r.at_ceiling for r in full):
        c.verdict = "cannot fail"
    else:
        c.verdict = "holds" if not c.exceptions else "does not hold"
    return c


def claim3(data: dict) -> Claim:
    c = Claim("3", "The effect survives uniform averaging and no RoPE",
              "The effect survives uniform averaging and no RoPE.",
              "for each mechanism (uniform gates; no RoPE), at least one learned run has a curve with a phase effect "
              "that passes both period-S tests; the learned curves with a phase effect that fail a test are exceptions")
    rows = [r for r in zoo_rows(data, ("zoo", "zoo_seeds", "control"))
            if "uniform" in member_of(r) or "norope" in member_of(r)]
    for protocol in ("prefix", "insequence"):
        if data.get(protocol) is not None:
            d = data[protocol]
            rows += [periodicity_row(r, d["curves"][r["model"]], protocol, data["_paths"][protocol])
                     for r in d["summary"] if "uniform" in r["model"]]
    if not rows:
        return c
    c.sources = sorted({r.source for r in rows})
    tested = [r for r in rows if r.learned and r.phase_effect]
    c.rows = tested
    c.tests = tests_line(tested)
    c.seeds = seeds_of(rows)
    c.exceptions = [f"{r.name} (spectral: {r.dominant or 'none'}; permutation: {r.verdict})"
                    for r in tested if not (r.spectral_ok and r.permutation_ok)]
    shown = {}
    for mech in ("uniform", "norope"):
        ok = sorted({r.run for r in tested if mech in r.run and r.spectral_ok and r.permutation_ok})
        shown[mech] = ok
        label = "uniform averaging" if mech == "uniform" else "no RoPE"
        c.findings.append(f"{label}: runs with a curve passing both tests: {', '.join(ok) or 'none'}.")
    unlearned = sorted({r.run for r in rows if not r.learned} - {r.run for r in rows if r.learned})
    c.findings.append(f"Did not learn (in either protocol): {', '.join(unlearned) or 'none'}.")
    if not all(shown.values()):
        c.verdict = "does not hold"
    else:
        c.verdict = "holds" if not c.exceptions else "holds with exceptions"
    return c


def stride_of(name: str) -> int | None:
    """S from a member or run name (zoo-w8s8-kv4-s1 -> 8)."""
    m = re.search(r"w(\d+)s(\d+)", name)
    return int(m.group(2)) if m else None


def _owners(raw: dict) -> dict[str, list[int]]:
    """Owner residues by KV head ("1.2" or "L1.KV2" -> residues whose accuracy the head's knockout removes)."""
    out = {}
    for k, v in raw.items():
        k = k.replace("L", "").replace("KV", "")
        out[k] = sorted(v)
    return out


def _head_findings(name: str, owners: dict[str, list[int]], modulus: int, S: int) -> tuple[str, bool]:
    """Last layer's heads: each owning a few residues (<= half) that repeat with period S."""
    last = max(int(k.split(".")[0]) for k in owners)
    heads = {k: v for k, v in owners.items() if int(k.split(".")[0]) == last}
    few = [k for k, v in heads.items() if 0 < len(v) <= modulus // 2]
    periodic = [k for k in few if all(((r + S) % modulus) in heads[k] for r in heads[k])]
    text = (f"{name} (residues mod {modulus}, S = {S}), layer {last}: "
            + "; ".join(f"KV {k.split('.')[1]} owns {v or 'none'}" for k, v in sorted(heads.items()))
            + f". {len(few)} of {len(heads)} heads own a few residues (1 to {modulus // 2}), {len(periodic)} of them "
            f"repeating every S.")
    return text, len(few) == len(heads) == len(periodic) and len(heads) > 0


def claim4(data: dict) -> Claim:
    c = Claim("4", "Single KV heads specialize on a few phases; full-attention knockouts act on all phases alike",
              "Single KV heads specialize on a few phases; full-attention knockouts act on all phases alike.",
              "in the last layer of a learned compressed model every KV head's knockout removes a few residues (at "
              "most half) that repeat every S; a full-attention model below ceiling loses all residues alike. A "
              "full-attention model at ceiling cannot fail")
    heads, calib = data.get("heads"), data.get("self_calibration")
    if heads is None and calib is None:
        return c
    oks = []
    if heads is not None:
        c.sources.append(data["_paths"]["heads"])
        for seed, s in sorted(heads["seeds"].items()):
            text, ok = _head_findings(f"{heads['member']} seed {seed}", _owners(s["owners"]), s["modulus"],
                                      stride_of(heads["member"]))
            c.findings.append(text)
            oks.append(ok)
            c.seeds.append(f"{heads['member']}: seed {seed}")
            if not ok:
                c.exceptions.append(f"{heads['member']} seed {seed}: not every last-layer head owns a few periodic residues")
    full_ceiling = None
    if calib is not None:
        c.sources.append(data["_paths"]["self_calibration"])
        for model, m in calib["models"].items():
            if model.startswith("zoo-full"):
                owned = sum(len(v) for v in m["owners_calibration_batch"].values())
                c.findings.append(f"{model} (full attention): {owned} residues owned by any single KV head; the largest "
                                  f"change a knockout makes is {float(m['max_abs_pp']):.1f} pp.")
                zoo = {r.run: r for r in zoo_rows(data)}
                row = zoo.get(model)
                full_ceiling = row is not None and row.at_ceiling
            elif heads is None or model.removeprefix("zoo-").rsplit("-s", 1)[0] != heads["member"]:
                text, ok = _head_findings(model, _owners(m["owners_calibration_batch"]), int(m["modulus"]),
                                          stride_of(model))
                c.findings.append(text)
                oks.append(ok)
                if not ok:
                    c.exceptions.append(f"{model}: not every last-layer head owns a few periodic residues")
    c.rows = [r for r in zoo_rows(data) if r.run in {f"zoo-{heads['member']}-s{s}" for s in heads["seeds"]}] if heads else []
    c.tests = tests_line([r for r in c.rows if r.phase_effect]) + " (the clean curves of the knocked-out models)"
    if full_ceiling:
        c.findings.append("The full-attention model is at ceiling (worst residue >= 99%), so no knockout can lower one "
                          "phase more than another there: that half of the claim cannot fail on this model.")
    compressed = "holds" if oks and all(oks) else ("holds with exceptions" if sum(oks) * 2 > len(oks) else "does not hold")
    c.verdict = f"{compressed} (compressed heads); " + ("cannot fail (full attention at ceiling)" if full_ceiling
                                                       else "full attention: no result file" if full_ceiling is None
                                                       else "full attention tested")
    return c
