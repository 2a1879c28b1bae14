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


#: the zoo's members across seeds (`python -m experiments.zoo.members_table`)
MEMBERS = assets.default("results/zoo_members.json")


def zoo_section(path: Path = RESULTS, seeds: Path = SEEDS, members: Path = MEMBERS):
    """The report section of the shipped zoo table: the members across seeds (when their table is
    shipped), then every run (the zoo's seeds; the further seeds) and the prefix-padding curves."""
    from phaseinterp.plot import table_figure

    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: get it from {assets.SOURCE}, or train the zoo (python -m experiments.zoo.train), then "
                                "`python -m experiments.zoo.table`")
    rows = json.loads(path.read_text())["rows"]
    more = json.loads(seeds.read_text())["rows"] if seeds.is_file() else []
    summary = json.loads(members.read_text())["members"] if members.is_file() else []
    text = ("Every compressor trained by one recipe rule (docs/training.md), evaluated on its matched "
            "record-lookup task at residues mod lcm(S, 8). 'learned': best residue >= 80%. A learned compressed "
            "model should show dominant period S; full attention should be flat. 'aligned start': for its first N steps "
            "every training query's key sat at residue p mod R (windows of 12 and more, uniform gates): the phase the "
            "model first retrieves at is the data's choice; where its strong phases end up, and their repetition at "
            "r + S, are the model's (docs/training.md). 'training acc k = 1 / k >= 2': final-query accuracy on training "
            "rows with one undemonstrated record (answerable by exclusion, without matching the key) and with several "
            "(exclusion alone: 0.32); every run that did not learn scores high on the first and near 0.32 on the second "
            "(docs/training.md, 'The exclusion shortcut'). Regenerate with "
            "`python -m experiments.zoo.train`, `python -m experiments.zoo.table` and `python -m experiments.zoo.members_table`.")
    tables = []
    if summary:
        text += (" Seeds are the unit: the first table is each member across its seeds (assets/results/zoo_members.json; "
                 "median and range across seeds, a seed that did not learn included; the member curve's intervals are a "
                 "two-level bootstrap, seeds then examples; docs/statistics.md). Seeds that learned in either padding "
                 "protocol, of all seeds run [95% Wilson interval]: " + "; ".join(
                     f"{m['member']} {s['learned']} of {s['seeds']} [{100 * s['interval'][0]:.0f}, {100 * s['interval'][1]:.0f}]%"
                     for m, s in _by_member(summary)) + ". The tables after it list every run (one seed each).")
        tables.append(members_frame(summary))
    tables.append(_table(rows))
    if more:
        text += " The last table: more seeds (assets/results/zoo-seeds, docs/training.md)."
        tables.append(_table(more))
    return Section("The zoo: phase curves of every compressor", text, tables,
                   [table_figure(rows, protocol=p, title=f"The zoo: accuracy by residue ({p} padding; dotted: did not learn)")
                    for p in PROTOCOLS if any(r["protocol"] == p for r in rows)])


def _by_member(summary: list[dict]) -> list[tuple[str, dict]]:
    """(member row, its share learned in either protocol), once per member."""
    seen: dict[str, dict] = {}
    for m in summary:
        seen.setdefault(m["member"], m)
    return [(m, m["learned_any_protocol"]) for m in seen.values()]


def members_frame(summary: list[dict]):
    """The member table (zoo_members.json's "members") as a DataFrame: one row per member and protocol."""
    import pandas as pd

    def spread(m, key, scale):
        s = m["spread"]["all"]
        return None if s["median"][key] is None else f"{scale * s['median'][key]:.1f} ({scale * s['low'][key]:.1f} to {scale * s['high'][key]:.1f})"

    def estimate(curve, key, interval, scale=1.0):
        if curve[key] is None:
            return None
        return f"{scale * curve[key]:.1f} [{scale * curve[interval][0]:.1f}, {scale * curve[interval][1]:.1f}]"

    return pd.DataFrame([{
        "member": m["member"], "architecture": m["architecture"], "padding": m["protocol"], "seeds": m["n_seeds"],
        "learned [95% Wilson %]": f"{m['n_learned']} of {m['n_seeds']} [{100 * m['learned_interval'][0]:.0f}, "
                                  f"{100 * m['learned_interval'][1]:.0f}]",
        "mean % median (range)": spread(m, "mean", 100), "worst % median (range)": spread(m, "worst", 100),
        "held-out gap pp median (range)": spread(m, "gap_heldout_pp", 1),
        "member curve mean % [CI]": estimate(m["curves"]["all"], "mean", "mean_interval", 100),
        "seeds' held-out gap pp [CI]": estimate(m["curves"]["all"], "seed_gap_pp", "seed_gap_interval_pp"),
    } for m in summary])


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


__all__ = ["MEMBERS", "RESULTS", "SEEDS", "members_frame", "zoo_section"]
