"""Cost of a KV-head knockout map over all layers of SmolLM2-135M through the KV cache, as a ratio
to one clean forward over the same batch, side by side in one run.

    python benchmarks/kv_cache.py --out benchmarks/results/kv_cache.json

On one CPU thread, for SmolLM2-135M-Instruct (30 layers x 3 KV heads = 90 units; installed
offline, `phaseinterp.backends.smollm2.load_smollm2`) and final-position induction prompts, it times:
- `clean_forward`: one plain HF forward over the batch (logits at the query positions only,
  `logits_to_keep`), the unit of cost;
- `map_kv_cache`: `knockout_map` over every layer and KV head, method "auto" (the KV-cache path:
  one cached forward, then only the query position recomputed from the knocked-out layer up),
  given a precomputed calibration, with the bootstrap; `map_with_calibration` also runs the
  calibration forward (`calibrate`, uncached; a batch as large as the evaluated one);
- `full_forward_subset`: the old path (`method="hooks"`: its clean forward, then one full forward
  per unit, stacked into the batch) on `--subset` units; the projected full-map ratio is
  1 + (ratio - 1) * 90 / subset (the clean forward once, every unit's forward).
It checks that the two paths give the same logits on the subset (max |difference|) and the same
outcome per row and unit. Each timed run follows its own clean forward; a ratio is the median of
those paired ratios over interleaved rounds (stable when other processes share the CPU).
Target: map <= 1.5x one clean forward.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import torch

from phaseinterp import __version__
from phaseinterp.backends.smollm2 import load_smollm2, smollm2_backend
from phaseinterp.interventions import calibrate, head_units, is_correct, knockout_logits, knockout_map
from phaseinterp.measure.outputs import write_atomic
from phaseinterp.measure.provenance import versions
from phaseinterp.tasks.induction import induction_final_batch


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def bench(model, args: argparse.Namespace) -> dict:
    backend = smollm2_backend(model)
    batch = induction_final_batch(args.n_per_residue, args.seq_len, args.modulus, seed=1)
    calib_batch = induction_final_batch(args.n_per_residue, args.seq_len, args.modulus, seed=2)
    calib = calibrate(backend, calib_batch)
    units = head_units(backend.cfg, "kv_head")
    subset = units[:: max(1, len(units) // args.subset)][: args.subset]  # spread over the layers
    qpos = batch.query_pos[:, None]

    def clean():
        return model(input_ids=batch.tokens, use_cache=False, logits_to_keep=qpos).logits

    kw = dict(n_boot=args.n_boot, progress=False)
    runs = {
        "map_kv_cache": lambda: knockout_map(backend, batch, calib, **kw),
        "map_with_calibration": lambda: knockout_map(backend, batch, calibrate(backend, calib_batch), **kw),
        "full_forward_subset": lambda: knockout_logits(backend, batch, subset, calib, method="hooks", progress=False),
    }
    seconds: dict[str, list[float]] = {k: [] for k in ["clean_forward", *runs]}
    ratios: dict[str, list[float]] = {k: [] for k in runs}
    with torch.no_grad():
        clean()  # warm up
        for r in range(args.repeats):
            for name, fn in runs.items():
                if name == "full_forward_subset" and r >= args.subset_repeats:
                    continue
                t_clean, t = timed(clean), timed(fn)
                seconds["clean_forward"].append(t_clean)
                seconds[name].append(t)
                ratios[name].append(t / t_clean)
        m = knockout_map(backend, batch, calib, **kw)
        c_fast, fast, used = knockout_logits(backend, batch, subset, calib, progress=False)
        c_slow, slow, _ = knockout_logits(backend, batch, subset, calib, method="hooks", progress=False)
    med = lambda xs: float(sorted(xs)[len(xs) // 2])  # noqa: E731
    ratio = {k: med(v) for k, v in ratios.items()}
    per_unit_full = (ratio["full_forward_subset"] - 1) / len(subset)
    return {
        "model": "SmolLM2-135M-Instruct (Q4_1 GGUF, float32)", "units": len(units), "layers": backend.cfg.n_layers,
        "kv_heads": backend.cfg.n_kv_heads, "rows": len(batch), "seq_len": batch.tokens.shape[1],
        "task": batch.meta, "calibration_rows": len(calib_batch),
        "path": m.meta["intervention"]["path"], "method": used,
        "seconds": seconds, "ratio_to_clean_forward": ratio,
        "full_forward_subset_units": [u.name for u in subset],
        "full_forward_ratio_per_unit": per_unit_full,
        "full_forward_map_ratio_projected": 1 + per_unit_full * len(units),
        "speedup_vs_full_forward_projected": (1 + per_unit_full * len(units)) / ratio["map_kv_cache"],
        "max_abs_logit_diff_kv_cache_vs_full_forward": float((fast - slow).abs().max()),
        "max_abs_clean_logit_diff": float((c_fast - c_slow).abs().max()),
        "same_outcomes_kv_cache_vs_full_forward": bool(torch.equal(is_correct(fast, batch.answers),
                                                                   is_correct(slow, batch.answers))),
        "clean_accuracy": float(is_correct(c_slow, batch.answers).float().mean()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n-per-residue", type=int, default=2, help="prompts per residue")
    parser.add_argument("--modulus", type=int, default=8)
    parser.add_argument("--seq-len", type=int, nargs="+", default=[128, 256], help="one row of results per length")
    parser.add_argument("--subset", type=int, default=3, help="units timed on the full-forward path")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--subset-repeats", type=int, default=2, help="rounds that also time the full-forward subset")
    parser.add_argument("--n-boot", type=int, default=2000)
    parser.add_argument("--out", default="benchmarks/results/kv_cache.json")
    args = parser.parse_args()
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    model, _ = load_smollm2()
    load_s = time.perf_counter() - t0
    rows = []
    for T in args.seq_len:
        row = bench(model, argparse.Namespace(**{**vars(args), "seq_len": T}))
        rows.append(row)
        print(json.dumps({k: row[k] for k in ("seq_len", "rows", "units", "path", "ratio_to_clean_forward",
                                                 "full_forward_map_ratio_projected",
                                                 "max_abs_logit_diff_kv_cache_vs_full_forward",
                                                 "same_outcomes_kv_cache_vs_full_forward")}), flush=True)
    result = {"benchmark": "kv_cache", "device": "cpu", "threads": 1, "python": platform.python_version(),
              "phaseinterp": __version__, "versions": versions(), "load_seconds": load_s,
              "command": "python benchmarks/kv_cache.py " + " ".join(
                  f"--{k.replace('_', '-')} {' '.join(map(str, v)) if isinstance(v, list) else v}"
                  for k, v in vars(args).items()),
              "target": {"map_kv_cache_ratio": 1.5}, "rows": rows}
    write_atomic(Path(args.out), json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
