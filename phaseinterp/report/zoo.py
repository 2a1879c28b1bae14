"""The report section of the zoo, from its shipped table (`assets/results/zoo.json`, written by
`python -m experiments.zoo.table`)."""

from __future__ import annotations

import json
from pathlib import Path

from phaseinterp.measure.gap import heldout_text
from phaseinterp import assets
from phaseinterp.report.document import Section
from phaseinterp.tasks.names import PROTOCOLS

RESULTS = assets.default("results/zoo.json")  # the checkout's assets/, PHASEINTERP_HOME or the wheel's package data
#: more seeds of the members whose zoo seed failed (`assets/results/zoo-seeds`, docs/training.md)
SEEDS = assets.default("results/zoo-seeds/zoo.json")


def zoo_section(path: Path = RESULTS, seeds: Path = SEEDS):
    """The report section of the shipped zoo table: the table and the prefix-padding curves; with
    the table of further seeds (when shipped), each member's share of seeds that learned."""
    from phaseinterp.plot import zoo_figure

    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: get it from {assets.SOURCE}, or train the zoo (python -m experiments.zoo.train), then "
                                "`python -m experiments.zoo.table`")
    rows = json.loads(path.read_text())["rows"]
    more = json.loads(seeds.read_text())["rows"] if seeds.is_file() else []
    text = ("Every compressor trained by one recipe rule (docs/training.md), two seeds, evaluated on its matched "
            "record-lookup task at residues mod lcm(S, 8). 'learned': best residue >= 80%. A learned compressed "
            "model should show dominant period S; full attention should be flat. 'aligned start': for its first N steps "
            "every training query's key sat at residue p mod R (windows of 12 and more, uniform gates): the phase the "
            "model first retrieves at is the data's choice; where its strong phases end up, and their repetition at "
            "r + S, are the model's (docs/training.md). 'training acc k = 1 / k >= 2': final-query accuracy on training "
            "rows with one undemonstrated record (answerable by exclusion, without matching the key) and with several "
            "(exclusion alone: 0.32); every run that did not learn scores high on the first and near 0.32 on the second "
            "(docs/training.md, 'The exclusion shortcut'). Regenerate with "
            "`python -m experiments.zoo.train` and `python -m experiments.zoo.table`.")
    tables = [_table(rows)]
    if more:
        rates = learned_share(rows + more, members={r["member"] for r in more})
        text += (" Second table: more seeds of the members whose zoo seed failed (assets/results/zoo-seeds, "
                 "docs/training.md); seeds that learned in at least one padding protocol, of all seeds run: "
                 + "; ".join(f"{m} {k} of {n}" for m, (k, n) in sorted(rates.items())) + ".")
        tables.append(_table(more))
    return Section("The zoo: phase curves of every compressor", text, tables,
                   [zoo_figure(rows, protocol=p) for p in PROTOCOLS if any(r["protocol"] == p for r in rows)])


def learned_share(rows: list[dict], members: set[str]) -> dict[str, tuple[int, int]]:
    """Per member in `members`: (seeds that learned in at least one protocol, seeds in `rows`)."""
    seeds: dict[str, dict[int, bool]] = {}
    for r in rows:
        if r["member"] in members:
            by_seed = seeds.setdefault(r["member"], {})
            by_seed[r["seed"]] = by_seed.get(r["seed"], False) or bool(r["learned"])
    return {m: (sum(s.values()), len(s)) for m, s in seeds.items()}


def _table(rows: list[dict]):
    import pandas as pd

    return pd.DataFrame([{"model": r["model"], "architecture": r["architecture"], "KV heads": r["kv_heads"],
                          "padding": r["protocol"], "R": r["modulus"], "steps": r["steps"],
                          "aligned start": _aligned_text(r.get("aligned_start")), "learned": r["learned"],
                          "mean %": 100 * r["mean"], "worst %": 100 * r["worst"], "gap pp": r["gap_pp"],
                          "held-out gap [CI]": heldout_text(r["gap_heldout_pp"], r["gap_ci_pp"]), "best r": r["best_residue"],
                          "dominant period": r["dominant_period"], "verdict": r["verdict"],
                          **_training_rows(r.get("training_rows"))} for r in rows])


def _training_rows(summary: dict | None) -> dict[str, float]:
    return {} if summary is None else {"training acc k = 1": summary["one"], "training acc k >= 2": summary["several"]}


def _aligned_text(aligned: dict | None) -> str:
    return "" if not aligned else f"r = {aligned['phase']} mod {aligned['modulus']}, first {aligned['steps']} steps"


__all__ = ["RESULTS", "SEEDS", "learned_share", "zoo_section"]
