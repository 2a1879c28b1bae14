"""Forward time and peak memory: compressed (W8/S8, L=16) vs its full-attention twin, and the
hooked model vs a plain-PyTorch forward of the same weights. Writes JSON with the ratios.

    python benchmarks/attention.py --out benchmarks/results/attention.json

Full attention runs fused SDPA (flash, O(T) memory) unless hooks read its pattern; the
"full_explicit" rows time the TransformerLens-style twin that materializes the [pos, pos] pattern
(up to --max-explicit tokens). "compressed_cached" is `run_with_cache` on every `hook_pattern`;
its peak is compared with the bytes the twin's cached [pos, pos] patterns would hold
(layers x heads x T x T floats), which at 16k (17 GB) this machine cannot hold.
Each measurement runs in a fresh subprocess; peak memory is the growth of the process's peak RSS
during the forward (CPU) or `torch.cuda.max_memory_allocated` (CUDA); on CPU also the peak of live
tensor bytes (`tensor_peak_bytes`, from the profiler's allocation events, in a second forward).
On CPU the time is the process's CPU time (one thread), which other processes on the machine
disturb less than wall time; the wall time is recorded too. Before the measured forward, a
256-token forward loads kernels and code. Peak memory comes from a second process with
MALLOC_MMAP_THRESHOLD_=131072, so that its RSS follows the live tensors (that setting would slow
allocations in the timed process).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from phaseinterp import CompressionConfig, HookedCompressedTransformer, ModelConfig, __version__
from phaseinterp.config import uniform_schedule
from phaseinterp.model.phase_attention import fast_joint_attention

SPECS = {"full": "full", "compressed": CompressionConfig(window=8, stride=8, local_window=16)}


def bench_config(kind: str, n_ctx: int) -> ModelConfig:
    return ModelConfig(
        vocab_size=512, d_model=256, n_layers=4, n_heads=4, n_kv_heads=1, d_head=64, d_mlp=768,
        n_ctx=n_ctx, layers=uniform_schedule(4, SPECS[kind]),
    )


def _rms(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def plain_forward(model: HookedCompressedTransformer, tokens: torch.Tensor) -> torch.Tensor:
    """The same computation written as plain PyTorch functions (no modules, no hook points)."""
    cfg = model.cfg
    x = model.W_E[tokens]
    pos = torch.arange(tokens.shape[1], device=tokens.device)
    for block in model.blocks:
        a = block.attn
        h = _rms(x, block.ln1.weight, cfg.norm_eps)
        q = torch.einsum("btd,hde->bthe", h, a.W_Q)
        k = torch.einsum("btd,hde->bthe", h, a.W_K)
        v = torch.einsum("btd,hde->bthe", h, a.W_V)
        q, k = _rms(q, a.q_norm.weight, cfg.norm_eps), _rms(k, a.k_norm.weight, cfg.norm_eps)
        q, k = a.rotate(q, pos), a.rotate(k, pos)
        if a.cc is None:
            z = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                               is_causal=True, enable_gqa=True).transpose(1, 2)
        else:
            ek, ev = a.compress_k.forward(h), a.compress_v.forward(h)
            ek = a.rotate(ek, torch.arange(ek.shape[1], device=h.device) * a.cc.stride)
            z = fast_joint_attention(a.cc, q, k, v, ek, ev, a.scale, None)
        x = x + torch.einsum("bthe,hed->btd", z, a.W_O)
        h = _rms(x, block.ln2.weight, cfg.norm_eps)
        x = x + (F.silu(h @ block.mlp.W_gate) * (h @ block.mlp.W_in)) @ block.mlp.W_out
    return _rms(x, model.ln_final.weight, cfg.norm_eps) @ model.W_unembed


def tensor_peak_bytes(fn) -> int:
    """Peak bytes of live CPU tensors while `fn` runs (the CPU counterpart of CUDA's
    `max_memory_allocated`), replayed from the profiler's allocation events: each op's own
    allocations at its start, each free at its time. Unlike RSS it does not move with the
    allocator's heap slack (glibc's top pad and trim threshold, ~0.1-0.6 MB between runs here)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    steps = sorted((e.time_range.start, e.cpu_memory_usage if e.name == "[memory]" else e.self_cpu_memory_usage)
                   for e in prof.events() if e.name == "[memory]" or e.self_cpu_memory_usage)
    live = peak = 0
    for _, delta in steps:
        live += delta
        peak = max(peak, live)
    return peak


def measure(kind: str, seq_len: int, runner: str, device: str, repeats: int) -> dict:
    torch.set_num_threads(1) if device == "cpu" else None
    model = HookedCompressedTransformer(bench_config(kind, seq_len), seed=0).to(device).eval()
    tokens = torch.randint(0, 512, (1, seq_len), device=device)
    if runner == "plain":
        fn = lambda t: plain_forward(model, t)  # noqa: E731
    elif runner == "cached":
        fn = lambda t: model.run_with_cache(t, names_filter=lambda name: name.endswith("hook_pattern"))  # noqa: E731
    else:
        fn = model
    model.set_explicit_attention(runner == "explicit")
    with torch.no_grad():
        fn(tokens[:, :256])  # loads kernels and code once, so the peak below is the forward's data
        # peak memory of the first full-length forward (later ones reuse allocator caches), time of the rest
        if device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
        else:
            base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        fn(tokens)
        peak = (torch.cuda.max_memory_allocated() if device == "cuda"
                else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024) - base
        times, cpu_times = [], []
        for _ in range(repeats):
            start, cpu_start = time.perf_counter(), time.process_time()
            fn(tokens)
            if device == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
            cpu_times.append(time.process_time() - cpu_start)
    if not times:  # a memory-only run
        with torch.no_grad():
            tensors = tensor_peak_bytes(lambda: fn(tokens)) if device == "cpu" else None
        return {"seconds": None, "wall_seconds": None, "peak_bytes": max(int(peak), 0), "tensor_peak_bytes": tensors}
    seconds = min(times) if device == "cuda" else min(cpu_times)
    return {"seconds": seconds, "wall_seconds": min(times), "peak_bytes": max(int(peak), 0)}


