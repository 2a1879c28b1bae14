"""The toolkit at the paper's scale: phase sweep and KV-head knockout map on a model of Qwen3-0.6B
geometry (28 layers, d_model 1024, 16 query heads, 8 KV heads of 128, SwiGLU 3072, theta 1e6)
with random weights, compressed against its full-attention twin, side by side in one run.

    python benchmarks/scale.py --out benchmarks/results/scale.json              # CPU, T = 4096, bfloat16
    python benchmarks/scale.py --device cuda --seq-lens 32768 131072 --out benchmarks/results/scale_gpu.json

Kinds: "w8s8" (W8/S8 entries and a 128-token local window in every layer), "csa" (DeepSeek-V4's
CSA layout, W8/S4 with 128 local tokens and a sink) and "full" (the twin). The vocabulary is the
task's (2048 tokens), not Qwen3's 151,936: the unembedding would otherwise dominate a forward and
say nothing about attention. Per kind, in its own process: one clean forward over the sweep
batch (the unit of cost), the phase sweep, the knockout map with a disjoint calibration batch as
large as the evaluated one (cold: its calibration forward included) and self-calibrated
(`calibration="self"`: each row's replacement is the mean over the batch's other logical
examples, no calibration forward), each as a ratio to the clean forward, and the peak memory of
the clean forward. `--jobs 2` runs two kinds at once (CPU time is per process; memory adds up).
With random weights the accuracies are at chance: this measures cost, not phase effects. On CPU
the time is the process's CPU time on one thread; the kinds' ratios to their full twin are in
`ratios_vs_full`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import resource
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from phaseinterp import CompressionConfig, HookedCompressedTransformer, ModelConfig, __version__
from phaseinterp.config import uniform_schedule
from phaseinterp.presets import DEEPSEEK_CSA

VOCAB = 2048
LOCAL = 128
SPECS = {
    "w8s8": CompressionConfig(window=8, stride=8, local_window=LOCAL),
    "csa": dataclasses.replace(DEEPSEEK_CSA, local_window=LOCAL),
    "full": "full",
}


def geometry(kind: str, n_ctx: int) -> ModelConfig:
    return ModelConfig(vocab_size=VOCAB, d_model=1024, n_layers=28, n_heads=16, n_kv_heads=8, d_head=128, d_mlp=3072,
                       rope_theta=1_000_000.0, n_ctx=n_ctx, tie_embeddings=True, layers=uniform_schedule(28, SPECS[kind]))


class Clock:
    """CPU time of this process on CPU (one thread; other processes disturb it less than wall
    time), wall time on CUDA (synchronized)."""

    def __init__(self, device: str):
        self.device = device

    def __call__(self, fn):
        if self.device == "cuda":
            torch.cuda.synchronize()
        start, cpu = time.perf_counter(), time.process_time()
        out = fn()
        if self.device == "cuda":
            torch.cuda.synchronize()
            return time.perf_counter() - start, out
        return time.process_time() - cpu, out


def reset_peak(device: str) -> None:
    """Start the peak over: the float32 model built before its cast to bfloat16 would otherwise
    hold the process's peak RSS. Linux resets VmHWM on `5 > /proc/self/clear_refs`."""
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        return
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def peak_bytes(device: str) -> int:
    if device == "cuda":
        return torch.cuda.max_memory_allocated()
    status = Path("/proc/self/status")
    if status.exists():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def measure(kind: str, seq_len: int, n_per_residue: int, dtype: str, device: str, n_boot: int,
            memory_only: bool = False) -> dict:
    from phaseinterp.interventions import clear_calibrations, knockout_map
    from phaseinterp.measure import phase_sweep
    from phaseinterp.tasks import RecordLookup

    if device == "cpu":
        torch.set_num_threads(1)
    torch.manual_seed(0)
    model = HookedCompressedTransformer(geometry(kind, seq_len), seed=0).to(device=device, dtype=getattr(torch, dtype)).eval()
    task = RecordLookup(vocab_size=VOCAB, n_records=256, n_demos=8, seq_len=seq_len)
    batch = task.sample(n_per_residue, 8, seed=0)
    calib_batch = task.sample(n_per_residue, 8, seed=0, split="calibration")
    clock = Clock(device)
    with torch.no_grad():
        model(batch.tokens[:1, :256].to(device))  # loads kernels once
        reset_peak(device)
        base = peak_bytes(device)
        clean_s, _ = clock(lambda: model(batch.tokens.to(device)))
        peak = peak_bytes(device) - base
    if memory_only:
        return {"kind": kind, "seq_len": seq_len, "rows": len(batch), "dtype": dtype, "device": device,
                "seconds": {"clean_forward": clean_s}, "peak_bytes_clean_forward": int(peak)}
    sweep_s, curve = clock(lambda: phase_sweep(model, batch, batch_size=len(batch), progress=False, n_boot=n_boot, n_perm=n_boot))
    clear_calibrations()
    cold_s, kmap = clock(lambda: knockout_map(model, batch, calib_batch, n_boot=n_boot))
    self_s, own = clock(lambda: knockout_map(model, batch, "self", n_boot=n_boot))
    calib_s = cold_s - self_s  # the calibration forward the self-calibrated map does not run
    return {
        "kind": kind, "seq_len": seq_len, "rows": len(batch), "dtype": dtype, "device": device,
        "parameters": sum(p.numel() for p in model.parameters()),
        "seconds": {"clean_forward": clean_s, "phase_sweep": sweep_s, "knockout_map_cold": cold_s,
                    "knockout_map_self": self_s, "calibration": calib_s},
        "ratio_to_clean_forward": {"phase_sweep": sweep_s / clean_s, "knockout_map_cold": cold_s / clean_s,
                                   "knockout_map_self": self_s / clean_s, "calibration": calib_s / clean_s},
        "self_vs_calibration_batch_max_abs_pp": float(abs(own.values - kmap.values).max()),
        "peak_bytes_clean_forward": int(peak),
        "units": int(kmap.values.shape[0] * kmap.values.shape[1]) if kmap.values.ndim == 3 else None,
        "mean_accuracy": float(curve.mean),
    }


