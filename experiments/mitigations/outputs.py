"""Outputs of the mitigation experiment: the table (CSV, JSON, Markdown), the figure (worst-phase
accuracy against cache entries per token) and knockout maps of the best mitigation and the
baseline."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from experiments.mitigations.experiment import MODULUS
from phaseinterp.measure.gap import GAP_HEADER, GAP_NOTE, gap_text
from phaseinterp.plot import memory_figure
from experiments.mitigations.variants import VARIANTS

KNOCKOUT_THRESHOLD = 50.0


def knockout_comparison(rows: pd.DataFrame, best: str, *, n_per_residue: int, seed: int = 0
                        ) -> dict[str, Any]:
    """KV-head knockout maps of the baseline and `best`, each on its seed with the highest mean
    accuracy (absolute change in pp with intervals; a run that never learned shows no effect to map)."""
    from phaseinterp.checkpoint import load
    from phaseinterp.interventions import knockout_map
    from phaseinterp.tasks import RecordLookup

    out = {}
    for name in ("baseline", best):
        row = rows[rows.variant == name].sort_values(["mean", "seed"], ascending=[False, True]).iloc[0]
        model = load(row.checkpoint).eval()
        mix = VARIANTS[name].configs(int(row.seed))[1].mixture
        task = RecordLookup(**{**mix.eval_task_kwargs(), "protocol": "prefix"})
        batch = task.sample(n_per_residue, MODULUS, seed=seed)
        calib = task.sample(n_per_residue, MODULUS, seed=seed, split="calibration")
        smap = knockout_map(model, batch, calib, n_boot=200, seed=seed, label=f"{name}-seed{int(row.seed)}")
        out[name] = smap
    return out


def knockout_summary(maps: dict[str, Any]) -> dict[str, Any]:
    return {name: {"coverage": m.coverage(KNOCKOUT_THRESHOLD, significant=True), "uncovered_residues": m.uncovered(KNOCKOUT_THRESHOLD, significant=True),
                   "label": m.meta.get("label")} for name, m in maps.items()}


def markdown_table(summary: pd.DataFrame, rows: pd.DataFrame) -> str:
    lines = ["| variant | seeds (learned) | mean % | worst % (worst seed) | gap pp (seed range; held-out mean [widest bounds]) | p periodic (max) "
             "| entries/token | gap reduction pp | per extra entry/token | train CPU s |",
             "|---|---|---|---|---|---|---|---|---|---|"]  # learned: mean accuracy >= LEARNED
    for r in summary.itertuples():
        per = getattr(r, "reduction_per_extra_entry", np.nan)
        red = getattr(r, "gap_reduction_pp", np.nan)
        lines.append(
            f"| {r.variant} | {r.seeds} ({r.learned}) | {100 * r.mean:.1f} | {100 * r.worst:.1f} ({100 * r.worst_min:.1f}) "
            f"| {r.gap_pp:.1f} "
            f"({r.gap_min:.1f}-{r.gap_max:.1f}; {r.gap_heldout:.1f} [{r.gap_lo:.1f}, {r.gap_hi:.1f}]) | {r.p_periodic:.3g} "
            f"| {r.entries_per_token:.3g} | {red:.1f} | {'-' if not np.isfinite(per) else f'{per:.1f}'} "
            f"| {r.train_cpu_s:.0f} |")
    lines += ["", "Per run:", "", "| run | mean % | worst % (95% bootstrap) | " + GAP_HEADER + " | p periodic | source |",
              "|---|---|---|---|---|---|"]
    for r in rows.itertuples():
        lines.append(f"| {r.variant}-seed{r.seed} | {100 * r.mean:.1f} | {100 * r.worst:.1f} "
                     f"({100 * r.worst_lo:.1f}-{100 * r.worst_hi:.1f}) | {gap_text(r.gap_pp, r.gap_heldout, (r.gap_lo, r.gap_hi))} "
                     f"| {r.p_periodic:.3g} | {r.source} |")
    return "\n".join(lines) + "\n\n" + GAP_NOTE + "\n"


def write_outputs(out: str | Path, result: dict[str, Any], settings, maps: dict[str, Any] | None, *,
                  png: bool = False) -> list[Path]:
    from phaseinterp.measure.provenance import dumps, jsonable, versions
    from phaseinterp.plot import save_html
    from phaseinterp.plot import map_figure

    out = Path(out)
    rows, summary = result["rows"], result["summary"]
    written = [out / "mitigations.csv", out / "mitigations.json", out / "mitigations.md", out / "mitigations.html"]
    rows.to_csv(written[0], index=False)
    payload = {"settings": jsonable(settings.__dict__), "variants": {n: VARIANTS[n].description for n in rows.variant.unique()},
               "summary": summary.to_dict(orient="records"), "rows": rows.to_dict(orient="records"),
               "best": result["best"], "wall_s": result["wall_s"], "versions": versions()}
    fig = memory_figure(rows)
    figures = {"mitigations": fig}
    if maps:
        payload["knockout"] = knockout_summary(maps)
        for name, smap in maps.items():
            smap.save(out / "knockout" / f"{name}.json")
            figures[f"knockout-{name}"] = map_figure(smap, title=f"{smap.meta.get('label', name)}: KV-head knockout ({smap.quantity})")
            written.append(save_html(figures[f"knockout-{name}"], out / "knockout" / f"{name}.html", root=out.parent))
    written[1].write_text(dumps(payload))
    written[2].write_text(markdown_table(summary, rows))
    save_html(fig, written[3], root=out.parent)  # one plotly.js beside the other studies' results: offline
    if png:
        try:
            for name, f in figures.items():
                f.write_image(out / f"{name}.png")
                written.append(out / f"{name}.png")
        except Exception as err:  # kaleido or a browser missing: the HTML figures are complete
            print(f"note: PNG export skipped ({type(err).__name__}: {err})")
    return written


__all__ = ["KNOCKOUT_THRESHOLD", "knockout_comparison", "knockout_summary", "markdown_table", "write_outputs"]
