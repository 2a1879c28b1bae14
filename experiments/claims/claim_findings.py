"""Claims 5 and 6 and the findings beyond the paper, judged from the result files (see `claim_checks`).

Claim 5 reads `cycling.json` (rows with member or model, seed, delta, variant, layers and r2); claim 6 and the
theory's coverage read `theory.json` (`python -m experiments.theory.run`). A missing file makes its claim say
"no result file", which is not a pass.
"""

from __future__ import annotations


from experiments.claims.claim_checks import Claim, seeds_of, share_verdict, tests_line, zoo_rows
from experiments.claims.claim_rows import ALPHA, FULL_TOLERANCE_PP, interval, mitigation_row, nsa_rows, num, pct, smollm2_row
from experiments.claims.claim_units import SEED_RULE, correct, n_of, seed_units

#: every zoo-shaped table: finding B1 reads the training rows of all of them
ZOO_TABLES = ("zoo", "zoo_seeds", "control", "variants", "rule_sweep")

#: the paper's lowest gate-cycling R^2 (the paper: 0.66-1.00): a seed's cycling "moves the weak phases as
#: predicted" when its median R^2 over the deltas reaches it
PAPER_R2 = 0.66


def _range(values: list[float]) -> str:
    lo, hi = f"{min(values):.2f}", f"{max(values):.2f}"
    return lo if lo == hi else f"{lo}-{hi}"


def _r2_or_flat(x) -> str:
    return "undefined (flat cycled curve)" if x is None else f"{x:.2f}"


def claim5(data: dict) -> Claim:
    c = Claim("5", "Gate cycling moves the weak phases as predicted", "Gate cycling moves the weak phases as predicted.",
              f"gates-only cycling (the paper's), all layers: a testable learned run passes when its median R^2 over the "
              f"deltas 1..S-1 (boundary phase excluded) reaches {PAPER_R2} (the paper's lowest); holds when every "
              "testable run passes, with exceptions when most do (cycling.json's `summary`, written by "
              "`python -m experiments.cycling.run`)")
    d = data.get("cycling")
    if d is None:
        c.findings.append("`assets/results/cycling.json`: no result file yet.")
        return c
    c.sources = [data["_paths"]["cycling"]]
    c.tests = "not applicable: cycling is judged by R^2 against the predicted shift, not by a period test"
    runs = d["summary"]["runs"]
    testable = [r for r in runs if r["testable"]]
    for r in runs:
        gates, payload = r["gates only"], r["with payload"]
        label = f"{r['member']} seed {r['seed']}"
        if not r["testable"]:
            c.findings.append(f"{label}: untestable ({r['untestable_because']}).")
            continue
        c.seeds.append(f"{r['member']}: seed {r['seed']}")
        flat = f"; {gates['flat']} of {gates['n']} deltas flat" if gates["flat"] else ""
        c.findings.append(f"{label}: gates only, median R^2 {_r2_or_flat(gates['median'])}{flat}; gates with payload "
                          f"maps: median {_r2_or_flat(payload['median'])}.")
        if not gates["holds"]:
            c.exceptions.append(f"{label}: median R^2 {_r2_or_flat(gates['median'])} < {PAPER_R2}")
    passing = sum(r["gates only"]["holds"] for r in testable)
    c.count = n_of(passing, len(testable), "testable seeds")
    with_payload = sum(r["with payload"]["holds"] for r in testable)
    c.findings.append(f"With the payload maps rolled too (the whole window grid shifted), {with_payload} of "
                      f"{len(testable)} testable runs pass the same rule.")
    c.verdict = share_verdict(passing, len(testable))
    return c