def pattern_bytes(seq_len: int) -> int:
    """Bytes of the full-attention twin's cached patterns: every layer's [batch=1, head, T, T] float32."""
    cfg = bench_config("full", seq_len)
    return cfg.n_layers * cfg.n_heads * seq_len * seq_len * 4


def in_fresh_process(module: str, call: str, env: dict | None = None) -> dict:
    """The JSON-ready result of `module.call` (a call expression on a module of benchmarks/) in a
    fresh interpreter, so that no measurement inherits another's allocator or compiled code."""
    code = (f"import json,sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import {module} as b; "
            f"print(json.dumps(b.{call}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_isolated(kind: str, seq_len: int, runner: str, device: str, repeats: int) -> dict:
    """Time in one fresh process, peak memory in another: the allocator setting that makes RSS
    follow the live tensors (every allocation above 128 KB its own mapping, returned when freed)
    also makes each allocation pay for fresh pages, which would bias the time of the path that
    allocates more."""
    def one(reps: int, env: dict) -> dict:
        return in_fresh_process("attention", f"measure({kind!r}, {seq_len}, {runner!r}, {device!r}, {reps})", env)

    timed = one(repeats, dict(os.environ))
    if device != "cuda":
        memory = one(0, {**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072"})
        timed["peak_bytes"], timed["tensor_peak_bytes"] = memory["peak_bytes"], memory["tensor_peak_bytes"]
    return timed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096, 16384])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--repeats", type=int, default=2, help="timed forwards per process (the fastest counts)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating full/compressed processes (median ratio)")
    parser.add_argument("--max-explicit", type=int, default=4096,
                        help="also time full attention with the explicit [pos, pos] pattern up to this length")
    parser.add_argument("--out", default="benchmarks/results/attention.json")
    args = parser.parse_args()
    rows = []
    for seq_len in args.lengths:
        # the twins alternate over rounds, each paired with the other's run just before it: the
        # median of the paired ratios holds when other processes come and go on the machine
        pairs = [(run_isolated("full", seq_len, "hooked", args.device, args.repeats),
                  run_isolated("compressed", seq_len, "hooked", args.device, args.repeats)) for _ in range(args.rounds)]
        ratios = sorted(c["seconds"] / f["seconds"] for f, c in pairs)
        runs = [("compressed", "plain"), ("compressed", "cached")]
        if seq_len <= args.max_explicit:
            runs.append(("full", "explicit"))
        m = {(k, r): run_isolated(k, seq_len, r, args.device, args.repeats) for k, r in runs}
        m["full", "hooked"], m["compressed", "hooked"] = pairs[0]
        row = {
            "seq_len": seq_len,
            "full": m["full", "hooked"], "compressed": m["compressed", "hooked"], "compressed_plain": m["compressed", "plain"],
            "time_ratio_compressed_vs_full": ratios[len(ratios) // 2],
            "time_ratios_by_round": ratios,
            "memory_ratio_compressed_vs_full": m["compressed", "hooked"]["peak_bytes"] / max(m["full", "hooked"]["peak_bytes"], 1),
            "tensor_memory_ratio_compressed_vs_full": (
                m["compressed", "hooked"]["tensor_peak_bytes"] / max(m["full", "hooked"]["tensor_peak_bytes"], 1)
                if args.device == "cpu" else None),
            "hook_overhead": m["compressed", "hooked"]["seconds"] / m["compressed", "plain"]["seconds"] - 1,
            "compressed_cached": m["compressed", "cached"],
            "full_explicit_pattern_bytes": pattern_bytes(seq_len),
            "memory_ratio_cached_patterns_vs_full_explicit_patterns":
                m["compressed", "cached"]["peak_bytes"] / pattern_bytes(seq_len),
        }
        if ("full", "explicit") in m:  # the TransformerLens-style twin: [pos, pos] pattern materialized
            row["full_explicit"] = m["full", "explicit"]
            row["time_ratio_compressed_vs_full_explicit"] = m["compressed", "hooked"]["seconds"] / m["full", "explicit"]["seconds"]
            row["memory_ratio_compressed_vs_full_explicit"] = (
                m["compressed", "hooked"]["peak_bytes"] / max(m["full", "explicit"]["peak_bytes"], 1))
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if "ratio" in k or k in ("seq_len", "hook_overhead")}), flush=True)
    result = {"benchmark": "attention", "device": args.device, "torch": torch.__version__, "phaseinterp": __version__,
              "python": platform.python_version(), "threads": 1 if args.device == "cpu" else None,
              "targets": {"time_ratio_at_16k": 0.3, "memory_ratio_at_16k": 1.0,
                          "memory_ratio_cached_patterns_at_16k": 0.15, "hook_overhead": 0.05}, "rows": rows,
              "command": " ".join(["python", *sys.argv])}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
