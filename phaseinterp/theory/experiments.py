"""The four theory experiments. Each returns an `Experiment`: tidy pandas tables, plotly figures
and a provenance record (configs, seeds, Monte Carlo sample sizes, library versions).

    (a) `run_trajectory`  gates p^K, p^V per head and position, loss and speed along one flow
    (b) `run_seeds`       over many seeds: end positions, coverage, one-hot/static, per-phase accuracy
    (c) `run_sweep`       coverage and convergence against m, S, N, kappa, init radius (one at a time)
    (d) `run_optimum`     end-point loss against the Theorem 1 optimum; exact static-rule survey

Example:
    >>> exp = run_trajectory(TheoryConfig(N=64), FlowConfig(n_steps=20), seed=0)
    >>> sorted(exp.tables)
    ['gates', 'heads', 'loss', 'speed']
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from phaseinterp.measure.outputs import atomic_path, write_atomic
from phaseinterp.measure.provenance import versions
from phaseinterp.theory import figures
from phaseinterp.theory.config import FlowConfig, TheoryConfig
from phaseinterp.theory.diagnostics import Evaluation, best_coverage, evaluate, expected_random_coverage
from phaseinterp.theory.flow import FlowResult, integrate
from phaseinterp.theory.optimum import static_rule_survey, theorem1_loss

#: Default one-at-a-time grid for `run_sweep` (m is filled in as 1..S-1).
DEFAULT_GRID: dict[str, list] = {
    "m": [],
    "S": [4, 6, 8, 12],
    "N": [64, 256, 1024],
    "kappa": [0.0, 0.1, 0.25, 1.0],
    "init_radius": [0.05, 10.0, 30.0, 100.0],
    "beta": [2.0, 3.0, 5.0, 7.0],
}


@dataclass
class Experiment:
    """Result of one experiment: ``tables`` (tidy DataFrames), ``figures``, ``meta`` (provenance)."""

    name: str
    tables: dict[str, pd.DataFrame]
    figures: dict[str, go.Figure]
    meta: dict = field(default_factory=dict)

    def save(self, out_dir: str | Path) -> list[Path]:
        """Write ``<table>.csv``, ``<table>.json`` (records), ``meta.json`` and ``<figure>.html``
        (loading the folder's one ``plotly.min.js``, see `phaseinterp.plot.save_html`) into
        ``out_dir``; returns the paths written."""
        from phaseinterp.plot import save_html

        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        paths = []
        for key, df in self.tables.items():
            with atomic_path(out / f"{key}.csv") as tmp:
                df.to_csv(tmp, index=False)
            with atomic_path(out / f"{key}.json") as tmp:
                df.to_json(tmp, orient="records", indent=1)
            paths += [out / f"{key}.csv", out / f"{key}.json"]
        write_atomic(out / "meta.json", json.dumps(self.meta, indent=2, default=str))
        paths.append(out / "meta.json")
        for key, fig in self.figures.items():
            paths.append(save_html(fig, out / f"{key}.html"))
        return paths


def provenance(name: str, cfg: TheoryConfig, flow: FlowConfig, seeds: list[int], **extra) -> dict:
    """The record every experiment carries: configs, seeds, sample sizes, versions."""
    return {
        "experiment": name,
        "theory_config": cfg.to_dict(),
        "flow_config": flow.to_dict(),
        "seeds": list(seeds),
        "monte_carlo": {
            "objective": "mean cross-entropy over a fixed training sample (common random numbers)",
            "train_contexts_per_seed": flow.n_contexts,
            "eval_contexts_per_seed": flow.n_eval_contexts,
            "queries_per_context": cfg.n_queries,
            "train_queries_per_seed": flow.n_contexts * cfg.n_queries,
            "eval_queries_per_seed": flow.n_eval_contexts * cfg.n_queries,
            "exact_shortcut": cfg.eps == 0 and cfg.distinct_context,
        },
        "versions": versions(),
        **extra,
    }


def _gates_table(res: FlowResult, run: int) -> pd.DataFrame:
    g = res.gates[:, run]  # [K, 2, m, S]
    K, _, m, S = g.shape
    idx = pd.MultiIndex.from_product([res.record_times, ["key", "value"], range(m), range(S)],
                                     names=["t", "branch", "head", "position"])
    return pd.DataFrame({"p": g.reshape(-1)}, index=idx).reset_index()


def _loss_table(res: FlowResult, every: int = 1) -> pd.DataFrame:
    t = res.times[::every]
    return pd.DataFrame({
        "t": np.repeat(t, len(res.seeds)),
        "seed": np.tile(res.seeds, len(t)),
        "loss": res.loss[::every].reshape(-1),
    })


def run_trajectory(cfg: TheoryConfig, flow: FlowConfig, seed: int = 0, progress: bool = False) -> Experiment:
    """(a) One run: the gates of every head and position, the loss and the flow speed over time.

    Tables: ``gates`` (t, branch, head, position, p: mean gate over the training sample),
    ``loss`` (t, seed, training loss at every step), ``speed`` (t, norm of the vector field: it
    drops to ~0 at rest and spikes when a head commits to a position), ``heads`` (end-point
    diagnostics on the held-out sample: positions, one-hot scores, static shares).
    """
    start = time.perf_counter()
    res = integrate(cfg, flow, [seed], progress=progress)
    ev = evaluate(res.theta, cfg, flow, [seed])
    loss = _loss_table(res)
    optimum = float(ev.seeds["theorem1_loss"].iloc[0])
    speed = pd.DataFrame({"t": res.record_times, "speed": res.speed[:, 0]})
    tables = {"gates": _gates_table(res, 0), "loss": loss, "speed": speed, "heads": ev.heads}
    figs = {
        "gates": figures.gate_trajectory_figure(tables["gates"], f"Gate trajectories, seed {seed}"),
        "loss": figures.loss_figure(loss, optimum if cfg.eps == 0 else None),
    }
    meta = provenance("trajectory", cfg, flow, [seed], runtime_s=time.perf_counter() - start,
                      loss_increases=int(res.loss_increases[0]),
                      final_speed=float(res.speed[-1, 0]),
                      end=ev.seeds.drop(columns=["seed"]).iloc[0].to_dict())
    return Experiment("trajectory", tables, figs, meta)


def _bootstrap_ci(values: np.ndarray, reps: int = 2000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """95% percentile interval of the mean over axis 0 (seeds), resampling seeds."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(values), size=(reps, len(values)))
    means = values[idx].mean(axis=1)
    return np.quantile(means, 0.025, axis=0), np.quantile(means, 0.975, axis=0)


def _phase_table(ev: Evaluation, S: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    covered = {int(s): set(map(int, c.split())) for s, c in zip(ev.seeds["seed"], ev.seeds["covered_positions"])}
    rows = [{"seed": int(seed), "phase": r, "accuracy": float(ev.accuracy[i, r]), "covered": r in covered[int(seed)]}
            for i, seed in enumerate(ev.seeds["seed"]) for r in range(S - 1)]
    per_seed = pd.DataFrame(rows)
    low, high = _bootstrap_ci(ev.accuracy)
    summary = pd.DataFrame({
        "phase": range(S - 1),
        "accuracy": ev.accuracy.mean(axis=0),
        "ci_low": low,
        "ci_high": high,
        "covered_share": per_seed.groupby("phase")["covered"].mean().to_numpy(),
    })
    return per_seed, summary


def summarize(ev: Evaluation, res: FlowResult) -> pd.DataFrame:
    """One-row summary over seeds: convergence shares, coverage against its references, losses."""
    cfg, s = res.cfg, ev.seeds
    return pd.DataFrame([{
        "n_seeds": len(s),
        "all_heads_onehot_paired_share": s["all_onehot_paired"].mean(),
        "all_heads_onehot_share": s["all_onehot"].mean(),
        "all_heads_paired_share": s["all_paired"].mean(),
        "all_gates_static_share": s["all_static"].mean(),
        "coverage_mean": s["coverage"].mean(),
        "coverage_sd": s["coverage"].std(ddof=1) if len(s) > 1 else 0.0,
        "coverage_random_picks": expected_random_coverage(cfg.m, cfg.S),
        "coverage_theorem1": best_coverage(cfg.m, cfg.S),
        "distinct_keys_mean": s["distinct_keys"].mean(),
        "mean_accuracy": s["mean_accuracy"].mean(),
        "end_loss_mean": s["loss"].mean(),
        "onehot_limit_loss_mean": s["onehot_limit_loss"].mean(),
        "theorem1_loss_mean": s["theorem1_loss"].mean(),
        "seeds_with_loss_increase": int((res.loss_increases > 0).sum()),
    }])


def run_seeds(cfg: TheoryConfig, flow: FlowConfig, seeds: list[int], progress: bool = False,
              result: FlowResult | None = None) -> Experiment:
    """(b) Many seeds: which position each head ends on, coverage, per-phase retrieval accuracy.

    Tables: ``heads`` (seed, head, positions, one-hot scores, static shares, concentrations),
    ``seeds`` (coverage, covered positions, all one-hot / paired / static, accuracies, losses),
    ``phases`` (seed, phase, accuracy, covered), ``phase_summary`` (mean accuracy with a 95%
    seed-bootstrap interval, share of seeds covering), ``summary`` (one row).

    Args:
        result: a flow already integrated with the same configs and seeds (reused, e.g. by the CLI).
    """
    start = time.perf_counter()
    res = result if result is not None else integrate(cfg, flow, seeds, progress=progress)
    ev = evaluate(res.theta, cfg, flow, list(seeds))
    per_phase, phase_summary = _phase_table(ev, cfg.S)
    summary = summarize(ev, res)
    random_cov = expected_random_coverage(cfg.m, cfg.S)
    tables = {"heads": ev.heads, "seeds": ev.seeds, "phases": per_phase, "phase_summary": phase_summary,
              "summary": summary}
    figs = {
        "positions": figures.positions_figure(ev.heads, cfg.S),
        "coverage": figures.coverage_figure(ev.seeds, cfg.m, cfg.S, random_cov),
        "phase_accuracy": figures.phase_accuracy_figure(phase_summary),
    }
    meta = provenance("seeds", cfg, flow, seeds, runtime_s=time.perf_counter() - start,
                      summary=summary.iloc[0].to_dict())
    return Experiment("seeds", tables, figs, meta)


def run_sweep(cfg: TheoryConfig, flow: FlowConfig, seeds: list[int], grid: dict[str, list] | None = None,
              progress: bool = False) -> Experiment:
    """(c) Coverage and convergence as one parameter at a time moves away from ``cfg``/``flow``.

    Args:
        grid: parameter -> values; a parameter is a `TheoryConfig` field (m, S, N, kappa, eps,
            gamma, beta, L) or a `FlowConfig` field (init_radius, ...). Default `DEFAULT_GRID`
            (with m = 1..S-1). Invalid combinations raise ValueError from the configs.

    Tables: ``runs`` (param, value, seed, coverage, one-hot/static flags, distinct keys, loss) and
    ``sweep`` (per param and value: mean coverage and its s.e.m., references, shares of seeds).
    """
    start = time.perf_counter()
    grid = dict(DEFAULT_GRID if grid is None else grid)
    if "m" in grid and not grid["m"]:
        grid["m"] = list(range(1, cfg.S))
    theory_fields = {f.name for f in dataclasses.fields(TheoryConfig)}
    flow_fields = {f.name for f in dataclasses.fields(FlowConfig)}
    cache: dict[tuple, pd.DataFrame] = {}
    runs, rows = [], []
    for param, values in grid.items():
        if param not in theory_fields | flow_fields:
            raise ValueError(f"grid parameter {param!r}: need a field of TheoryConfig {sorted(theory_fields)} "
                             f"or FlowConfig {sorted(flow_fields)}")
        for value in values:
            c = dataclasses.replace(cfg, **{param: value}) if param in theory_fields else cfg
            f = dataclasses.replace(flow, **{param: value}) if param in flow_fields else flow
            key = (tuple(sorted(c.to_dict().items())), tuple(sorted(f.to_dict().items())))
            if key not in cache:
                res = integrate(c, f, seeds, progress=progress)
                ev = evaluate(res.theta, c, f, list(seeds))
                table = ev.seeds[["seed", "coverage", "all_onehot_paired", "all_static", "distinct_keys",
                                  "loss", "theorem1_loss", "mean_accuracy"]].copy()
                table["loss_increases"] = res.loss_increases
                cache[key] = table
            table = cache[key].copy()
            table.insert(0, "value", value)
            table.insert(0, "param", param)
            runs.append(table)
            rows.append({
                "param": param, "value": value, "m": c.m, "S": c.S, "n_seeds": len(table),
                "coverage": table["coverage"].mean(),
                "coverage_sem": table["coverage"].std(ddof=1) / np.sqrt(len(table)) if len(table) > 1 else 0.0,
                "random_coverage": expected_random_coverage(c.m, c.S),
                "optimum_coverage": best_coverage(c.m, c.S),
                "onehot_paired_share": table["all_onehot_paired"].mean(),
                "static_share": table["all_static"].mean(),
                "distinct_keys": table["distinct_keys"].mean(),
                "seeds_with_loss_increase": int((table["loss_increases"] > 0).sum()),
            })
    sweep = pd.DataFrame(rows)
    tables = {"runs": pd.concat(runs, ignore_index=True), "sweep": sweep}
    meta = provenance("sweep", cfg, flow, seeds, grid=grid, runtime_s=time.perf_counter() - start)
    return Experiment("sweep", tables, {"sweep": figures.sweep_figure(sweep)}, meta)


def run_optimum(cfg: TheoryConfig, flow: FlowConfig, seeds: list[int], progress: bool = False,
                result: FlowResult | None = None, survey_size: int = 20) -> Experiment:
    """(d) The flow's end-point loss against the Theorem 1 optimum (distinct one-hot positions).

    Per seed, on the same held-out sample: the loss of the learned gates, of the one-hot rules at
    the learned positions (the flow's limit) and of the Theorem 1 rules. At eps = 0 also the exact
    optimum and a survey of static rules (`optimum.static_rule_survey`) that tests whether the
    distinct one-hot assignment is the best static rule at these gamma, beta, N, L.

    Tables: ``seeds`` (losses and gaps per seed), ``loss_curves`` (t, seed, training loss),
    ``static_rules`` (eps = 0 only), ``summary``.
    """
    start = time.perf_counter()
    res = result if result is not None else integrate(cfg, flow, seeds, progress=progress)
    ev = evaluate(res.theta, cfg, flow, list(seeds))
    table = ev.seeds[["seed", "coverage", "distinct_keys", "all_onehot_paired", "loss", "onehot_limit_loss",
                      "theorem1_loss"]].copy()
    table["gap_to_theorem1"] = table["loss"] - table["theorem1_loss"]
    table["gap_of_positions"] = table["onehot_limit_loss"] - table["theorem1_loss"]
    table["gap_of_convergence"] = table["loss"] - table["onehot_limit_loss"]
    every = max(1, len(res.times) // 200)
    tables = {"seeds": table, "loss_curves": _loss_table(res, every)}
    summary = {
        "end_loss_mean": table["loss"].mean(),
        "onehot_limit_loss_mean": table["onehot_limit_loss"].mean(),
        "theorem1_loss_mean": table["theorem1_loss"].mean(),
        "gap_mean": table["gap_to_theorem1"].mean(),
        "gap_max": table["gap_to_theorem1"].max(),
        "share_at_theorem1_positions": float((table["gap_of_positions"].abs() < 1e-9).mean()),
    }
    figs = {"endpoint": figures.optimum_figure(table)}
    exact = None
    if cfg.eps == 0 and cfg.distinct_context:
        exact = theorem1_loss(cfg)
        survey = static_rule_survey(cfg, n=survey_size, seed=0)
        tables["static_rules"] = survey
        figs["static_rules"] = figures.static_rules_figure(survey, exact)
        non_onehot = survey[~survey["onehot"]]
        summary.update({
            "theorem1_loss_exact": exact,
            "best_non_onehot_rule_loss": float(non_onehot["loss"].min()),
            "theorem1_is_best_rule_tried": bool((survey["excess"] >= -1e-9).all()),
        })
    figs["loss_curves"] = figures.loss_figure(tables["loss_curves"], exact)
    tables["summary"] = pd.DataFrame([summary])
    meta = provenance("optimum", cfg, flow, seeds, runtime_s=time.perf_counter() - start, summary=summary)
    return Experiment("optimum", tables, figs, meta)
