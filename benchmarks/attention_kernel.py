"""One layer's attention alone at 16k tokens (the attention benchmark's shape: 4 query heads, 1 KV
head of 64, W8/S8, L = 16, float32, one thread): the compressed paths as ratios of the
full-attention twin's causal flash attention, CPU time, best of 3; and the speed of the CPU flash
kernel in both (GFLOP/s of the visible query-key pairs: 4 FLOPs per pair and channel), which is
what keeps the entries above their share of the pairs (docs/performance.md); and one whole layer of
each twin of the attention benchmark (`layers`: the first block, its attention module and its MLP),
the work the limit of 0.3x has to fit in.

    python benchmarks/attention_kernel.py
"""

from __future__ import annotations

import json
import time

import torch
import torch.nn.functional as F

from phaseinterp import CompressionConfig, HookedCompressedTransformer
from phaseinterp.model import joint_attention as joint
from phaseinterp.model import phase_attention as phase


def cpu_seconds(fn, repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
    return best


def main(T: int = 16384) -> dict:
    torch.set_num_threads(1)
    cc = CompressionConfig(window=8, stride=8, local_window=16)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, T, h, 64, generator=g) for h in (4, 1, 1))
    ek, ev = (torch.randn(1, cc.n_entries(T), 1, 64, generator=g) for _ in range(2))
    with torch.no_grad():
        full = cpu_seconds(lambda: F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                                  is_causal=True, enable_gqa=True), 1)
        runs = {"blocks": lambda: joint.fused_joint_attention(cc, q, k, v, ek, ev, 0.125, None),
                "phase": lambda: phase.phase_joint_attention(cc, q, k, v, ek, ev, 0.125, None),
                "phase_entries_only": lambda: phase._entries(cc, q, ek, ev, 0.125),
                "phase_local_only": lambda: phase._local(cc, q, k, v, 0.125, None)}
        out = {"seq_len": T, "full_seconds": full, **{f"{name}_vs_full": cpu_seconds(fn) / full for name, fn in runs.items()}}
    n_heads, d, E, n = q.shape[2], q.shape[3], cc.entry_stride, ek.shape[1]
    out["full_gflop_per_s"] = n_heads * T * (T + 1) / 2 * 4 * d / full / 1e9
    out["entries_gflop_per_s"] = n_heads * E * n * (n + 1) / 2 * 4 * d / (out["phase_entries_only_vs_full"] * full) / 1e9
    out["layers"] = layer_seconds(T)
    print(json.dumps(out))
    return out


def layer_seconds(T: int) -> dict:
    """CPU seconds of the first block of each twin (`attention.bench_config`), of its attention
    module and of its MLP, on one random [1, T, d_model] input, best of 3."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from attention import bench_config

    x = torch.randn(1, T, bench_config("full", T).d_model, generator=torch.Generator().manual_seed(1))
    out = {}
    with torch.no_grad():
        for kind in ("full", "compressed"):
            block = HookedCompressedTransformer(bench_config(kind, T), seed=0).eval().blocks[0]
            out[kind] = {"block": cpu_seconds(lambda: block(x)), "attention": cpu_seconds(lambda: block.attn(x)),
                         "mlp": cpu_seconds(lambda: block.mlp(x))}
    out["block_ratio"] = out["compressed"]["block"] / out["full"]["block"]
    return out


if __name__ == "__main__":
    main()
