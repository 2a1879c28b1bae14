"""cycling.md and the numbers block of docs/cycling.md, rendered from cycling.json (nothing else):
`markdown(data)`, `docs_block(data)`, `docs_page(page, data)`, and the claim 5 verdict.

R^2 (`interventions.r_squared`) excludes the boundary phase S - 1; it is undefined ("flat") when the
cycled curve is constant (every residue equally right, e.g. retrieval collapsed to 0), and a flat
delta counts as a failed prediction. A run "moves as predicted" when its median R^2 over the
deltas 1..S-1 reaches `PAPER_LOWEST_R2`, the lowest R^2 the paper reports. A cycled run is
untestable (`untestable`) when its baseline has no phase effect to move (permutation test p >=
`ALPHA`) or S = 2 (every non-boundary prediction is then the old boundary phase's accuracy); it is
listed with the reason and left out of the verdict's counts.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from experiments.cycling.measure import best_moves
from phaseinterp.measure.gap import interval_text

PAPER_LOWEST_R2 = 0.66
ALPHA = 0.05
VARIANTS = ("gates only", "with payload")
BEGIN = "<!-- numbers: rendered from assets/results/cycling.json by `python -m experiments.cycling.run`; do not edit -->"
END = "<!-- end of numbers -->"


def _r2s(rec: dict[str, Any]) -> list[float]:
    """R^2 per delta, a flat cycled curve as -inf (a failed prediction)."""
    return [d["r2"] if d["r2"] is not None and math.isfinite(d["r2"]) else -math.inf for d in rec["deltas"]]


def run_summary(result: dict[str, Any], scope: str, variant: str) -> dict[str, Any]:
    """Median, min and max R^2 over deltas, flat deltas, deltas whose best residue moves as predicted,
    and the median share of mean accuracy kept, for one run's scope and variant."""
    rec = result["scopes"][scope][variant]
    r2 = _r2s(rec)
    finite = [x for x in r2 if math.isfinite(x)]
    base = np.mean(rec["baseline"])
    kept = [np.mean(d["cycled"]) / base if base > 0 else math.nan for d in rec["deltas"]]
    moves = [best_moves(rec["baseline"], d["cycled"], d["delta"], result["stride"]) for d in rec["deltas"]]
    return {"median": float(np.median(r2)), "min": min(finite) if finite else math.nan,
            "max": max(finite) if finite else math.nan, "flat": len(r2) - len(finite), "n": len(r2),
            "moves": sum(moves), "kept": float(np.median(kept)), "holds": bool(np.median(r2) >= PAPER_LOWEST_R2)}


def _cycled(data: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in data["runs"] if r["status"] == "cycled"]


def untestable(run: dict[str, Any]) -> str | None:
    """Why a cycled run cannot test the prediction, or None."""
    res = run["result"]
    if res["stride"] == 2:
        return "S = 2: every non-boundary prediction is the old boundary phase's accuracy"
    p = res["scopes"]["all"]["gates only"]["baseline_p_phase"]
    if p >= ALPHA:
        return f"no phase effect to move (baseline p = {p:.2f})"
    return None


def _testable(data: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in _cycled(data) if untestable(r) is None]


def verdict(data: dict[str, Any]) -> str:
    """Claim 5's verdict in one line, from the all-layers results of every cycled run."""
    runs, skipped = _testable(data), [r for r in _cycled(data) if untestable(r)]
    if not runs:
        return "**Claim 5** (gate cycling moves the weak phases as predicted): no learned run can test it."
    held = {v: [r["name"] for r in runs if run_summary(r["result"], "all", v)["holds"]] for v in VARIANTS}
    k, n = len(held["gates only"]), len(runs)
    word = "holds" if k == n else "fails" if k == 0 else "does not hold across the zoo"
    return (f"**Claim 5** (gate cycling moves the weak phases as predicted): **{word}**. Gates only (the paper's "
            f"variant): {k} of {n} testable learned runs reach a median R^2 >= {PAPER_LOWEST_R2} over the deltas 1..S-1 "
            f"({_names(held['gates only'])}); gates with payload maps: {len(held['with payload'])} of {n} "
            f"({_names(held['with payload'])}). Untestable: {len(skipped)} ({_names([r['name'] for r in skipped])}).")