def run_isolated(kind: str, args: argparse.Namespace, seq_len: int) -> dict:
    code = (f"import json,sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import scale as s; "
            f"print(json.dumps(s.measure({kind!r}, {seq_len}, {args.n_per_residue}, {args.dtype!r}, {args.device!r}, "
            f"{args.n_boot}, {args.memory_only})))")
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072"}  # RSS follows live tensors (see attention.py)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    if out.returncode != 0:  # e.g. the full twin out of memory at 128k: recorded, not fatal
        last = out.stderr.strip().splitlines()[-1:] or [f"killed by signal {-out.returncode} (out of memory?)"]
        return {"kind": kind, "seq_len": seq_len, "error": last[0][:300]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seq-lens", type=int, nargs="+", default=[4096])
    parser.add_argument("--kinds", nargs="+", default=list(SPECS), choices=list(SPECS))
    parser.add_argument("--n-per-residue", type=int, default=2,
                        help="examples per residue (8 residues; >= 2: the self-calibrated map needs two examples)")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--n-boot", type=int, default=200)
    parser.add_argument("--jobs", type=int, default=1,
                        help="kinds measured at once, one process each (default 1; at T = 4096 with 16 rows the "
                             "full twin's process reached ~21 GB of RSS and W8/S8's ~9 GB)")
    parser.add_argument("--memory-only", action="store_true", help="only the clean forward: time and peak memory")
    parser.add_argument("--out", default="benchmarks/results/scale.json")
    args = parser.parse_args()
    if args.n_per_residue < 2:
        parser.error(f"--n-per-residue={args.n_per_residue} is invalid: allowed >= 2 (the self-calibrated map "
                     "averages over the other logical examples)")

    def one(job: tuple[int, str]) -> dict:
        row = run_isolated(job[1], args, job[0])
        print(json.dumps({k: row.get(k) for k in ("kind", "seq_len", "seconds", "ratio_to_clean_forward",
                                                   "peak_bytes_clean_forward", "error")}), flush=True)
        return row

    with ThreadPoolExecutor(args.jobs) as pool:  # each job is its own process
        rows = list(pool.map(one, [(t, kind) for t in args.seq_lens for kind in args.kinds]))
    full = {r["seq_len"]: r for r in rows if r["kind"] == "full" and "error" not in r}
    for r in rows:
        twin = full.get(r["seq_len"])
        if r["kind"] != "full" and twin is not None and "error" not in r and not args.memory_only:
            r["ratios_vs_full"] = {
                "clean_forward_time": r["seconds"]["clean_forward"] / twin["seconds"]["clean_forward"],
                "phase_sweep_time": r["seconds"]["phase_sweep"] / twin["seconds"]["phase_sweep"],
                "knockout_map_cold_time": r["seconds"]["knockout_map_cold"] / twin["seconds"]["knockout_map_cold"],
                "knockout_map_self_time": r["seconds"]["knockout_map_self"] / twin["seconds"]["knockout_map_self"],
                "peak_memory": r["peak_bytes_clean_forward"] / max(twin["peak_bytes_clean_forward"], 1),
            }
    result = {"benchmark": "scale", "device": args.device, "dtype": args.dtype, "torch": torch.__version__,
              "phaseinterp": __version__, "python": platform.python_version(),
              "threads": 1 if args.device == "cpu" else None, "n_per_residue": args.n_per_residue,
              "target": {"knockout_map_cold_ratio": 1.5}, "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