def claim6(data: dict) -> Claim:
    c = Claim("6", "Gradient flow ends in static, one-hot concentration",
              "Gradient flow on the idealized model ends in static, one-hot concentration.",
              "every seed's heads end one-hot (max gate probability >= 0.9) and static (the same position on >= 90% "
              "of held-out chunks); holds when all seeds do, with exceptions when most do")
    d = data.get("theory")
    c.tests = "not applicable: a property of the idealized model's gates, not a phase curve"
    if d is None:
        c.findings.append("`assets/results/theory.json`: no result file yet (`python -m experiments.theory.run`).")
        return c
    c.sources = [data["_paths"]["theory"]]
    runs = d["seeds"]
    ok = [r for r in runs if r["all_onehot"] and r["all_static"]]
    paired = sum(bool(r["all_paired"]) for r in runs)
    cfg = d["settings"]["theory_config"]
    c.findings.append(f"Defaults m = {cfg['m']}, S = {cfg['S']}, L = {cfg['L']}, N = {cfg['N']}, kappa = {cfg['kappa']}, "
                      f"gamma = {cfg['gamma']}, beta = {cfg['beta']}: {len(ok)} of {len(runs)} seeds end with every head "
                      f"one-hot and static; {paired} of {len(runs)} with every value one position after its key.")
    summ = d["summary"]
    c.findings.append(f"Coverage (share of the S-1 non-final positions some head holds) {summ['coverage_mean']:.3f} on "
                      f"average, against {summ['coverage_random_picks']:.3f} for independent random picks and "
                      f"{summ['coverage_theorem1']:.3f} for Theorem 1's distinct positions: uncovered positions are the "
                      "weak phases.")
    c.seeds = [f"seeds {runs[0]['seed']}-{runs[-1]['seed']} ({len(runs)})"]
    c.exceptions = [f"seed {r['seed']}" for r in runs if r not in ok]
    c.count = n_of(len(ok), len(runs))
    c.verdict = share_verdict(len(ok), len(runs))
    return c


def exclusion(data: dict) -> Claim:
    c = Claim("B1", "Exclusion shortcut", "Runs that do not learn retrieval learn an exclusion shortcut instead: they "
              "answer with the one value the demonstrations leave out.",
              "every run that learned in neither protocol scores >= 0.75 on training rows where exclusion leaves one "
              "candidate and at most 0.10 above what exclusion alone gives where it leaves several; every run that "
              "learned in both protocols scores more than that on the latter; a seed (one run) is the unit, read from "
              "every zoo-shaped table (zoo, zoo-seeds, control, variants, rule-sweep), a checkpoint re-evaluated in "
              "several tables once")
    rows = zoo_rows(data, ZOO_TABLES)
    if not rows:
        return c
    c.sources = sorted({r.source for r in rows})
    c.tests = "not applicable: a training-row statistic, not a phase curve"
    raw = {}
    for key in ZOO_TABLES:
        if data.get(key) is not None:
            raw.update({r["model"]: r.get("training_rows") for r in data[key]["rows"]})
    learned: dict[str, list[bool]] = {}
    for r in rows:
        learned.setdefault(r.run, []).append(bool(r.learned))
    never = sorted(m for m, ls in learned.items() if not any(ls) and raw.get(m))
    always = sorted(m for m, ls in learned.items() if all(ls) and raw.get(m))
    for m in never:
        t = raw[m]
        ok = t["one"] >= 0.75 and t["several"] <= t["several_by_exclusion_alone"] + 0.10
        if not ok:
            c.exceptions.append(f"{m} (did not learn): one candidate {t['one']:.2f}, several {t['several']:.2f}")
    for m in always:
        t = raw[m]
        if t["several"] <= t["several_by_exclusion_alone"] + 0.10:
            c.exceptions.append(f"{m} (learned): several candidates {t['several']:.2f}, no better than exclusion")
    if never:
        c.findings.append(f"Did not learn ({len(never)} seeds: {', '.join(never)}): training accuracy "
                          f"{_range([raw[m]['one'] for m in never])} on rows where exclusion leaves one candidate, "
                          f"{_range([raw[m]['several'] for m in never])} where it leaves several (exclusion alone: "
                          f"{_range([raw[m]['several_by_exclusion_alone'] for m in never])}).")
    if always:
        c.findings.append(f"Learned in both protocols ({len(always)} seeds): {_range([raw[m]['several'] for m in always])} "
                          "where exclusion leaves several candidates.")
    c.seeds = seeds_of(rows)
    c.count = n_of(len(never) + len(always) - len(c.exceptions), len(never) + len(always))
    c.verdict = share_verdict(len(never) + len(always) - len(c.exceptions), len(never) + len(always))
    return c


