"""The first CUDA run, prepared: every backend family on one device in float32 and bfloat16, against
the same steps on CPU in float32, written to one JSON file.

    python scripts/gpu_check.py --out gpu_check.json                      # on a CUDA machine, a few minutes
    python scripts/gpu_check.py --device cpu --cases ours-w4s4 --out x.json   # the dry run the suite runs
    bash scripts/gpu_check.sh                                             # the above, the cuda tests, benchmarks

For each case (our shipped W4/S4 and a random CSA model, tiny random HF Qwen3, DeepSeek-V4 and DSA)
and dtype, on the device: the phase sweep (its per-example correctness against the CPU float32
sweep), the final logits against CPU float32 (largest difference), a KV-head knockout map (which
path it took, finite cells), a patching map, and, for compressed models, gate statistics. A step that
fails is recorded with its error and the others go on: the file says what works on the device.
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import time
import traceback
import warnings
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

CASES = ("ours-w4s4", "ours-csa", "hf-qwen3", "hf-deepseek-v4", "hf-dsa")
DTYPES = ("float32", "bfloat16")


def build(case: str):
    """(model in float32 on CPU, its vocabulary size)."""
    if case == "ours-w4s4":
        import phaseinterp

        return phaseinterp.load("w4s4"), 256
    if case == "ours-csa":
        from phaseinterp import preset
        from phaseinterp.model import HookedCompressedTransformer

        torch.manual_seed(0)
        return HookedCompressedTransformer(preset("tiny-deepseek-csa").replace(vocab_size=256)), 256
    if case == "hf-qwen3":
        from phaseinterp.backends.tiny import tiny_qwen3

        model = tiny_qwen3()
        return model, model.config.vocab_size
    if case == "hf-deepseek-v4":
        from phaseinterp.backends.tiny import tiny_deepseek_v4

        model = tiny_deepseek_v4(index_topk=64)
        return model, model.config.vocab_size
    if case == "hf-dsa":
        from phaseinterp.families.dsa import tiny_dsa_spec

        return tiny_dsa_spec().build(seed=0).hf, 256
    raise ValueError(f"case={case!r} is invalid: allowed one of {list(CASES)}")


def _step(fn: Callable[[], dict[str, Any]], device: torch.device) -> dict[str, Any]:
    t = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # random weights: accuracy near 0, "changed nothing" warnings
            out = fn()
        _sync(device)
        return {"ok": True, "seconds": round(time.perf_counter() - t, 2), **out}
    except Exception as e:  # noqa: BLE001 - the report records every failure and goes on
        return {"ok": False, "seconds": round(time.perf_counter() - t, 2), "error": f"{type(e).__name__}: {e}",
                "where": traceback.format_exc(limit=-3)}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def check_case(case: str, device: torch.device, dtypes: tuple[str, ...], n_boot: int) -> list[dict[str, Any]]:
    from phaseinterp.analysis.gate_stats import gate_statistics
    from phaseinterp.backends import backend_for
    from phaseinterp.interventions import activation_patching, knockout_map, mapping_swap
    from phaseinterp.measure import phase_sweep
    from phaseinterp.tasks import RecordLookup

    model, vocab = build(case)
    model.eval()
    task = RecordLookup(vocab_size=min(vocab, 256), n_records=6, n_demos=1)
    batch, calib = task.sample(2, 4, seed=0), task.sample(2, 4, seed=0, split="calibration")
    sweep = lambda m: phase_sweep(m, batch, period=4, progress=False, n_boot=n_boot, n_perm=n_boot)  # noqa: E731
    reference = sweep(model).correct
    ref_logits = backend_for(model).final_logits(batch.tokens, batch.query_pos).float()
    compressed = case not in ("hf-qwen3", "hf-dsa")  # DSA selects tokens: no compression gates
    out = []
    for name in dtypes:
        moved = copy.deepcopy(model).to(device=device, dtype=getattr(torch, name))  # the CPU reference keeps its weights
        steps = {"final_logits": lambda m=moved: _logits(m, batch, ref_logits, device),
                 "sweep": lambda m=moved: {"agreement_with_cpu_float32": float(np.mean(sweep(m).correct == reference))},
                 "knockout_map": lambda m=moved: _map_info(knockout_map(m, batch, calib, n_boot=n_boot, progress=False)),
                 "patching_map": lambda m=moved: _map_info(activation_patching(
                     m, mapping_swap(batch), unit="z", level="kv_head", rel_min=0, n_boot=n_boot, progress=False)),
                 **({"gate_statistics": lambda m=moved: {"rows": len(gate_statistics(m, batch.tokens[:8].to(device)))}}
                    if compressed else {})}
        out.append({"case": case, "dtype": name, "device": str(device), **{k: _step(fn, device) for k, fn in steps.items()}})
        del moved, steps
    return out


def _logits(model, batch, reference: torch.Tensor, device: torch.device) -> dict[str, Any]:
    from phaseinterp.backends import backend_for

    got = backend_for(model).final_logits(batch.tokens.to(device), batch.query_pos.to(device)).float().cpu()
    return {"max_abs_diff_vs_cpu_float32": float((got - reference).abs().max()), "logit_scale": float(reference.abs().max())}


def _map_info(smap) -> dict[str, Any]:
    meta = smap.meta.get("intervention", {})
    return {"path": meta.get("path"), "fallback": meta.get("fallback"), "shape": list(smap.shape),
            "finite_cells": int(np.isfinite(smap.values).sum())}


def environment(device: torch.device) -> dict[str, Any]:
    from phaseinterp.measure.provenance import versions

    env = {"python": platform.python_version(), "device": str(device), "versions": versions()}
    if device.type == "cuda":
        env.update(gpu=torch.cuda.get_device_name(device), capability=list(torch.cuda.get_device_capability(device)),
                   cuda=torch.version.cuda, memory_gib=round(torch.cuda.get_device_properties(device).total_memory / 2 ** 30, 1))
    return env


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    steps = [(r["case"], r["dtype"], k, v) for r in rows for k, v in r.items() if isinstance(v, dict) and "ok" in v]
    failed = [f"{c} {d} {k}: {v['error']}" for c, d, k, v in steps if not v["ok"]]
    fp32 = [r for r in rows if r["dtype"] == "float32" and r["sweep"].get("ok")]
    return {"steps": len(steps), "failed": failed,
            "float32_sweeps_equal_cpu": all(r["sweep"]["agreement_with_cpu_float32"] == 1.0 for r in fp32)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES)
    p.add_argument("--dtypes", nargs="+", default=list(DTYPES), choices=DTYPES)
    p.add_argument("--n-boot", type=int, default=200)
    p.add_argument("--out", type=Path, default=Path("gpu_check.json"))
    args = p.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit(f"--device {args.device}: CUDA is not available here (allowed 'cpu')")
    t0 = time.perf_counter()
    rows = [r for case in args.cases for r in check_case(case, device, tuple(args.dtypes), args.n_boot)]
    report = {"environment": environment(device), "rows": rows, "summary": summary(rows),
              "seconds": round(time.perf_counter() - t0, 1)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    s = report["summary"]
    print(f"{args.out}: {s['steps']} steps, {len(s['failed'])} failed, float32 sweeps equal CPU: "
          f"{s['float32_sweeps_equal_cpu']} ({report['seconds']} s)")
    for line in s["failed"]:
        print("  FAILED", line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
