"""The report section of the zoo, from its shipped table (`assets/results/zoo.json`, written by
`python -m phaseinterp.train.zoo_table`)."""

from __future__ import annotations

import json
from pathlib import Path

from phaseinterp.measure.gap import heldout_text
from phaseinterp.report.document import Section
from phaseinterp.tasks.names import PROTOCOLS

RESULTS = Path(__file__).resolve().parents[2] / "assets" / "results" / "zoo.json"


def zoo_section(path: Path = RESULTS):
    """The report section of the shipped zoo table: the table and the prefix-padding curves."""
    import pandas as pd

    from phaseinterp.plot import zoo_figure

    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: train the zoo (scripts/train_zoo.py), then "
                                "`python -m phaseinterp.train.zoo_table`")
    rows = json.loads(path.read_text())["rows"]
    table = pd.DataFrame([{"model": r["model"], "architecture": r["architecture"], "KV heads": r["kv_heads"],
                           "padding": r["protocol"], "R": r["modulus"], "steps": r["steps"],
                           "aligned start": _aligned_text(r.get("aligned_start")), "learned": r["learned"],
                           "mean %": 100 * r["mean"], "worst %": 100 * r["worst"], "gap pp": r["gap_pp"],
                           "held-out gap [CI]": heldout_text(r["gap_heldout_pp"], r["gap_ci_pp"]), "best r": r["best_residue"],
                           "dominant period": r["dominant_period"], "verdict": r["verdict"],
                           **_training_rows(r.get("training_rows"))} for r in rows])
    text = ("Every compressor trained by one recipe rule (docs/training.md), two seeds, evaluated on its matched "
            "record-lookup task at residues mod lcm(S, 8). 'learned': best residue >= 80%. A learned compressed "
            "model should show dominant period S; full attention should be flat. 'aligned start': for its first N steps "
            "every training query's key sat at residue p mod R (windows of 12 and more, uniform gates): the phase the "
            "model first retrieves at is the data's choice; where its strong phases end up, and their repetition at "
            "r + S, are the model's (docs/training.md). 'training acc k = 1 / k >= 2': final-query accuracy on training "
            "rows with one undemonstrated record (answerable by exclusion, without matching the key) and with several "
            "(exclusion alone: 0.32); every run that did not learn scores high on the first and near 0.32 on the second "
            "(docs/training.md, 'The exclusion shortcut'). Regenerate with "
            "`python scripts/train_zoo.py` and `python -m phaseinterp.train.zoo_table`.")
    return Section("The zoo: phase curves of every compressor", text, [table],
                   [zoo_figure(rows, protocol=p) for p in PROTOCOLS if any(r["protocol"] == p for r in rows)])


def _training_rows(summary: dict | None) -> dict[str, float]:
    return {} if summary is None else {"training acc k = 1": summary["one"], "training acc k >= 2": summary["several"]}


def _aligned_text(aligned: dict | None) -> str:
    return "" if not aligned else f"r = {aligned['phase']} mod {aligned['modulus']}, first {aligned['steps']} steps"


__all__ = ["RESULTS", "zoo_section"]
