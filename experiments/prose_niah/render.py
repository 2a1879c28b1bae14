"""The prose needle study's pages, rendered from its result files only (assets/results/prose_niah/):
the results block of docs/prose_niah.md and of experiments/prose_niah/README.md, and one offline HTML
page with the phase curves and depth x phase grids (assets/results/prose_niah/prose_niah.html).

The answer to "weak phases?" pools every compressed unit's permutation test of "no phase effect", so it
is read after Holm's correction across them (`measure.pvalues.holm_adjust`); a unit at floor or ceiling
at every residue cannot show a phase effect and is named as such, not counted as "no effect", and so is a
unit whose outcomes could not reach p < 0.05 however they fell across residues (the test conditions on each
example's count of right answers: one example right at one residue gives p = 1 whatever the model did).
Leaving those out of the Holm family is Tarone's rule (1990): a test that cannot reject cannot make a false
rejection, and which tests cannot is decided by the counts the tests condition on.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from experiments.prose_niah.predictions import prediction_lines
from experiments.prose_niah.rescue import rescue_lines
from experiments.prose_niah.run import HIGH, LOW, RESULTS, ROOT
from experiments.prose_niah.survivors import kept_offset, survivor_lines
from phaseinterp.measure.gap import heldout_text

MARK = "<!-- results: rendered from assets/results/prose_niah/ by `python -m experiments.prose_niah.run render` -->"
PAGES = (ROOT / "docs" / "prose_niah.md", ROOT / "experiments" / "prose_niah" / "README.md")
ALPHA = 0.05


def units() -> list[dict[str, Any]]:
    return [json.loads(f.read_text()) for f in sorted(RESULTS.glob("*/T*.json"))]


def regimes() -> list[dict[str, Any]]:
    return [json.loads(f.read_text()) for f in sorted(RESULTS.glob("*/regime*.json"))]


def regime_state(u: dict[str, Any]) -> str | None:
    """"ceiling" / "floor" when every residue is at 1 / 0 (no phase effect can show), else None."""
    acc = [a for a in u["curve"]["accuracy"] if a is not None]
    return "ceiling" if min(acc) == 1.0 else "floor" if max(acc) == 0.0 else None


def attainable(u: dict[str, Any]) -> float:
    """The smallest p-value a unit's permutation test could give with its outcomes (it conditions on each
    example's count of right answers; `measure.permutation.attainable_p`)."""
    from phaseinterp.measure.permutation import attainable_p

    c = u["curve"]
    correct, residue, example = (np.array(c[k]) for k in ("correct", "residue", "example_id"))
    return attainable_p(correct, residue, example, c["modulus"], n_perm=c["n_perm"], seed=c["seed"])


def informative(u: dict[str, Any]) -> tuple[int, int]:
    """(examples right at some residues and wrong at others, examples): only the first can move the test."""
    c = u["curve"]
    example, correct = np.array(c["example_id"]), np.array(c["correct"])
    right, rows = np.bincount(example, weights=correct), np.bincount(example)
    return int(((right > 0) & (right < rows)).sum()), len(rows)


def powerless(u: dict[str, Any]) -> str | None:
    """Why a unit's test cannot reach p < ALPHA however its outcomes fell across residues, else None."""
    best = attainable(u)
    if best < ALPHA:
        return None
    moved, examples = informative(u)
    if moved == 0:
        return (f"the phase changed no answer: each of {examples} examples right at every residue or wrong at every "
                "one (no test possible; not in the Holm pool)")
    return (f"no power: {moved} of {examples} examples right at some residues and wrong at others, so the "
            f"smallest attainable p is {best:.2f} (not in the Holm pool)")


def superseded(rows: list[dict[str, Any]]) -> dict[str, int]:
    """Units whose prompts a larger unit of the same setting holds (example e is drawn from seed (seed, split,
    e), so n8's prompts are n32's first 8), by file key: the larger unit's n. They stay out of the Holm pool.

    Example:
        >>> u = {"model": "m", "length": 1024, "anchor": "value", "setting": "mean-W8S8", "layers": "5", "seed": 0,
        ...      "task": {"n_depths": 8}}
        >>> superseded([{**u, "n_per_residue": 8}, {**u, "n_per_residue": 32}])
        {'m T1024 value mean-W8S8 L5 n8': 32}
    """
    def same(u: dict[str, Any]) -> tuple:
        return u["model"], u["length"], u["anchor"], u["setting"], u["layers"], u["seed"], u["task"]["n_depths"]

    largest: dict[tuple, int] = {}
    for u in rows:
        largest[same(u)] = max(largest.get(same(u), 0), u["n_per_residue"])
    return {key(u): largest[same(u)] for u in rows if u["n_per_residue"] < largest[same(u)]}