def summary(data: dict[str, Any]) -> dict[str, Any]:
    """What other pages read of this result (claims.md): the verdict line, and per cycled run whether it
    can test the prediction and the all-layers summary of each variant (`run_summary`)."""
    runs = []
    for r in _cycled(data):
        why = untestable(r)
        runs.append({"name": r["name"], "member": r["member"], "seed": r["seed"], "testable": why is None,
                     "untestable_because": why,
                     **{v: run_summary(r["result"], "all", v) for v in VARIANTS}})
    return {"verdict": verdict(data), "paper_lowest_r2": PAPER_LOWEST_R2, "runs": runs}


def _names(names: list[str]) -> str:
    return ", ".join(n.removeprefix("zoo-") for n in names) or "none"


def _f(x: float, nd: int = 2) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    if math.isinf(x):
        return "flat"
    return f"{x:.{nd}f}"


def _summary_cell(s: dict[str, Any]) -> str:
    flat = f", {s['flat']} flat" if s["flat"] else ""
    return f"{_f(s['median'])} [{_f(s['min'])}, {_f(s['max'])}{flat}]"


def runs_table(data: dict[str, Any]) -> str:
    head = ("| run | architecture | RoPE | status | S | baseline gap pp [held-out gap 95% CI]; phase p | gates only: R^2 median [min, max] | best moves | "
            "accuracy kept | with payload: R^2 median [min, max] | best moves | accuracy kept |\n|" + "---|" * 12)
    lines = []
    for r in data["runs"]:
        if r["status"] != "cycled":
            lines.append(f"| {r['name']} | {r['architecture']} | {r['rope'] or '-'} | {r['status']} |" + " |" * 8)
            continue
        res = r["result"]
        cells = []
        for v in VARIANTS:
            s = run_summary(res, "all", v)
            cells += [_summary_cell(s), f"{s['moves']}/{s['n']}", f"{100 * s['kept']:.0f}%"]
        base = res["scopes"]["all"]["gates only"]
        ci = base["baseline_gap_ci_pp"]
        status = "cycled" + (f"; untestable: {untestable(r)}" if untestable(r) else "")
        lines.append(f"| {r['name']} | {r['architecture']} | {r['rope']} | {status} | {res['stride']} | "
                     f"{base['baseline_gap_pp']:.1f} {interval_text(ci)}; p = {base['baseline_p_phase']:.3f} | "
                     + " | ".join(cells) + " |")
    return head + "\n" + "\n".join(lines)


def member_table(data: dict[str, Any]) -> str:
    """Per member, across its testable seeds: median and range of the per-seed median R^2."""
    members: dict[str, list[dict[str, Any]]] = {}
    for r in data["runs"]:
        members.setdefault(r["member"], []).append(r)
    head = ("| member | seeds testable / cycled / trained | gates only: median of seed medians [range] | runs >= "
            f"{PAPER_LOWEST_R2} | with payload: median of seed medians [range] | runs >= {PAPER_LOWEST_R2} |\n|"
            + "---|" * 6)
    lines = []
    for m, runs in members.items():
        cyc = [r for r in runs if r["status"] == "cycled"]
        test = [r for r in cyc if untestable(r) is None]
        if not test:
            why = runs[0]["status"] if not cyc else "; ".join(sorted({untestable(r) for r in cyc}))
            lines.append(f"| {m} | 0 / {len(cyc)} / {len(runs)} ({why}) | | | | |")
            continue
        cells = []
        for v in VARIANTS:
            s = [run_summary(r["result"], "all", v) for r in test]
            med = [x["median"] for x in s]
            cells += [f"{_f(float(np.median(med)))} [{_f(min(med))}, {_f(max(med))}]",
                      f"{sum(x['holds'] for x in s)} / {len(s)}"]
        lines.append(f"| {m} | {len(test)} / {len(cyc)} / {len(runs)} (seeds {', '.join(str(r['seed']) for r in test)}) | "
                     + " | ".join(cells) + " |")
    return head + "\n" + "\n".join(lines)