def nsa(data: dict) -> Claim:
    c = Claim("B2", "NSA selection", "In Native Sparse Attention, block selection (k >= 1) does not remove the weak "
              "phases of the compressed branch.",
              f"{SEED_RULE}. A selection seed (k >= 1) supports it when it shows a period-S effect, after "
              "Benjamini-Hochberg (false discovery rate 0.05) across the learned curves of the table; a k at which no "
              "seed learned cannot show it either way")
    d = data.get("nsa")
    if d is None:
        return c
    c.sources = [data["_paths"]["nsa"]]
    src = data["_paths"]["nsa"]
    rows = [r for res in d["results"] for r in nsa_rows(res, src)]
    c.rows = [r for r in rows if r.learned]
    fam = correct(c.rows, "bh")
    c.tests = tests_line([r for r in c.rows if r.phase_effect])
    c.findings.append(f"Multiplicity: {fam.text('learned curves')}.")
    for k in sorted({res["k"] for res in d["results"]}):
        runs = [res for res in d["results"] if res["k"] == k]
        learned = [res for res in runs if any(cv["learned"] for cv in res["curves"])]
        label = "selection off" if k == 0 else f"k = {k}"
        c.seeds.append(f"{label}: {', '.join(res['model'] for res in runs)}")
        parts = []
        for res in learned:
            for cv in res["curves"]:
                strong = [i for i, a in enumerate(cv["accuracy"]) if a >= 0.8]
                parts.append(f"{res['model']} {cv['protocol']}: {len(strong)} of {len(cv['accuracy'])} residues at >= 80% "
                             f"({pct(cv['worst'])}-{pct(cv['best'])}%)")
        c.findings.append(f"{label}: {len(learned)} of {len(runs)} runs learned" + (f"; {'; '.join(parts)}." if parts else "."))
        if k > 0 and not learned:
            c.exceptions.append(f"{label}: no run learned, so it cannot show whether selection removes the weak phases")
    selection = [res for res in d["results"] if res["k"] > 0]
    learned = [res for res in selection if any(cv["learned"] for cv in res["curves"])]
    names = {res["model"] for res in learned}
    good = [u for u in seed_units(rows) if u.run in names and u.shows_period]
    ks = sorted({res["k"] for res in learned if any(u.run == res["model"] for u in good)})
    c.count = n_of(len(good), len(selection), "selection seeds")
    c.findings.append(f"Selection seeds that learned and show a period-S effect (seed rule): "
                      f"{', '.join(u.run for u in good) or 'none'}"
                      + "".join(f"; {u.run} does not ({u.why_not()})" for u in seed_units(rows)
                                if u.run in names and not u.shows_period) + ".")
    if not good:
        c.verdict = "does not hold" if learned else "cannot fail"
    elif len(learned) == len(selection) and not c.exceptions:
        c.verdict = "holds"
    else:
        c.verdict = (f"shown at k = {', '.join(map(str, ks))} only ({len(learned)} of {len(selection)} selection runs "
                     "learned)")
    return c


