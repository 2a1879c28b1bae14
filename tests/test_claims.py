"""assets/results/claims.md and README.md's claims block are rendered from the result files; the verdict rules
are checked on small synthetic inputs (including the files other studies have not committed yet)."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest

from phaseinterp.report import claim_checks, claim_findings, claim_sweeps, claims

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def data():
    return claims.load_inputs(ROOT / "assets")


def test_committed_claims_page_and_readme_block_are_fresh(data):
    assert (ROOT / "assets" / "results" / "claims.md").read_text() == claims.render(data), \
        "assets/results/claims.md is stale: run `python -m phaseinterp.report.claims`"
    readme = (ROOT / "README.md").read_text()
    assert claims.with_block(readme, claims.readme_block(data)) == readme, \
        "README.md's claims block is stale: run `python -m phaseinterp.report.claims`"
    training = (ROOT / "docs" / "training.md").read_text()
    assert claims.with_block(training, claims.sweep_block(data), claims.SWEEP_BEGIN, claims.SWEEP_END) == training, \
        "docs/training.md's rule-sweep block is stale: run `python -m phaseinterp.report.claims`"


def test_check_flag_reports_a_stale_page(tmp_path, capsys):
    page, readme, training = tmp_path / "claims.md", tmp_path / "README.md", tmp_path / "training.md"
    readme.write_text(f"# x\n\n{claims.BEGIN}\nold\n{claims.END}\n\ntail\n")
    training.write_text(f"# t\n\n{claims.SWEEP_BEGIN}\nold\n{claims.SWEEP_END}\n")
    args = ["--out", str(page), "--readme", str(readme), "--training-doc", str(training), "--root", str(ROOT / "assets")]
    assert claims.main(args + ["--check"]) == 1 and "stale" in capsys.readouterr().err
    assert claims.main(args) == 0 and claims.main(args + ["--check"]) == 0
    assert readme.read_text().endswith("\n\ntail\n") and "| 1. Periodic" in readme.read_text()
    assert "Verdict (finding B7 of `assets/results/claims.md`)" in training.read_text()
    page.write_text(page.read_text().replace("holds with exceptions", "holds", 1))
    assert claims.main(args + ["--check"]) == 1
    assert claims.main(args) == 0  # the tampered page rewritten
    training.write_text(training.read_text().replace("Verdict (finding B7", "Verdict (B7"))
    assert claims.main(args + ["--check"]) == 1 and claims.main(args) == 0 and claims.main(args + ["--check"]) == 0


def test_readme_without_markers_is_a_clear_error():
    with pytest.raises(ValueError, match="claims:begin"):
        claims.with_block("no markers here", "block")


def _by_key(cs):
    return {c.key: c for c in cs}


def _claim1_counts(data) -> tuple[int, int, int]:
    """Claim 1's zoo counts straight from the tables' rows: curves of learned compressed runs with a phase effect,
    those with dominant period S, those the permutation test finds consistent with period S."""
    rows = [r for key in ("zoo", "zoo_seeds", "control", "variants", "rule_sweep") if data.get(key)
            for r in data[key]["rows"] if r.get("S") and r["learned"] and r["p_phase"] < 0.05]
    return (len(rows), sum(r["dominant_period"] == r["S"] for r in rows),
            sum(f"consistent with period {r['S']}" in r["verdict"] for r in rows))


def test_claim1_counts_and_names_the_permutation_exceptions(data):
    c = claim_checks.claim1(data)
    zoo = next(f for f in c.findings if f.startswith("zoo:"))
    # zoo, zoo-seeds, the control's harder task (its members labelled apart), the paper's variants, the rule's sweep
    n, spectral, perm = _claim1_counts(data)
    assert n >= 92 and f"zoo: {n} curves; spectral test: {spectral} of {n} curves have dominant period S; permutation " \
        f"test: {perm} of {n} are consistent with period S" in zoo
    for name in ("zoo-w12s12-s1 prefix", "zoo-w16s16-s3 insequence", "zoo-w16s8-s2 insequence", "zoo-w4s4-s2 prefix",
                 "zoo-w8s8-uniform-s3 prefix"):
        assert any(e.startswith(name) for e in c.exceptions), name
    assert c.verdict == "holds with exceptions" and c.passes
    # the DeepSeek-style kernel's prefix curve is named with the permutation test's rejection of period 4
    assert "deepseek-kernel prefix (prefix/periodicity.json; spectral: 4; permutation: phase effect, not explained by " \
           "period 4, p (period S) 0.0195)" in claims.render(data)


def test_claim1_verdict_follows_the_rows(data):
    fake = copy.deepcopy(data)
    for key in ("zoo", "zoo_seeds"):
        for r in fake[key]["rows"]:
            r["verdict"] = f"phase effect, not explained by period {r['S']}"
    assert claim_checks.claim1(fake).verdict == "does not hold"
    fake = {k: None for k in data} | {"_paths": data["_paths"]}
    assert claim_checks.claim1(fake).verdict == "no result file" and not claim_checks.claim1(fake).passes


def _control_row(member: str, seed: int, protocol: str, mean: float, ci, verdict: str, dominant, S=8, p_phase=0.0005,
                 worst=None):
    return {"model": f"zoo-{member}-s{seed}", "member": member, "seed": seed, "S": None if member.startswith("full") else S,
            "protocol": protocol, "learned": True, "mean": mean, "worst": mean - 0.1 if worst is None else worst,
            "gap_heldout_pp": (ci[0] + ci[1]) / 2, "gap_ci_pp": list(ci), "p_phase": p_phase, "p_periodic": 0.5,
            "verdict": verdict, "dominant_period": dominant}


def test_claim2_without_control_cannot_fail_and_with_one_follows_the_intervals(data):
    data = dict(data, control=None)
    c = claim_checks.claim2(data)
    assert c.verdict == "cannot fail" and not c.passes
    assert any("no result file yet" in f for f in c.findings)
    rows = [_control_row("w8s8", s, "prefix", 0.6, (40.0, 60.0), "phase effect, consistent with period 8", 8) for s in range(4)]
    rows += [_control_row("full-d64", s, "prefix", 0.7, (-2.0, 4.5), "no detectable phase effect", None, p_phase=0.4)
             for s in range(4)]
    fake = dict(data, control={"rows": rows})
    assert claim_checks.claim2(fake).verdict == "holds"
    unlearned = [dict(_control_row("full-d64", 9, "prefix", 0.01, (-1.0, 2.0), "no detectable phase effect", None), learned=False)]
    c = claim_checks.claim2(dict(data, control={"rows": rows + unlearned}))  # reported, not counted against the claim
    assert c.verdict == "holds" and any("did not learn (reported, not counted): zoo-full-d64-s9" in f for f in c.findings)
    seeds = "; ".join(claim_checks.claim1(fake).seeds)  # the harder task's seeds are never pooled with the zoo's
    assert "w8s8 (harder task): seeds [0, 1, 2, 3], learned 4 of 4" in seeds and "w8s8: seeds [0, 1, 2, 3], learned 2 of 4" in seeds
    rows[-1] = _control_row("full-d64", 3, "prefix", 0.7, (3.0, 9.0), "phase effect", None, p_phase=0.01)
    c = claim_checks.claim2(dict(data, control={"rows": rows}))
    assert c.verdict == "does not hold" and any("zoo-full-d64-s3 prefix" in e for e in c.exceptions)
    ceiling = [dict(r, mean=1.0, worst=1.0, gap_ci_pp=[0.0, 0.0]) if r["member"].startswith("full") else r for r in rows]
    assert claim_checks.claim2(dict(data, control={"rows": ceiling})).verdict == "cannot fail"


def test_claim4_reads_head_ownership(data):
    c = claim_checks.claim4(data)
    assert c.verdict.startswith("holds (compressed heads)") and "cannot fail" in c.verdict and not c.passes
    fake = copy.deepcopy(data)
    fake["heads"]["seeds"]["1"]["owners"]["1.0"] = list(range(16))  # one head owning every residue: no specialization
    c = claim_checks.claim4(fake)
    assert c.verdict.startswith("holds with exceptions") and c.exceptions[0].startswith("w8s8-kv4 seed 1")


def test_claim5_reads_cycling_summary(data):
    c = claim_findings.claim5(dict(data, cycling=None))
    assert c.verdict == "no result file" and not c.passes

    def run(member, gates, payload, testable=True):
        summ = lambda m: {"median": m, "n": 3, "flat": int(m is None), "holds": m is not None and m >= 0.66}  # noqa: E731
        return {"member": member, "seed": 0, "testable": testable, "untestable_because": None if testable else "S = 2",
                "gates only": summ(gates), "with payload": summ(payload)}

    runs = [run("w4s4", 0.95, 0.9), run("w8s8", -1.0, 0.8), run("w2s2", 0.1, 0.1, testable=False)]
    c = claim_findings.claim5(dict(data, cycling={"summary": {"runs": runs}}))
    assert c.verdict == "does not hold" and c.exceptions == ["w8s8 seed 0: median R^2 -1.00 < 0.66"]
    assert "w2s2 seed 0: untestable (S = 2)." in c.findings and any("2 of 2 testable runs pass" in f for f in c.findings)
    runs[1] = run("w8s8", 0.7, None)
    runs.append(run("w16s16", None, 0.9))  # a flat cycled curve fails
    c = claim_findings.claim5(dict(data, cycling={"summary": {"runs": runs}}))
    assert c.verdict == "holds with exceptions" and "median R^2 undefined (flat cycled curve)" in c.exceptions[0]
    assert claim_findings.claim5(data).sources == ["cycling.json"]


def test_members_section_reads_zoo_members_when_present(data):
    assert "zoo_members.json`): no result file yet" in claims.members_section(dict(data, zoo_members=None))[2]
    spread = {k: {"gap_heldout_pp": v} for k, v in (("median", 40.0), ("low", 12.5), ("high", 80.0))}
    curve = {"mean": 0.59, "mean_interval": [0.41, 0.77], "gap_heldout_pp": 18.0, "gap_interval_pp": [2.0, 30.0]}
    fake = dict(data, zoo_members={"members": [{"member": "w4s4", "protocol": "prefix", "seeds": [0, 1, 2, 3], "n_seeds": 4,
                                                "n_learned": 3, "learned_interval": [0.3, 0.95], "curves": {"all": curve},
                                                "spread": {"all": spread}}]})
    text = "\n".join(claims.members_section(fake))
    assert "| w4s4 | prefix | 4 | 3 of 4 [30.0, 95.0] | 59.0 [41.0, 77.0] | 18.0 [2.0, 30.0] | 40.0 (12.5 to 80.0) |" in text


def test_findings_beyond_the_paper(data):
    cs = _by_key(claims.evaluate(data))
    assert cs["B2"].verdict.startswith("shown at k = 1 only") and not cs["B2"].passes
    assert any("k = 2: 0 of 4 runs learned" in f for f in cs["B2"].findings)
    smol = "\n".join(cs["B3"].findings)
    assert "1 of 72 cells have an interval below zero" in smol and "dominant period S in 0 of them" in smol
    assert cs["B4"].verdict == "shown in 1 of 2 seeds" and "[95.7, 99.2]" in "\n".join(cs["B4"].findings)
    assert cs["6"].verdict == cs["B5"].verdict == "holds"


def test_theory_claims_follow_theory_json(data):
    assert claim_findings.claim6(dict(data, theory=None)).verdict == "no result file"
    assert claim_findings.theory_coverage(dict(data, theory=None)).verdict == "no result file"
    fake = copy.deepcopy(data)
    fake["theory"]["seeds"][3]["all_static"] = False
    c = claim_findings.claim6(fake)
    assert c.verdict == "holds with exceptions" and c.exceptions == [f"seed {fake['theory']['seeds'][3]['seed']}"]
    for r in fake["theory"]["sweep"]:
        r["coverage"] = r["random"]  # never above random picks: heads are not pushed apart at any beta
    assert claim_findings.theory_coverage(fake).verdict == "does not hold"


def _copy_inputs(tmp_path):
    for rel in list(claims.INPUTS.values()) + [claims.MITIGATION_CURVES]:
        src = ROOT / "assets" / rel
        if src.is_dir():
            shutil.copytree(src, tmp_path / rel)
        elif src.is_file():
            (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(src, tmp_path / rel)


def test_control_and_members_files_are_read_when_present(tmp_path):
    _copy_inputs(tmp_path)
    shutil.rmtree(tmp_path / "results" / "control", ignore_errors=True)  # the shipped control: replaced below
    (tmp_path / "results" / "control").mkdir(parents=True)
    rows = [_control_row("full-d64", s, "prefix", 0.7, (-2.0, 4.5), "no detectable phase effect", None, p_phase=0.4)
            for s in range(4)]
    (tmp_path / "results" / "control" / "control.json").write_text(json.dumps({"rows": rows}))
    spread = {k: {"gap_heldout_pp": v} for k, v in (("median", 30.0), ("low", 10.0), ("high", 50.0))}
    curve = {"mean": 0.6, "mean_interval": [0.4, 0.8], "gap_heldout_pp": 20.0, "gap_interval_pp": [5.0, 35.0]}
    (tmp_path / "results" / "zoo_members.json").write_text(json.dumps(
        {"members": [{"member": "w4s4", "protocol": "prefix", "seeds": [0, 1], "n_seeds": 2, "n_learned": 2,
                      "learned_interval": [0.342, 1.0], "curves": {"all": curve}, "spread": {"all": spread}}]}))
    data = claims.load_inputs(tmp_path)
    assert data["_paths"]["control"] == "control/control.json"
    c = claim_checks.claim2(data)
    assert c.verdict == "does not hold" and "no full-attention" not in " ".join(c.exceptions)
    assert any("full-d64 (harder task)" in s for s in c.seeds)
    assert "| w4s4 | prefix | 2 | 2 of 2 [34.2, 100.0] | 60.0 [40.0, 80.0] | 20.0 [5.0, 35.0] | 30.0 (10.0 to 50.0) |" \
        in claims.render(data)


def test_numbers_come_from_the_files(tmp_path):
    _copy_inputs(tmp_path)
    path = tmp_path / claims.INPUTS["zoo"]
    zoo = json.loads(path.read_text())
    for r in zoo["rows"]:
        if r["model"] == "zoo-w12s12-s1" and r["protocol"] == "prefix":
            r["verdict"] = "phase effect, consistent with period 12"
    path.write_text(json.dumps(zoo))
    n, _, perm = _claim1_counts(claims.load_inputs(ROOT / "assets"))
    page = claims.render(claims.load_inputs(tmp_path))
    assert f"permutation test: {perm + 1} of {n}" in page and "zoo-w12s12-s1 prefix (spectral" not in page


def _doc(rel: str) -> str:
    return " ".join((ROOT / rel).read_text().split())  # prose wraps lines anywhere


def test_docs_quote_what_the_files_say(data):
    """Hand-written sentences that issue 32 found wrong, tied to their files: a changed file fails here."""
    seeds = {(r.run, r.protocol) for r in claim_checks.claim1(data).rows
             if r.source == "zoo-seeds/zoo.json" and not r.permutation_ok}
    assert seeds == {("zoo-w16s16-s3", "prefix"), ("zoo-w16s16-s3", "insequence"), ("zoo-w16s8-s2", "insequence"),
                     ("zoo-w4s4-s2", "prefix"), ("zoo-w8s8-uniform-s2", "prefix"), ("zoo-w8s8-uniform-s3", "prefix")}
    training = _doc("docs/training.md")
    assert ("the permutation test rejects period S for W16/S16 seed 3 (both protocols), W16/S8 seed 2 (in-sequence), "
            "W4/S4 seed 2 (prefix) and uniform seeds 2 and 3 (prefix)") in training
    cards = [json.loads((ROOT / f"assets/results/rule/zoo-w16s16-unaligned-s{s}.json").read_text()) for s in (0, 1)]
    means = " and ".join(f"{100 * c['phase_curve']['mean']:.1f}%" for c in cards)
    assert f"W16/S16 at {means}" in training
    learned = {}  # run -> learned in either protocol
    for key in ("zoo", "rule_sweep"):
        for r in data[key]["rows"]:
            learned[r["model"]] = learned.get(r["model"], False) or r["learned"]
    # "Where the sweep stops, and why": which aligned runs learned
    assert not learned["zoo-w16s16-s0"] and learned["zoo-w16s16-s1"] and learned["zoo-w12s12-s0"] and learned["zoo-w12s12-s1"]
    assert not any(ok for run, ok in learned.items() if run.startswith(("zoo-w10s10-aligned-", "zoo-w10s5-aligned-")))
    shortcut = [r["training_rows"] for r in data["rule_sweep"]["rows"] if r["model"].startswith("zoo-w10s10-aligned-")]
    assert len(shortcut) == 4 and all(t["several"] > t["several_by_exclusion_alone"] for t in shortcut)
    assert "both aligned W10/S10 runs rose above exclusion alone on rows that need the key" in training
    assert not learned["zoo-w20s20-s0"] and not learned["zoo-w20s20-s1"]
    assert learned["zoo-w24s12-s0"] and not learned["zoo-w24s12-s1"] and "W24/S12 learned in one seed of two" in training
    assert learned["zoo-w10s5-s0"] and not learned["zoo-w10s10-s0"]  # the first two W10 runs, before aligning was tried
    assert not learned["zoo-w14s7-mod14-s0"] and not learned["zoo-w14s7-mod14-s1"] and learned["zoo-w14s7-s0"]
    sweep = claim_sweeps.rule_sweep(data)
    assert sorted(e.split(":")[0] for e in sweep.exceptions) == ["w10s10", "w10s5", "w14s7", "w20s20", "w24s12"]
    assert "and misses it for the five with windows from 10 on" in training
    assert "Neither W14/S7 seed learned that way" in training and "seed 0 learned from the rule's one-position start" in training
    assert "no aligned W10 run learned" in training and "neither seed learned" in training
    kernel = next(r for r in data["prefix"]["summary"] if r["model"] == "deepseek-kernel")
    assert kernel["verdict"] == "phase effect, not explained by period 4"
    assert f"p = {kernel['p_periodic']:.4f}" in training
    nsa = data["nsa"]["results"]
    selection = [r for r in nsa if r["k"] > 0]
    learned = [r for r in selection if any(c["learned"] for c in r["curves"])]
    words = {1: "one", 6: "six"}
    assert f"{words[len(learned)]} of the {words[len(selection)]} selection runs" in _doc("assets/results/nsa_answer.md")
    assert "selection does not make NSA phase-uniform at any k" not in _doc("docs/nsa.md")