def layer_table(data: dict[str, Any]) -> str:
    """Each compressed layer cycled alone, against all layers (median R^2 over deltas, best moves)."""
    head = ("| run | scope | examples per residue | gates only: R^2 median [min, max] | best moves | "
            "with payload: R^2 median [min, max] | best moves |\n|" + "---|" * 7)
    lines = []
    for r in _cycled(data):
        for scope, sc in r["result"]["scopes"].items():
            cells = []
            for v in VARIANTS:
                s = run_summary(r["result"], scope, v)
                cells += [_summary_cell(s), f"{s['moves']}/{s['n']}"]
            lines.append(f"| {r['name']} | {scope} | {sc['n_per_residue']} | " + " | ".join(cells) + " |")
    return head + "\n" + "\n".join(lines)


def delta_table(data: dict[str, Any]) -> str:
    head = ("| run | delta | gates only: R^2 | R^2 with boundary | boundary predicted -> actual % | mean % | "
            "with payload: R^2 | R^2 with boundary | boundary predicted -> actual % | mean % |\n|" + "---|" * 10)
    lines = []
    for r in _cycled(data):
        sc = r["result"]["scopes"]["all"]
        for i, d in enumerate(sc["gates only"]["deltas"]):
            cells = []
            for v in VARIANTS:
                x = sc[v]["deltas"][i]
                bound = " ".join(f"{100 * p:.0f}->{100 * a:.0f}" for p, a in zip(x["boundary_predicted"], x["boundary_actual"]))
                r2 = x["r2"] if x["r2"] is not None and math.isfinite(x["r2"]) else -math.inf
                cells += [_f(r2), _f(x["r2_all"] if x["r2_all"] is not None else math.nan), bound,
                          f"{100 * np.mean(x['cycled']):.0f}"]
            lines.append(f"| {r['name']} | {d['delta']} | " + " | ".join(cells) + " |")
    return head + "\n" + "\n".join(lines)


def similarity_table(data: dict[str, Any]) -> str:
    head = ("| run | layer | branch | payload maps | cosine, offset pairs | cosine, neighbours | cosine by lag 1..W-1 |\n|"
            + "---|" * 7)
    lines = [f"| {r['name']} | {s['layer']} | {s['branch']} | {s['maps']} | {s['cos_pairs']:.2f} | {s['cos_neighbours']:.2f} | "
             + " ".join(f"{c:.2f}" for c in s["cos_by_lag"]) + " |"
             for r in _cycled(data) for s in r["result"]["payload_similarity"]]
    return head + "\n" + "\n".join(lines)


def lag_cosine(result: dict[str, Any], delta: int, layer: int | None = None) -> float:
    """Payload cosine at lag delta (mod W), averaged over branches and over the compressed layers
    (or of one `layer`)."""
    vals = []
    for s in result["payload_similarity"]:
        if layer is not None and s["layer"] != layer:
            continue
        W = len(s["cos_by_lag"]) + 1
        vals.append(1.0 if delta % W == 0 else s["cos_by_lag"][delta % W - 1])
    return float(np.mean(vals)) if vals else math.nan


def phase_layer(result: dict[str, Any]) -> int:
    """The compressed layer whose cycle alone (with payload maps, the exact rotation) moves the curve
    best: the highest median R^2 over deltas (ties: the first)."""
    scopes = [s for s in result["scopes"] if s.startswith("layer ")]
    best = max(scopes, key=lambda s: run_summary(result, s, "with payload")["median"])
    return int(best.removeprefix("layer "))