def candidates(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The compressed units neither at floor nor ceiling everywhere, each setting's largest only."""
    gone = superseded(rows)
    return [u for u in rows if u["setting"] != "none" and regime_state(u) is None and key(u) not in gone]


def holm_pool(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The candidates whose outcomes could reach p < ALPHA (Tarone's rule: a test that cannot reject does not
    count against the others): the family Holm's correction pools."""
    return [u for u in candidates(rows) if powerless(u) is None]


def verdicts(rows: list[dict[str, Any]]) -> dict[str, str]:
    """Each compressed unit's reading after Holm across the units that can show an effect, by file key."""
    from phaseinterp.measure.pvalues import holm_adjust

    pool, gone = holm_pool(rows), superseded(rows)
    adjusted = holm_adjust(np.array([u["summary"]["p_value"] for u in pool], dtype=float)) if pool else []
    out = {}
    for u in rows:
        state = regime_state(u)
        out[key(u)] = (f"at {state} at every residue: cannot show a phase effect" if state else
                       f"its prompts are the n{gone[key(u)]} unit's first ones (not in the Holm pool; p unadjusted)"
                       if key(u) in gone else
                       "the uncompressed reference (not in the Holm pool)" if u["setting"] == "none" else
                       powerless(u) or "")
    for u, p in zip(pool, adjusted):
        s = u["summary"]
        if p < ALPHA:
            period = s["p_periodic"]
            how = "" if period is None else (f"; consistent with period {s['period']} (p = {period:.2f})" if period >= ALPHA
                                             else f"; not explained by period {s['period']} (p = {period:.3f})")
            out[key(u)] = f"weak phases: worst r = {s['worst_residue']} (Holm p = {p:.3f}{how})"
        else:
            shown = f"{p:.2f}" if p >= 0.1 else f"{p:.3f}"  # 0.054 is not "0.05"
            out[key(u)] = f"no phase effect detected (Holm p = {shown} over {len(pool)} tests)"
    return out


def key(u: dict[str, Any]) -> str:
    return f"{u['model']} T{u['length']} {u['anchor']} {u['setting']} L{u['layers']} n{u['n_per_residue']}"


def unit_table(rows: list[dict[str, Any]], said: dict[str, str]) -> list[str]:
    m = rows[0]["modulus"]
    lines = ["| setting | layers | n/residue | depths | " + " | ".join(f"r={r}" for r in range(m)) +
             " | mean | held-out gap pp | p (no phase effect) | p (period) | reading |",
             "|" + "---|" * (m + 9)]
    for u in rows:
        s = u["summary"]
        acc = " | ".join("-" if a is None else f"{a:.2f}" for a in u["curve"]["accuracy"])
        gap = "-" if s["gap_heldout_pp"] is None else heldout_text(s["gap_heldout_pp"], s["gap_interval_pp"])
        per = "-" if s["p_periodic"] is None else f"{s['p_periodic']:.3f}"
        lines.append(f"| {u['setting']} | {u['layers']} | {u['n_per_residue']} | {depths_text(u)} | {acc} | {s['mean']:.2f} | {gap} | "
                     f"{s['p_value']:.3f} | {per} | {said[key(u)]} |")
    return lines


def depths_text(u: dict[str, Any]) -> str:
    """The needle depths a unit covers (share of the haystack before the needle): example e sits at
    (e mod n_depths + 0.5) / n_depths, so n prompts per residue cover min(n, n_depths) of them.

    Example:
        >>> depths_text({"n_per_residue": 2, "task": {"n_depths": 8}})
        '0.06-0.19 (2 of 8)'
    """
    nd = u["task"]["n_depths"]
    k = min(u["n_per_residue"], nd)
    return f"{0.5 / nd:.2f}-{(k - 0.5) / nd:.2f} ({k} of {nd})"


def block() -> str:
    rows, scans = units(), regimes()
    if not rows and not scans:
        return "No unit has run yet (`python -m experiments.prose_niah.run scan`).\n"
    said = verdicts(rows)
    out = []
    for scan in scans:
        out += [f"**Regime of {scan['model']}** ({scan['length']} tokens, {scan.get('setting', 'mean-W8S8')}, "
                f"{scan['n_per_residue']} prompt(s) "
                f"per residue mod 8; rule: mean in [{LOW}, {HIGH}], most compressed first): layers "
                f"**{scan['regime']}** ({scan['why']}).", "",
                "| compressed layers | mean accuracy |", "|---|---|",
                *[f"| {layers} | {mean:.2f} |" for layers, mean in scan["rows"]], ""]
    groups: dict[tuple, list] = {}
    for u in rows:
        groups.setdefault((u["model"], u["length"], u["anchor"]), []).append(u)
    for (model, length, anchor), mine in groups.items():
        what = "the needle value's first token" if anchor == "value" else "the question's last token (needle fixed)"
        out += [f"**{model}, {length} tokens, residue of {what}.**", "", *unit_table(mine, said), ""]
    out += prediction_lines(rows, said, key)
    out += depth_lines(rows)
    out += evict_lines(rows)
    out += survivor_lines(rows, superseded(rows), key, RESULTS)
    out += knockout_lines()
    out += kept_lines()
    out += rescue_lines(RESULTS)
    pool = holm_pool(rows)
    weak = [k for k, v in said.items() if v.startswith("weak")]
    result = (f"**Result.** Across {len(pool)} compressed unit(s) that can show a phase effect (neither floor nor "
              f"ceiling everywhere, outcomes that could reach p < {ALPHA}; a setting's largest unit), {len(weak)} show "
              "weak phases after Holm's correction"
              + (f": {', '.join(weak)}." if weak else "."))
    for anchor, when in (("value", "At prefill (the needle's phase)"), ("question", "At decode time (the question's phase, "
                                                                                    "needle fixed)")):
        mine = [u for u in pool if u["anchor"] == anchor]
        hits = [key(u) for u in mine if said[key(u)].startswith("weak")]
        result += f" {when}: {len(hits)} of {len(mine)}."
    out = [result, "", *out, "Commands: each unit file records its own (`command`), with versions and seconds."]
    return "\n".join(out) + "\n"


def depth_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The uncompressed units by depth (the classic test's axis; share of the haystack before the needle), all
    residues pooled: where the reference itself fails, a compressed unit's failure says nothing of phase."""
    out = []
    for u in rows:
        if u["setting"] != "none":
            continue
        g = u["grid"]
        cells = []
        for lo, hi, k, n in zip(g["edges"], g["edges"][1:], g["k"], g["n"]):
            if sum(n):
                cells.append(f"{lo:.2f}-{hi:.2f}: {sum(k) / sum(n):.2f} ({sum(k)} of {sum(n)} prompts)")
        out.append(f"- {u['model']}, {u['length']} tokens, {u['anchor']} anchor, n{u['n_per_residue']}: " + "; ".join(cells))
    if out:
        out = ["**The uncompressed reference by depth** (all residues pooled):", "", *out, ""]
    return out


def evict_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The evict rule keeps one token of each window (offset K): the residue where each evict unit scores
    best, beside K mod the modulus, so the page says whether the strong residue follows the kept offset."""
    out = []
    for u in rows:
        c = u["compression"] or {}
        if c.get("rule") != "evict":
            continue
        offset = kept_offset(c)
        acc = np.array([np.nan if a is None else a for a in u["curve"]["accuracy"]], dtype=float)
        best = int(np.nanargmax(acc))
        rest = np.delete(acc, best)
        out.append(f"- {u['model']}, {u['length']} tokens, {u['anchor']} anchor, {u['setting']} (keeps offset {offset} of each "
                   f"W{c['window']} window, n{u['n_per_residue']}): best residue {best} ({acc[best]:.2f}; the others "
                   f"{np.nanmin(rest):.2f} to {np.nanmax(rest):.2f}); the kept positions are {offset % c['stride']} mod "
                   f"S = {c['stride']}.")
    if out:
        out = ["**Evict keeps one token per window: does the strong residue follow the kept offset?**", "", *out, ""]
    return out


def knockout_lines() -> list[str]:
    """One paragraph per knockout map file: significant cells after BH-FDR, and the units that matter most."""
    from phaseinterp.measure import SpecializationMap

    out = []
    for f in sorted(RESULTS.glob("*/knockout-*.json")):
        r = json.loads(f.read_text())
        smap = SpecializationMap.from_dict(r["map"])
        top = smap.top(3)
        cells = ", ".join(f"{row.unit} at r={row.residue} ({row.value:+.1f} pp)" for row in top.itertuples()) if len(top) else "none"
        sig = smap.significance_summary("fdr", ALPHA)
        notes = "".join(f" ({sig[k]})" for k in ("note", "note_estimable") if sig.get(k))
        out += [f"**KV-head knockout map**, {r['model']} under {r['setting']} (layers {r['layers']}), {r['length']} "
                f"tokens, {r['n_per_residue']} prompts per residue (`{f.relative_to(ROOT)}`): {sig['fdr']} of "
                f"{sig['cells']} estimable cells ({smap.values.size} in all) significant ({sig['rule']}){notes}; the cells where a "
                f"knockout lowers accuracy most: {cells}.{pooled_sentence(smap)}", ""]
    return out


def pooled_sentence(smap) -> str:
    """" Each head tested once, residues pooled (BH over N heads): ..." for maps that carry the pooled test."""
    try:
        table = smap.pooled(ALPHA)
    except ValueError:  # a map written before the pooled test
        return ""
    hits = table[table["significant_fdr"]].sort_values("p")
    named = ", ".join(f"{r.unit} ({r.value:+.1f} pp, [{r.lo:+.1f}, {r.hi:+.1f}])" for r in hits.itertuples()) or "none"
    return (f" Each KV head tested once with its residues pooled (BH-FDR q={ALPHA:g} over "
            f"{int(table['p'].notna().sum())} heads): {len(hits)} significant: {named}.")


def kept_lines() -> list[str]:
    """One table per `kept` file (experiments/prose_niah/kept.py): by residue, the press's accuracy, the
    oracle's (the value's chunk kept instead, same budget), and where the kept chunks sit."""
    from experiments.prose_niah.kept import PLACES, reading

    out = []
    for f in sorted(RESULTS.glob("*/kept-*.json")):
        r = json.loads(f.read_text())
        c = r["compression"]
        out += [f"**What the static chunk press keeps**, {r['model']}, {r['setting']} ({c['budget']} chunk of {c['chunk']} "
                f"per KV head, layers {r['layers']}), {r['length']} tokens, {r['n_per_residue']} prompts per residue "
                f"(`{f.relative_to(ROOT)}`). Oracle: every pressed layer and KV head keeps the chunk of the value's first "
                "token instead of its own choice. Shares: of the layer x KV-head kept chunks, those holding the value's "
                "first token, the whole value, the token before the value, the needle's first token.", "",
                "| residue | n | press | oracle | oracle - press (log-prob of the answer) | " +
                " | ".join(p.replace("_", " ") for p in PLACES) + " |", "|" + "---|" * (5 + len(PLACES))]
        for b in r["by_residue"]:
            mine = [x for x in r["rows"] if x["residue"] == b["residue"]]
            gain = np.mean([x["oracle_logprob"] - x["natural_logprob"] for x in mine]) if mine else np.nan
            out.append(f"| {b['residue']} | {b['n']} | {b['natural']:.2f} | {b['oracle']:.2f} | {gain:+.2f} | "
                       + " | ".join(f"{b[p]:.2f}" for p in PLACES) + " |")
        out += ["", f"Reading (press accuracy below 0.5): {reading(r['by_residue'])}.", ""]
    return out


def write_pages() -> None:
    text = block()
    for page in PAGES:
        head = page.read_text() if page.exists() else ""
        head = head[: head.index(MARK)] if MARK in head else head
        page.write_text(head + MARK + "\n\n" + text)
    write_html()


def write_html() -> Path | None:
    from phaseinterp.measure import PhaseCurve
    from phaseinterp.measure.depth_grid import DepthPhaseGrid
    from phaseinterp.plot import depth_phase_figure, phase_figure
    from phaseinterp.report import Section, write_report

    rows = units()
    if not rows:
        return None
    sections = []
    groups: dict[tuple, list] = {}
    for u in rows:
        groups.setdefault((u["model"], u["length"], u["anchor"]), []).append(u)
    for (model, length, anchor), mine in groups.items():
        curves = {f"{u['setting']} L{u['layers']}": PhaseCurve.from_dict(u["curve"]) for u in mine}
        figs = [phase_figure(curves, title=f"{model}, {length} tokens, {anchor} anchor: accuracy by phase")]
        for u in mine:
            g = u["grid"]
            grid = DepthPhaseGrid(*(np.array(g[k], dtype=float) for k in ("accuracy", "lo", "hi")), np.array(g["n"]),
                                  np.array(g["k"]), np.array(g["edges"]), g["modulus"], g["meta"])
            figs.append(depth_phase_figure(grid, title=f"{u['setting']} L{u['layers']}: accuracy by depth and phase"))
        sections.append(Section(f"{model}, {length} tokens ({anchor})", "", [], figs))
    return write_report(sections, RESULTS / "prose_niah.html", "Prose needle in a haystack by phase",
                        {"source": "assets/results/prose_niah/*/T*.json"})
