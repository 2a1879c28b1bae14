"""One layer's attention alone at 16k tokens (the attention benchmark's shape: 4 query heads, 1 KV
head of 64, W8/S8, L = 16, float32, one thread): the compressed paths as ratios of the
full-attention twin's causal flash attention, CPU time, best of 3; and the speed of the CPU flash
kernel in both (GFLOP/s of the visible query-key pairs: 4 FLOPs per pair and channel), which is
what keeps the entries above their share of the pairs (docs/performance.md); and one whole layer of
each twin of the attention benchmark (`layers`: the first block, its attention module and its MLP),
the work the limit of 0.3x has to fit in.

    python benchmarks/attention_kernel.py
    python benchmarks/attention_kernel.py --parts     # only: RoPE of q, one compressor branch, one block
                                                      # of each twin, and the whole model hooked vs plain

`--parts` measures the installed `phaseinterp`, so running it with PYTHONPATH at another checkout
(`git worktree add`) compares two versions with this one script.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from phaseinterp import CompressionConfig, HookedCompressedTransformer
from phaseinterp.model import joint_attention as joint
from phaseinterp.model import phase_attention as phase

sys.path.insert(0, str(Path(__file__).parent))
from attention import bench_config, plain_forward  # noqa: E402


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
    out["flash_gflop_per_s"] = flash_rates(cc.n_entries(T))
    out["layers"] = layer_seconds(T)
    print(json.dumps(out))
    return out


def flash_rates(n: int) -> dict:
    """GFLOP/s of the CPU flash kernel (`aten::_scaled_dot_product_flash_attention_for_cpu`, as the
    phase path calls it: 4 query heads, 1 KV head of 64) over the pairs it must compute: one phase's
    causal call (n rows over n entries) against non-causal calls of n and of 256 rows over n keys."""
    flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    g = torch.Generator().manual_seed(3)
    k, v = (torch.randn(1, 1, n, 64, generator=g) for _ in range(2))
    out = {}
    with torch.no_grad():
        for name, rows, causal in ((f"causal_{n}", n, True), (f"noncausal_{n}", n, False), (f"noncausal_256x{n}", 256, False)):
            q = torch.randn(1, 4, rows, 64, generator=g)
            pairs = 4 * (rows * (rows + 1) / 2 if causal else rows * n)
            out[name] = pairs * 4 * 64 / cpu_seconds(lambda: flash(q, k, v, 0.0, causal, scale=0.125), 5) / 1e9  # noqa: B023  (timed at once, inside the loop)
    return out


def layer_seconds(T: int) -> dict:
    """CPU seconds of the first block of each twin (`attention.bench_config`), of its attention
    module and of its MLP, on one random [1, T, d_model] input, best of 3."""
    x = torch.randn(1, T, bench_config("full", T).d_model, generator=torch.Generator().manual_seed(1))
    out = {}
    with torch.no_grad():
        for kind in ("full", "compressed"):
            block = HookedCompressedTransformer(bench_config(kind, T), seed=0).eval().blocks[0]
            out[kind] = {"block": cpu_seconds(lambda: block(x)), "attention": cpu_seconds(lambda: block.attn(x)),  # noqa: B023  (timed at once, inside the loop)
                         "mlp": cpu_seconds(lambda: block.mlp(x))}  # noqa: B023  (timed at once, inside the loop)
    out["block_ratio"] = out["compressed"]["block"] / out["full"]["block"]
    return out


def parts_seconds(T: int, rounds: int = 3) -> dict:
    """Best-of-20 CPU seconds of RoPE on the queries and of one compressor branch of the
    compressed block, best-of-5 of one block of each twin, and the whole compressed model through
    its modules and hook points (`hooked`) against `attention.plain_forward` (`plain`), alternating
    `rounds` times in this one process (a pair of fresh processes differs by more than the hooks cost)."""
    torch.set_num_threads(1)
    models = {kind: HookedCompressedTransformer(bench_config(kind, T), seed=0).eval() for kind in ("full", "compressed")}
    attn = models["compressed"].blocks[0].attn
    x = torch.randn(1, T, attn.cfg.d_model, generator=torch.Generator().manual_seed(1))
    tokens = torch.randint(0, 512, (1, T), generator=torch.Generator().manual_seed(2))
    out: dict = {"seq_len": T}
    with torch.no_grad():
        q = torch.einsum("btd,hde->bthe", x, attn.W_Q)
        out["rope_q"] = cpu_seconds(lambda: attn.rotate(q, torch.arange(T)), 20)
        out["compressor_branch"] = cpu_seconds(lambda: attn.compress_k(x), 20)
        out["block"] = {kind: cpu_seconds(lambda: m.blocks[0](x), 5) for kind, m in models.items()}  # noqa: B023  (timed at once, inside the loop)
        model = models["compressed"]
        model(tokens[:, :256]), plain_forward(model, tokens[:, :256])  # code paths loaded once
        runs = {"hooked": [], "plain": []}
        for _ in range(rounds):
            runs["hooked"].append(cpu_seconds(lambda: model(tokens), 1))
            runs["plain"].append(cpu_seconds(lambda: plain_forward(model, tokens), 1))
    out["block_ratio"] = out["block"]["compressed"] / out["block"]["full"]
    out["whole_model_seconds"] = runs
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--parts", action="store_true", help="only the per-part and hooked-vs-plain timings")
    args = parser.parse_args()
    if args.parts:
        print(json.dumps(parts_seconds(16384)))
    else:
        main()