def cosine_evidence(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Across every (testable run, delta), for the payload cosine at lag delta (mean of layers, and
    each layer): its Spearman correlation with the share of mean accuracy kept under each variant,
    and its median over the deltas where gates-only cycling holds (R^2 >= PAPER_LOWEST_R2) and
    where it does not."""
    from scipy.stats import spearmanr

    layers = sorted({s["layer"] for r in _testable(data) for s in r["result"]["payload_similarity"]})
    out = []
    for layer in [None, *layers, "phase"]:
        cos, kept, held = [], {v: [] for v in VARIANTS}, {True: [], False: []}
        for r in _testable(data):
            res = r["result"]
            sc = res["scopes"]["all"]
            at = phase_layer(res) if layer == "phase" else layer
            for i, (d, r2) in enumerate(zip(sc["gates only"]["deltas"], _r2s(sc["gates only"]))):
                c = lag_cosine(res, d["delta"], at)
                if not math.isfinite(c):
                    continue
                cos.append(c)
                held[r2 >= PAPER_LOWEST_R2].append(c)
                for v in VARIANTS:
                    kept[v].append(np.mean(sc[v]["deltas"][i]["cycled"]) / np.mean(sc[v]["baseline"]))
        rho = {v: float(spearmanr(cos, kept[v]).statistic) if len(cos) > 2 else math.nan for v in VARIANTS}
        name = ("mean of layers" if layer is None else "the layer that carries the phase" if layer == "phase"
                else f"layer {layer}")
        out.append({"layer": name, "n": len(cos), "rho": rho,
                    "held": held[True], "failed": held[False]})
    return out


def cosine_table(data: dict[str, Any]) -> str:
    med = lambda xs: f"{np.median(xs):.2f} ({len(xs)})" if xs else "none"  # noqa: E731
    head = ("| payload cosine at lag delta | (run, delta) pairs | Spearman rho with accuracy kept, gates only | "
            "with payload | median where gates only holds (deltas) | median where it fails (deltas) |\n|" + "---|" * 6)
    return head + "\n" + "\n".join(
        f"| {e['layer']} | {e['n']} | {_f(e['rho']['gates only'])} | {_f(e['rho']['with payload'])} | {med(e['held'])} | "
        f"{med(e['failed'])} |" for e in cosine_evidence(data))


def curves(data: dict[str, Any]) -> str:
    out = []
    for r in _cycled(data):
        sc = r["result"]["scopes"]["all"]
        out.append(f"- {r['name']} baseline: " + " ".join(f"{100 * a:.0f}" for a in sc["gates only"]["baseline"]))
        for v in VARIANTS:
            for d in sc[v]["deltas"]:
                out.append(f"  - {v}, delta {d['delta']}: " + " ".join(f"{100 * a:.0f}" for a in d["cycled"]))
    return "\n".join(out)


def _settings(data: dict[str, Any]) -> str:
    st = data["settings"]
    return (f"Record lookup on each card's matched task ({data['protocol']} padding), residues mod the zoo table's R; "
            f"{st['n_per_residue_all_layers']} logical examples per residue with all compressed layers cycled, "
            f"{st['n_per_residue_each_layer']} with each layer cycled alone (task seed {st['task_seed']}). Variants: "
            "**gates only** (the paper's: Z_i and b_i roll by delta, payload maps C_i stay) and **with payload** (C_i "
            "rolls too: each entry is then the uncycled entry of its window with the slots rolled by -delta). R^2 "
            "excludes the boundary phase S - 1 (reported apart, predicted -> actual); \"flat\": the cycled curve is "
            "constant, R^2 undefined, counted as a failed prediction; \"best moves\": deltas where the cycled curve's "
            "best non-boundary residue is the predicted one (mod S); \"accuracy kept\": median over deltas of the "
            "cycled mean accuracy over the baseline mean; baseline gap: best minus worst residue, with the cluster-bootstrap "
            "interval of the held-out gap (docs/statistics.md) and the permutation test's p for any phase effect (200 "
            "permutations). A run holds when its median R^2 over deltas reaches "
            f"{PAPER_LOWEST_R2}, the paper's lowest; a run is untestable when its baseline shows no phase effect "
            f"(permutation test p >= {ALPHA}) or S = 2 (every non-boundary prediction is then the old boundary phase's "
            f"accuracy). Runs come from the zoo tables (`learned` under {data['protocol']} padding); runs that did not "
            "learn and runs with nothing to cycle are listed, not cycled.")


def markdown(data: dict[str, Any]) -> str:
    return (f"# Gate cycling across the zoo\n\n{verdict(data)}\n\n{_settings(data)}\n\n"
            f"Reproduce: `{data['command']}` ({data['cpu_s'] / 60:.1f} CPU minutes; inputs and their sha256 in "
            "`cycling.json`).\n\n"
            f"## Runs (all layers cycled)\n\n{runs_table(data)}\n\n"
            f"## Per member, seeds as the unit\n\n{member_table(data)}\n\n"
            f"## Each layer alone\n\n{layer_table(data)}\n\n"
            f"## Payload maps: how alike across offsets\n\nMean cosine between C_i h and C_j h on the same layer "
            f"inputs h (32 prompts of the matched task): 1.00 means one map in effect; \"by lag\": cos(C_i h, C_(i+lag) h) "
            f"averaged over i, the maps a gates-only cycle by delta = lag confuses.\n\n{cosine_table(data)}\n\n"
            f"{similarity_table(data)}\n\n"
            f"## Every delta (all layers)\n\n{delta_table(data)}\n\n"
            f"## Curves (accuracy % by residue r = 0..R-1, all layers)\n\n{curves(data)}\n")


def docs_block(data: dict[str, Any]) -> str:
    """The numbers of docs/cycling.md: the verdict, the per-member summary, and per testable run the
    evidence: both variants (median R^2, best moves, accuracy kept), each layer alone, payload
    similarity and RoPE."""
    head = ("| run | RoPE | gates only: R^2 / best moves / kept | with payload: R^2 / best moves / kept | "
            "layer 0 alone: gates only / with payload | layer 1 alone: gates only / with payload | "
            "payload cosine layer 0 / 1 |\n|" + "---|" * 7)
    lines = []
    for r in _testable(data):
        res = r["result"]
        cells = []
        for v in VARIANTS:
            s = run_summary(res, "all", v)
            cells.append(f"{_f(s['median'])} / {s['moves']} of {s['n']} / {100 * s['kept']:.0f}%")
        for layer in (0, 1):
            scope = f"layer {layer}"
            cells.append(" / ".join(_f(run_summary(res, scope, v)["median"]) for v in VARIANTS)
                         if scope in res["scopes"] else "-")
        cos: dict[int, list[float]] = {}
        for x in res["payload_similarity"]:
            cos.setdefault(x["layer"], []).append(x["cos_pairs"])
        cells.append(" / ".join(f"{np.mean(cos[k]):.2f}" for k in sorted(cos)))
        lines.append(f"| {r['name'].removeprefix('zoo-')} | {r['rope']} | " + " | ".join(cells) + " |")
    kept = {v: float(np.median([run_summary(r["result"], "all", v)["kept"] for r in _testable(data)] or [math.nan]))
            for v in VARIANTS}
    return (f"{BEGIN}\n\n{verdict(data)}\n\n{member_table(data)}\n\nPer testable run, all layers cycled unless "
            "named: median R^2 over the deltas (\"flat\": some delta's cycled curve was constant, counted as failed), "
            "deltas whose best residue moved where predicted, and the median share of mean accuracy kept; payload cosine: "
            "mean over branches and offset pairs of cos(C_i h, C_j h). Median accuracy kept over the testable runs: "
            f"gates only {100 * kept['gates only']:.0f}%, with payload {100 * kept['with payload']:.0f}%.\n\n"
            f"Payload cosine at lag delta against what cycling by delta does (testable runs, all layers cycled):\n\n"
            f"{cosine_table(data)}\n\n"
            f"{head}\n" + "\n".join(lines) + f"\n\n{END}")


def docs_page(page: str, data: dict[str, Any]) -> str:
    """`page` with its numbers block (between BEGIN and END) replaced by `docs_block(data)`."""
    if BEGIN not in page or END not in page:
        raise ValueError(f"docs page has no numbers block: allowed a page with the lines {BEGIN!r} and {END!r}")
    return page[:page.index(BEGIN)] + docs_block(data) + page[page.index(END) + len(END):]