def smollm2(data: dict) -> Claim:
    c = Claim("B3", "SmolLM2 training-free compression", "Training-free compression of SmolLM2-135M's keys and values "
              "gives periodic weak spots by eviction; mean and score pooling do not (beyond sampling noise).",
              "one pretrained model, so the unit is a setting (compression rule, window, layers, modulus). Eviction rows "
              "with a phase effect pass both period-S tests; no pooling row has a phase effect, a period-S dominant "
              "period and a gap above the uncompressed model's gap interval (sampling noise) at the same modulus. "
              "Multiplicity: Benjamini-Hochberg (false discovery rate 0.05) across the eviction rows, and separately "
              "across the pooling rows (p (phase), then p (period S) across those with a phase effect)")
    d = data.get("smollm2")
    if d is None:
        return c
    src = data["_paths"]["smollm2"]
    c.sources = [src]
    noise = {r["modulus"]: r["gap_ci_pp"][1] for r in d["rows"] if r["rule"] == "none"}
    evict = [(r, smollm2_row(r, src)) for r in d["rows"] if r["rule"].startswith("evict")]
    pool = [(r, smollm2_row(r, src)) for r in d["rows"] if r["rule"] in ("mean", "score")]
    fam_ev = correct([row for _, row in evict], "bh")
    fam_pool = correct([row for _, row in pool], "bh")
    c.findings.append(f"Multiplicity: eviction, {fam_ev.text('eviction rows')}; pooling, {fam_pool.text('pooling rows')}.")
    c.rows = [row for _, row in evict + pool if row.phase_effect]
    c.tests = tests_line(c.rows)
    ev = [row for _, row in evict if row.phase_effect]
    ev_ok = [row for row in ev if row.spectral_ok and row.permutation_ok]
    c.findings.append(f"Eviction: {len(ev)} of {len(evict)} rows have a phase effect; {len(ev_ok)} of them pass both tests.")
    c.exceptions += [f"{row.run} (eviction): spectral {row.dominant or 'none'}, {row.verdict}" for row in ev if row not in ev_ok]
    pe = [(r, row) for r, row in pool if row.phase_effect]
    above = [(r, row) for r, row in pe if row.gap_pp is not None and row.gap_pp > noise.get(r["modulus"], float("inf"))]
    periodic = [row for _, row in above if row.spectral_ok]
    c.count = (f"{n_of(len(ev_ok), len(ev), 'eviction settings')} with a phase effect pass; "
               f"{n_of(len(periodic), len(pool), 'pooling settings')} periodic above noise")
    c.findings.append(f"Pooling (mean, score): {len(pe)} of {len(pool)} rows have a phase effect after correction "
                      f"(adjusted p (phase) <= {ALPHA}); dominant period "
                      f"S in {sum(row.spectral_ok for _, row in pe)} of them; gap above the uncompressed gap interval's "
                      f"upper end in {len(above)} (" + (", ".join(f"{row.run}: {num(row.gap_pp)} pp vs "
                                                               f"{num(noise[r['modulus']])}" for r, row in above) or "none")
                      + ").")
    c.exceptions += [f"{row.run} (pooling): period-S gap above noise" for row in periodic]
    all_layers = [r for r, _ in pool if len((r.get("spec") or {}).get("layers") or []) > 1]
    if all_layers:
        c.findings.append(f"Pooling in all {len(all_layers[0]['spec']['layers'])} induction layers: mean accuracy "
                          f"{pct(min(r['mean'] for r in all_layers))}-{pct(max(r['mean'] for r in all_layers))}% at every "
                          "window, rule and anchor: every phase fails.")
    ko = d.get("knockout")
    if ko:
        m = ko["map"]
        cells = [(li, hi_, ri) for li, lay in enumerate(m["hi"]) for hi_, head in enumerate(lay) for ri, _ in enumerate(head)]
        below = [(li, h, ri) for li, h, ri in cells if m["hi"][li][h][ri] < 0]
        names = [f"layer {m['coords']['layer'][li]} KV {m['coords']['kv_head'][h]} residue {m['coords']['residue'][ri]} "
                 f"({num(m['values'][li][h][ri])} pp {interval((m['lo'][li][h][ri], m['hi'][li][h][ri]))})"
                 for li, h, ri in below]
        c.findings.append(f"KV-head knockout ({ko['setting']}): {len(below)} of {len(cells)} cells have an interval below "
                          f"zero ({'; '.join(names) or 'none'}); a 95% interval lies below zero by chance in about 2.5% "
                          f"of cells ({0.025 * len(cells):.1f} expected).")
    c.seeds.append("one pretrained model (no training seeds); prompts resampled by bootstrap")
    c.verdict = "holds" if ev_ok and not c.exceptions else ("holds with exceptions" if ev_ok else "does not hold")
    return c


