"""Forward time and peak memory: compressed (W8/S8, L=16) vs its full-attention twin, and the
hooked model vs a plain-PyTorch forward of the same weights. Writes JSON with the ratios.

    python benchmarks/attention.py --lengths 1024 4096 16384 --out benchmarks/results/attention.json

Full attention runs fused SDPA (flash, O(T) memory) unless hooks read its pattern; the
"full_explicit" rows time the TransformerLens-style twin that materializes the [pos, pos] pattern.
Each measurement runs in a fresh subprocess; peak memory is the growth of the process's peak RSS
during the forward (CPU) or `torch.cuda.max_memory_allocated` (CUDA).
"""

from __future__ import annotations

import argparse
import json
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
from phaseinterp.model import joint_attention as joint

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
            z = joint.fused_joint_attention(a.cc, q, k, v, ek, ev, a.scale, None)
        x = x + torch.einsum("bthe,hed->btd", z, a.W_O)
        h = _rms(x, block.ln2.weight, cfg.norm_eps)
        x = x + (F.silu(h @ block.mlp.W_gate) * (h @ block.mlp.W_in)) @ block.mlp.W_out
    return _rms(x, model.ln_final.weight, cfg.norm_eps) @ model.W_unembed


def measure(kind: str, seq_len: int, runner: str, device: str, repeats: int) -> dict:
    torch.set_num_threads(1) if device == "cpu" else None
    model = HookedCompressedTransformer(bench_config(kind, seq_len), seed=0).to(device).eval()
    tokens = torch.randint(0, 512, (1, seq_len), device=device)
    fn = model if runner != "plain" else (lambda t: plain_forward(model, t))
    model.set_explicit_attention(runner == "explicit")
    with torch.no_grad():
        # peak memory of the first forward (later ones reuse allocator caches), time of the rest
        if device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
        else:
            base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        fn(tokens)
        peak = (torch.cuda.max_memory_allocated() if device == "cuda"
                else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024) - base
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            fn(tokens)
            if device == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
    return {"seconds": min(times), "peak_bytes": max(int(peak), 0)}


def run_isolated(kind: str, seq_len: int, runner: str, device: str, repeats: int) -> dict:
    code = (f"import json,sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import attention as b; "
            f"print(json.dumps(b.measure({kind!r}, {seq_len}, {runner!r}, {device!r}, {repeats})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096, 16384])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--max-explicit", type=int, default=16384,
                        help="also time full attention with the explicit [pos, pos] pattern up to this length")
    parser.add_argument("--out", default="benchmarks/results/attention.json")
    args = parser.parse_args()
    rows = []
    for seq_len in args.lengths:
        runs = [("full", "hooked"), ("compressed", "hooked"), ("compressed", "plain")]
        if seq_len <= args.max_explicit:
            runs.append(("full", "explicit"))
        m = {(k, r): run_isolated(k, seq_len, r, args.device, args.repeats) for k, r in runs}
        row = {
            "seq_len": seq_len,
            "full": m["full", "hooked"], "compressed": m["compressed", "hooked"], "compressed_plain": m["compressed", "plain"],
            "time_ratio_compressed_vs_full": m["compressed", "hooked"]["seconds"] / m["full", "hooked"]["seconds"],
            "memory_ratio_compressed_vs_full": m["compressed", "hooked"]["peak_bytes"] / max(m["full", "hooked"]["peak_bytes"], 1),
            "hook_overhead": m["compressed", "hooked"]["seconds"] / m["compressed", "plain"]["seconds"] - 1,
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
              "targets": {"time_ratio_at_16k": 0.4, "memory_ratio_at_16k": 0.4, "hook_overhead": 0.05}, "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
