"""Cost of a full KV-head x residue knockout map, as ratios to one clean forward over the same batch.

    python benchmarks/interventions.py --out benchmarks/results/interventions.json

For each attention kind (compressed W8/S8 and full attention) it times, on one CPU thread:
- `clean_forward`: one plain forward over the batch (full logits, no hooks): the unit of cost;
- `map_incremental`: `knockout_map` (fast path: one cached clean run, then only the final position
  recomputed from the knocked-out layer upward, all units batched), given a precomputed
  calibration, with the bootstrap; `map_with_calibration` also runs the calibration forward;
- `naive_loop`: one full hooked forward per unit (plus the clean forward);
- `hooks_batched`: full hooked forwards with all units stacked into the batch;
- `transformer_lens`: `transformer_lens.patching.generic_activation_patch`, which loops one forward
  per (layer, KV head) with a patch setter writing the calibration mean into the KV group's heads at
  the final position.
It also checks that the fast path's logits equal the naive path's (max |difference|) and that
both give the same correct/incorrect outcome per row and unit. Target: map <= 3x clean forward.
Each timed run follows its own clean forward; a ratio is the median over interleaved rounds of
those paired ratios, which keeps it stable when other processes share the CPU.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import torch

from phaseinterp import CompressionConfig, HookedCompressedTransformer, ModelConfig, __version__
from phaseinterp.config import uniform_schedule
from phaseinterp.interventions import (calibrate, head_units, is_correct, knockout_edit, knockout_logits, knockout_map,
                                       run_units)
from phaseinterp.interventions.calibration import site_positions
from phaseinterp.tasks import RecordLookup

SPECS = {"compressed": CompressionConfig(window=8, stride=8, local_window=16), "full": "full"}


def bench_config(kind: str) -> ModelConfig:
    return ModelConfig(vocab_size=512, d_model=256, n_layers=4, n_heads=8, n_kv_heads=4, d_head=32, d_mlp=768,
                       n_ctx=512, layers=uniform_schedule(4, SPECS[kind]))


def best(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def transformer_lens_map(model, batch, calib) -> torch.Tensor:
    """KV-head knockout through transformer_lens.patching (one forward per unit)."""
    import pandas as pd
    from transformer_lens import patching

    cfg = model.cfg
    g = cfg.n_heads // cfg.n_kv_heads
    mean = calib.mean()  # [layer, site, head, d]
    T = batch.tokens.shape[1]
    cache = {f"blocks.{l}.attn.hook_z": mean[l, 0].expand(len(batch), T, cfg.n_heads, cfg.d_head) for l in range(cfg.n_layers)}
    rows, qpos = torch.arange(len(batch)), batch.query_pos

    def setter(act, index, clean):
        _, kv = index
        heads = slice(kv * g, (kv + 1) * g)
        act[rows, qpos, heads] = clean[rows, qpos, heads]
        return act

    def metric(logits):
        return is_correct(logits[rows, qpos], batch.answers).float()

    index = pd.DataFrame([(l, h) for l in range(cfg.n_layers) for h in range(cfg.n_kv_heads)], columns=["layer", "kv_head"])
    with torch.no_grad():
        return patching.generic_activation_patch(model, batch.tokens, cache, metric, setter, "z", index_df=index,
                                                 reduce="mean")


def bench(kind: str, n_per_residue: int, repeats: int, n_boot: int) -> dict:
    torch.manual_seed(0)
    model = HookedCompressedTransformer(bench_config(kind), seed=0).eval()
    task = RecordLookup(vocab_size=512, n_records=64, n_demos=8)
    batch = task.sample(n_per_residue, 8, seed=0)
    calib_batch = task.sample(n_per_residue, 8, seed=0, split="calibration")
    calib = calibrate(model, calib_batch)
    units = head_units(model.cfg, "kv_head")
    B = len(batch)
    repl = {l: calib.replacement("mean", l, batch.residue) for l in range(model.cfg.n_layers)}
    sites = site_positions("final", batch.query_pos, batch.tokens.shape[1])
    edits = [knockout_edit(u, repl[u.layer], sites, cfg=model.cfg) for u in units]
    clean = lambda: model(batch.tokens)  # noqa: E731
    runs = {
        "map_incremental": lambda: knockout_map(model, batch, calib, n_boot=n_boot),
        "map_with_calibration": lambda: knockout_map(model, batch, calib_batch, n_boot=n_boot),
        "incremental_logits_only": lambda: knockout_logits(model, batch, units, calib, method="incremental"),
        "naive_loop": lambda: (clean(), run_units(model, batch.tokens, batch.query_pos, edits, max_rows=B)),
        "hooks_batched": lambda: run_units(model, batch.tokens, batch.query_pos, edits, max_rows=B * len(units)),
        "transformer_lens": lambda: transformer_lens_map(model, batch, calib),
    }
    expensive = {"naive_loop", "hooks_batched", "transformer_lens"}
    seconds: dict[str, list[float]] = {k: [] for k in ["clean_forward", *runs]}
    ratios: dict[str, list[float]] = {k: [] for k in runs}
    with torch.no_grad():
        clean()  # warm up
        for r in range(repeats):  # interleaved rounds; each run is paired with a clean forward just before it
            for name, fn in runs.items():
                if name in expensive and r >= max(1, repeats - 1):
                    continue
                t_clean = best(clean, 1)
                t = best(fn, 1)
                seconds["clean_forward"].append(t_clean)
                seconds[name].append(t)
                ratios[name].append(t / t_clean)
        clean_f, fast, _ = knockout_logits(model, batch, units, calib, method="incremental")
        clean_h, slow, _ = knockout_logits(model, batch, units, calib, method="hooks")
    agree = bool((is_correct(fast, batch.answers) == is_correct(slow, batch.answers)).all())
    med = lambda xs: float(sorted(xs)[len(xs) // 2])  # noqa: E731
    ratio = {k: med(v) for k, v in ratios.items()}
    return {
        "kind": kind, "units": len(units), "rows": B, "seq_len": batch.tokens.shape[1],
        "seconds_min": {k: min(v) for k, v in seconds.items()},
        "ratio_to_clean_forward": ratio,
        "speedup_vs_naive": ratio["naive_loop"] / ratio["map_incremental"],
        "speedup_vs_transformer_lens": ratio["transformer_lens"] / ratio["map_incremental"],
        "max_abs_logit_diff_fast_vs_naive": float((fast - slow).abs().max()),
        "same_outcomes_fast_vs_naive": agree,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n-per-residue", type=int, default=16, help="logical examples per residue (R = 8)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--n-boot", type=int, default=2000)
    parser.add_argument("--kinds", nargs="+", default=list(SPECS), choices=list(SPECS))
    parser.add_argument("--out", default="benchmarks/results/interventions.json")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = []
    for kind in args.kinds:
        row = bench(kind, args.n_per_residue, args.repeats, args.n_boot)
        rows.append(row)
        print(json.dumps({k: row[k] for k in ("kind", "units", "rows", "seq_len", "ratio_to_clean_forward",
                                                 "max_abs_logit_diff_fast_vs_naive", "same_outcomes_fast_vs_naive")}),
              flush=True)
    result = {"benchmark": "interventions", "device": "cpu", "threads": 1, "torch": torch.__version__,
              "phaseinterp": __version__, "python": platform.python_version(),
              "target": {"map_incremental_ratio": 3.0}, "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