def multi_offset(data: dict) -> Claim:
    c = Claim("B4", "Multi-offset mitigation", "Multi-offset compression (two chunk grids shifted by S/2) makes a W4/S4 "
              "model phase-uniform at equal training budget.",
              f"every seed that learned has a held-out gap interval covering 0 or within {FULL_TOLERANCE_PP:g} pp while "
              "the baseline's excludes 0; seeds that did not learn are exceptions (they show nothing)")
    d = data.get("mitigations")
    if d is None:
        return c
    src = data["_paths"]["mitigations"]
    c.sources = [src]
    curves = data.get("mitigation_curves") or {}
    rows = [mitigation_row(r, curves.get(f"{r['variant']}-seed{r['seed']}"), 4, src) for r in d["rows"]
            if r["variant"] in ("multi-offset", "baseline")]
    c.rows = rows
    c.tests = tests_line([r for r in rows if r.learned and r.phase_effect])
    multi = [r for r in rows if r.run.startswith("multi-offset")]
    base = [r for r in rows if r.run.startswith("baseline")]
    c.seeds = [f"{v}: seeds {d['settings']['seeds']}" for v in ("multi-offset", "baseline")]
    learned = [r for r in multi if r.learned]
    flat = [r for r in learned if r.within_tolerance()]
    base_gap = [r for r in base if r.gap_ci and r.gap_ci[0] > 0]
    c.exceptions = [f"{r.run}: did not learn (mean {pct(r.mean)}%)" for r in multi if not r.learned]
    c.exceptions += [f"{r.run}: held-out gap {num(r.gap_pp)} pp {interval(r.gap_ci)}" for r in learned if r not in flat]
    c.findings.append(f"multi-offset: {len(learned)} of {len(multi)} seeds learned; "
                      + "; ".join(f"{r.run} mean {pct(r.mean)}%, worst {pct(r.worst)}%, held-out gap {num(r.gap_pp)} pp "
                                  f"{interval(r.gap_ci)}" for r in multi) + ".")
    c.findings.append("baseline (W4/S4): " + "; ".join(f"{r.run} held-out gap {num(r.gap_pp)} pp {interval(r.gap_ci)}"
                                                       for r in base) + ".")
    c.count = n_of(len(flat), len(multi))
    at_ceiling = [r for r in flat if r.at_ceiling]
    if at_ceiling:
        c.findings.append(f"At ceiling (worst residue >= 99%): {', '.join(r.run for r in at_ceiling)}.")
    if not flat or len(base_gap) < len(base):
        c.verdict = "does not hold"
    elif not c.exceptions:
        c.verdict = "holds"
    else:
        c.verdict = "holds with exceptions" if 2 * len(flat) > len(multi) else f"shown in {len(flat)} of {len(multi)} seeds"
    return c


def theory_coverage(data: dict) -> Claim:
    c = Claim("B5", "Theory: coverage", "In the idealized model, heads are pushed apart (coverage above random picks) "
              "only when retrieval saturates (large beta).",
              "at the smallest beta coverage stays within 2 standard errors of independent random picks, and at the "
              "largest it exceeds them by more than that")
    c.tests = "not applicable: a property of the idealized model, not a phase curve"
    d = data.get("theory")
    if d is None or not d.get("sweep"):
        c.findings.append("`assets/results/theory.json` (sweep over beta): no result file yet "
                          "(`python -m experiments.theory.run`).")
        return c
    c.sources = [data["_paths"]["theory"]]
    sweep = sorted(d["sweep"], key=lambda r: r["beta"])

    def apart(r: dict) -> bool:
        return r["coverage"] - r["random"] > 2 * r["coverage_sem"]

    c.findings.append("Coverage by beta (mean +- s.e.m. over " + f"{sweep[0]['n_seeds']} seeds): " + "; ".join(
        f"beta {r['beta']:g}: {r['coverage']:.3f} +- {r['coverage_sem']:.3f}" for r in sweep)
        + f" (random picks {sweep[0]['random']:.3f}, Theorem 1 {sweep[0]['theorem1']:.3f}).")
    c.seeds = [f"{sweep[0]['n_seeds']} seeds per beta"]
    c.count = f"{len(sweep)} betas, {sweep[0]['n_seeds']} seeds each"
    lo, hi = sweep[0], sweep[-1]
    if apart(lo):
        c.exceptions.append(f"beta {lo['beta']:g}: coverage already above random picks")
    if not apart(hi):
        c.exceptions.append(f"beta {hi['beta']:g}: coverage not above random picks")
    c.verdict = "holds" if not c.exceptions else "does not hold"
    return c
