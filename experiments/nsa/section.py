"""The report section of the NSA study, from its shipped results (`assets/results/nsa.json`, written
by `python -m experiments.nsa.study`)."""

from __future__ import annotations

import json
from pathlib import Path

from phaseinterp.measure.gap import heldout_text
from phaseinterp import assets
from phaseinterp.report.document import Section

RESULTS = assets.default("results/nsa.json")  # the checkout's assets/, PHASEINTERP_HOME or the wheel's package data


def nsa_section(path: Path = RESULTS):
    """Phase-curve table and curves of every NSA checkpoint, and its branch knockouts at the last layer."""
    import pandas as pd

    from phaseinterp.plot import table_figure

    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: get it from {assets.SOURCE}, or train the NSA zoo (python -m experiments.nsa.train), then "
                                "`python -m experiments.nsa.study`")
    results = json.loads(path.read_text())["results"]
    rows, knock = [], []
    for r in results:
        for c in r["curves"]:
            rows.append({"model": r["model"], "protocol": c["protocol"], "learned": c["learned"], "accuracy": c["accuracy"],
                         "W/S": f"{r['W']}/{r['S']}", "k": r["k"], "mean %": 100 * c["mean"], "worst %": 100 * c["worst"],
                         "gap pp": c["gap_pp"], "held-out gap [CI]": heldout_text(c["gap_heldout_pp"], c["gap_ci_pp"]),
                         "dominant period": c["dominant_period"], "verdict": c["verdict"]})
        for label, row in r["interventions"]["branch_all"]["rows"].items():
            knock.append({"model": r["model"], "unit": label, "mean change pp": sum(row["pp"]) / len(row["pp"]),
                          "worst change pp": min(row["pp"])})
    table = pd.DataFrame([{k: v for k, v in row.items() if k != "accuracy"} for row in rows])
    text = ("Native Sparse Attention (the open native-sparse-attention-pytorch SparseAttention in our blocks; docs/nsa.md), "
            "trained on record lookup with a sliding window of 8, so the needle comes through the compressed or the "
            "selected branch. W8/S8 with selection off (k=0), k=1, k=2 and W16/S8 with k=2, two seeds each; residues "
            "mod 16. Second table: accuracy change when a branch's output is zeroed in a layer. Details and the "
            "answer to 'does selection remove the weak phases?': assets/results/nsa.md.")
    figures = [table_figure(rows, protocol=p, title=f"NSA: accuracy by residue ({p} padding; dotted: did not learn)")
               for p in ("prefix", "insequence") if any(r["protocol"] == p for r in rows)]
    return Section("Native Sparse Attention: phase curves and branch knockouts", text, [table, pd.DataFrame(knock)], figures)


__all__ = ["RESULTS", "nsa_section"]
