"""The report section of the mitigation experiment, from its shipped results
(`assets/results/mitigations/`, written by `python -m experiments.mitigations.run`): the table, worst-phase accuracy
against KV memory, and the knockout maps of the baseline and the best mitigation."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from phaseinterp import assets
from phaseinterp.report.document import Section

RESULTS = assets.default("results/mitigations")  # the checkout's assets/, PHASEINTERP_HOME or the wheel's package data


def mitigation_section(results: Path = RESULTS):
    from phaseinterp.measure.specialization import SpecializationMap
    from phaseinterp.plot import memory_figure
    from phaseinterp.plot import map_figure

    path = results / "mitigations.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: get it from {assets.SOURCE}, or run `python -m experiments.mitigations.run --out {results}`")
    data = json.loads(path.read_text())
    rows = pd.DataFrame(data["rows"])
    summary = pd.DataFrame(data["summary"])
    cols = [c for c in ("variant", "seeds", "learned", "mean", "worst", "worst_min", "gap_pp", "gap_min", "gap_max", "p_periodic",
                        "entries_per_token", "gap_reduction_pp", "reduction_per_extra_entry", "train_cpu_s")
            if c in summary]
    figures = [memory_figure(rows)]
    for name in ("baseline", data.get("best")):
        map_path = results / "knockout" / f"{name}.json"
        if name and map_path.is_file():
            smap = SpecializationMap.load(map_path)
            figures.append(map_figure(smap, title=f"{smap.meta.get('label', name)}: KV-head knockout ({smap.quantity})"))
    s = data["settings"]
    text = (f"Every variant trained with the W4/S4 recipe at equal budget ({s.get('steps') or 2000} steps, seeds "
            f"{s['seeds']}), evaluated on record lookup mod 8 ({s['n_per_residue']} examples per residue). "
            f"Best mitigation (highest worst-phase accuracy, mean over seeds): {data.get('best')}. A run 'learned' "
            "when its mean accuracy is >= 40% (chance 10%; 25% by excluding the demonstrated values). Entries per token: compressed cache "
            "entries per token and KV head at long context. Knockout maps: the most accurate seed of the baseline "
            "and of the best mitigation. Regenerate with `python -m experiments.mitigations.run --out DIR --jobs 2`.")
    return Section("Mitigations: toward phase-uniform compression", text, [summary[cols]], figures)


__all__ = ["RESULTS", "mitigation_section"]
