"""assets/results/claims.md and README.md's claims block are rendered from the result files; the verdict rules
are checked on small synthetic inputs (including the files other studies have not committed yet)."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from phaseinterp.measure import pack_correct
from experiments.claims import claim_checks, claim_docs, claim_findings, claim_sweeps, claims

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def data():
    return claims.load_inputs(ROOT / "assets")


def test_committed_claims_page_and_readme_block_are_fresh(data):
    assert (ROOT / "assets" / "results" / "claims.md").read_text() == claims.render(data), \
        "assets/results/claims.md is stale: run `python -m experiments.claims.claims`"
    readme = (ROOT / "README.md").read_text()
    assert claims.with_block(readme, claims.readme_block(data)) == readme, \
        "README.md's claims block is stale: run `python -m experiments.claims.claims`"
    training = (ROOT / "docs" / "training.md").read_text()
    for block, begin, end in claims.training_blocks(data):  # the rule's sweep and every claim_docs block
        assert claims.with_block(training, block, begin, end) == training, \
            f"docs/training.md's block {begin} is stale: run `python -m experiments.claims.claims`"


def test_check_flag_reports_a_stale_page(tmp_path, capsys):
    page, readme, training = tmp_path / "claims.md", tmp_path / "README.md", tmp_path / "training.md"
    readme.write_text(f"# x\n\n{claims.BEGIN}\nold\n{claims.END}\n\ntail\n")
    training.write_text(f"# t\n\n{claims.SWEEP_BEGIN}\nold\n{claims.SWEEP_END}\n"
                        + "".join(f"{b}old{e}\n" for b, e in map(claim_docs.markers, claim_docs.BLOCKS)))
    args = ["--out", str(page), "--readme", str(readme), "--training-doc", str(training), "--root", str(ROOT / "assets")]
    assert claims.main(args + ["--check"]) == 1 and "stale" in capsys.readouterr().err
    assert claims.main(args) == 0 and claims.main(args + ["--check"]) == 0
    assert readme.read_text().endswith("\n\ntail\n") and "| 1. Periodic" in readme.read_text()
    assert "Fisher exact test gives p = 0.57" in training.read_text()
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


def _claim1_seeds(data) -> tuple[int, int]:
    """Claim 1's seed count straight from the tables' rows (`test_claim_rules.independent_seed_count` repeats the
    whole rule; this is the part the page's numbers test needs): learned compressed seeds counted, and passing."""
    from experiments.claims.test_claim_rules import independent_seed_count

    return independent_seed_count(data)


def test_claim1_counts_seeds_and_names_the_failing_ones(data):
    c = claim_checks.claim1(data)
    n, passing, failing = _claim1_seeds(data)
    assert n >= 40 and c.count == f"{passing} of {n} seeds"
    assert sorted(e.split(":")[0] for e in c.exceptions if e.startswith("zoo-")) == sorted(failing)
    assert f"Seeds: {passing} of {n} learned seeds show a period-S effect by the rule" in " ".join(c.findings)
    # the harder task is separate evidence, never extra seeds
    assert all(not e.startswith("zoo-") or "(harder task)" not in e for e in c.exceptions)
    assert any(f.startswith("Harder task (`control/zoo.json`") and "not extra seeds" in f for f in c.findings)
    assert c.verdict == "holds with exceptions" and c.passes
    # the DeepSeek-style kernel's prefix curve is named with the permutation test's rejection of period 4
    assert "deepseek-kernel prefix (prefix/periodicity.json; spectral: 4; permutation: phase effect, not explained by " \
           "period 4, p (period S) 0.0195)" in claims.render(data)


def test_claim1_verdict_follows_the_rows(data):
    fake = copy.deepcopy(data)
    for key in claim_checks.MATCHED:
        for r in fake[key]["rows"]:
            r["verdict"], r["p_periodic"] = f"phase effect, not explained by period {r['S']}", 0.0005
    for key in ("prefix", "insequence"):
        for r in fake[key]["summary"]:
            r["p_periodic"] = 0.0005
    assert claim_checks.claim1(fake).verdict == "does not hold"
    fake = {k: None for k in data} | {"_paths": data["_paths"]}
    assert claim_checks.claim1(fake).verdict == "no result file" and not claim_checks.claim1(fake).passes


def _bits(rates, seed: int, n: int = 256) -> dict:
    """Packed correctness of n examples with per-residue success rates `rates` (and example-level noise)."""
    rng = np.random.default_rng(seed)
    x = rng.random((n, len(rates))) < np.asarray(rates) + rng.normal(0, 0.02, (n, 1))
    return {"examples": n, "bits": pack_correct(x)}


PERIODIC = [0.9] * 6 + [0.1] * 2 + [0.9] * 6 + [0.1] * 2  # S = 8 at R = 16: two weak phases
FLAT = [0.7] * 8  # full attention, residues mod 8


def _control_row(member: str, seed: int, protocol: str, mean: float, ci, verdict: str, dominant, S=8, p_phase=0.0005,
                 worst=None, rates=None):
    full = member.startswith("full")
    return {"model": f"zoo-{member}-s{seed}", "member": member, "seed": seed, "S": None if full else S,
            "protocol": protocol, "learned": True, "mean": mean, "worst": mean - 0.1 if worst is None else worst,
            "gap_heldout_pp": (ci[0] + ci[1]) / 2, "gap_ci_pp": list(ci), "p_phase": p_phase, "p_periodic": 0.5,
            "verdict": verdict, "dominant_period": dominant,
            "correct": _bits(rates if rates is not None else FLAT if full else PERIODIC, seed)}


def test_claim2_without_control_cannot_fail_and_with_one_follows_the_period_component(data):
    data = dict(data, control=None)
    c = claim_checks.claim2(data)
    assert c.verdict == "cannot fail" and not c.passes
    assert any("no result file yet" in f for f in c.findings)
    rows = [_control_row("w8s8", s, "prefix", 0.6, (40.0, 60.0), "phase effect, consistent with period 8", 8) for s in range(4)]
    rows += [_control_row("full-d64", s, "prefix", 0.7, (-2.0, 4.5), "no detectable phase effect", None, p_phase=0.4)
             for s in range(4)]
    fake = dict(data, control={"rows": rows})
    c = claim_checks.claim2(fake)
    assert c.verdict == "holds" and c.count == "4 of 4 seeds", c.exceptions
    assert any(f.startswith("Power, w8s8 (harder task): 4 of 4 learned seeds") for f in c.findings)
    unlearned = [dict(_control_row("full-d64", 9, "prefix", 0.01, (-1.0, 2.0), "no detectable phase effect", None),
                      learned=False)]
    c = claim_checks.claim2(dict(data, control={"rows": rows + unlearned}))  # reported, not counted against the claim
    assert c.verdict == "holds" and any("did not learn (reported, not counted): zoo-full-d64-s9" in f for f in c.findings)
    seeds = "; ".join(claim_checks.claim1(fake).seeds)  # the harder task's seeds are never pooled with the zoo's
    assert "w8s8 (harder task): seeds [0, 1, 2, 3], learned 4 of 4" in seeds and "w8s8: seeds [0, 1, 2, 3], learned 2 of 4" in seeds
    # a full-attention seed with a period-8 pattern (a flat gap would not matter: the component decides)
    wavy = [0.8, 0.8, 0.8, 0.8, 0.6, 0.6, 0.6, 0.6]
    rows[-1] = _control_row("full-d64", 3, "prefix", 0.7, (-1.0, 1.0), "no detectable phase effect", None, rates=wavy)
    c = claim_checks.claim2(dict(data, control={"rows": rows}))
    assert c.verdict == "does not hold" and [e.split(":")[0] for e in c.exceptions] == ["zoo-full-d64-s3"]
    assert "upper bound" in c.exceptions[0] and c.count == "3 of 4 seeds"
    # no power: compressed seeds whose component is as small as full attention's
    flat_comp = [_control_row("w8s8", s, "prefix", 0.6, (0.0, 2.0), "no detectable phase effect", None, rates=[0.6] * 16)
                 for s in range(4)]
    c = claim_checks.claim2(dict(data, control={"rows": flat_comp + rows[4:7]}))
    assert c.verdict == "does not hold" and any("no learned seed with a period-S component above" in e for e in c.exceptions)
    ceiling = [dict(r, mean=1.0, worst=1.0, correct=_bits([1.0] * 8, 0)) if r["member"].startswith("full") else r
               for r in rows]
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
    path = tmp_path / claims.INPUTS["zoo_seeds"]
    table = json.loads(path.read_text())
    for r in table["rows"]:
        if r["model"] == "zoo-w16s16-s3":  # both protocols reject period 16: make them consistent with it
            r["p_periodic"], r["verdict"] = 0.9, "phase effect, consistent with period 16"
    path.write_text(json.dumps(table))
    n, passing, _ = _claim1_seeds(claims.load_inputs(ROOT / "assets"))
    page = claims.render(claims.load_inputs(tmp_path))
    section = page.split("## Claim 1:")[1].split("## Claim 2:")[0]
    assert f"- Counted: {passing + 1} of {n} seeds" in section and "zoo-w16s16-s3: period S rejected" not in section


def _doc(rel: str) -> str:
    return " ".join((ROOT / rel).read_text().split())  # prose wraps lines anywhere


def test_docs_quote_what_the_files_say(data):
    """Hand-written sentences that issue 32 found wrong, tied to their files: a changed file fails here."""
    seeds = {(r.run, r.protocol) for r in claim_checks.claim1(data).rows
             if r.source == "zoo-seeds/zoo.json" and r.phase_effect and not r.permutation_ok}
    assert seeds == {("zoo-w16s16-s3", "prefix"), ("zoo-w16s16-s3", "insequence"), ("zoo-w16s8-s2", "insequence"),
                     ("zoo-w4s4-s2", "prefix"), ("zoo-w8s8-uniform-s2", "prefix"), ("zoo-w8s8-uniform-s3", "prefix")}
    training = _doc("docs/training.md")
    assert ("after claim 1's correction the permutation test rejects period S for W16/S16 seed 3 (both protocols), W16/S8 "
            "seed 2 (in-sequence), W4/S4 seed 2 (prefix) and uniform seeds 2 and 3 (prefix)") in training
    aligned = {(r.run, r.protocol) for r in claim_checks.claim1(data).rows
               if r.source == "zoo.json" and r.phase_effect and not r.permutation_ok
               and r.run.startswith(("zoo-w12s12", "zoo-w16s16", "zoo-w16s8", "zoo-w8s8-uniform"))}
    assert aligned == {("zoo-w12s12-s1", "prefix"), ("zoo-w8s8-uniform-s1", "prefix"), ("zoo-w16s16-s1", "insequence")}
    assert ("after claim 1's correction the permutation test rejects period S for W12/S12 seed 1 and uniform seed 1 in "
            "the prefix protocol and for W16/S16 seed 1 in-sequence") in training
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


def test_issue_41_sentences_are_backed_or_gone(data):
    """The sentences issue 41 found stronger than their files: corrected, or tied here to the files."""
    readme, results, training = _doc("README.md"), _doc("docs/results.md"), _doc("docs/training.md")
    assert "trains any compressor" not in readme and "one recipe rule for every compressor" not in results
    assert "no weak phase left" not in training and "halved" not in training
    assert "not a compressor the rule cannot train" not in training
    assert "every learned compressed curve with a phase effect has dominant period S" not in training
    assert "so this control cannot fail: claim 2" not in training
    # B1 reads every zoo-shaped table, as docs/training.md now says
    b1 = claim_findings.exclusion(data)
    assert b1.sources == sorted(data["_paths"][k] for k in claim_findings.ZOO_TABLES)
    assert "which checks this on every zoo-shaped table: zoo, zoo-seeds, control, variants and rule-sweep" in training
    # "every member of the zoo learned in at least half of its seeds": zoo and zoo-seeds, either protocol
    seeds: dict[str, dict[int, bool]] = {}
    for key in ("zoo", "zoo_seeds"):
        for r in data[key]["rows"]:
            seeds.setdefault(r["member"], {})
            seeds[r["member"]][r["seed"]] = seeds[r["member"]].get(r["seed"], False) or r["learned"]
    assert all(2 * sum(s.values()) >= len(s) for s in seeds.values())
    assert "every member of the zoo learned in at least half of its seeds" in training
    # "outside the zoo it misses its bar for every pair with a window of 10 or more"
    sweep = claim_sweeps.rule_sweep(data)
    failed = {e.split(":")[0] for e in sweep.exceptions}
    pairs = {m for m in (claim_checks.member_of(r["model"]) for r in data["rule_sweep"]["rows"])
             if claim_sweeps.PAIR.fullmatch(m)}
    assert failed == {m for m in pairs if int(m[1:].split("s")[0]) >= 10}
    assert "outside the zoo it misses its bar for every pair with a window of 10 or more" in training
    # numbers are rendered between markers (test_committed_claims_page_and_readme_block_are_fresh checks them)
    for name in claim_docs.BLOCKS:
        assert all(m in (ROOT / "docs" / "training.md").read_text() for m in claim_docs.markers(name))
    assert "33.6 [28.1, 39.5] / 31.6 [26.2, 37.1]" in training and "Fisher exact test gives p = 0.57" in training
    assert "and 1 in none (zoo-csa-s1, insequence: none)" in training
