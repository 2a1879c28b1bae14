"""What forwarding long prompts in chunks saves the base run of the KV-cache path (knockout and patching
maps of HF decoders), as ratios to one forward over every prompt, side by side in one run.

    python benchmarks/base_chunks.py --out benchmarks/results/base_chunks.json

`KVCacheFinalRun` keeps every prompt's cache for the units, so what a chunk bounds is the forward's
transient activations (attention scores and MLP activations of every prompt at once). On one CPU
thread, for SmolLM2-135M-Instruct (offline, `load_smollm2`) and `ProseNeedle` prompts, each setting of
`base_tokens` runs in its own process, which reports its peak resident memory above what it held after
loading the model and sampling the prompts (Linux's VmHWM, reset there), and the base run's time:
- `one_forward`: every prompt in one forward (`base_tokens` = prompts x length);
- `chunks`: `--per-chunk` prompts per forward.

Both runs give the same logits (their largest difference is recorded). A ratio is the median of paired
ratios over interleaved rounds; the memory target is <= 0.8 (the cache both keep is a floor).
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from phaseinterp import __version__
from phaseinterp.measure.outputs import write_atomic
from phaseinterp.measure.provenance import versions


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def _peak_rss_bytes() -> int:
    """The process's peak resident memory since `_reset_peak` (VmHWM)."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:  # Linux >= 4.0: "5" resets VmHWM to the current RSS
        f.write("5")


def one(args: argparse.Namespace) -> None:
    """Child process: load, sample, run the base run once with `args.base_tokens`; print what it measured."""
    from answer_rows import held_bytes  # this folder: the bytes a run keeps for its units

    from phaseinterp.backends.kv_cache import KVCacheFinalRun
    from phaseinterp.backends.smollm2 import load_smollm2, smollm2_backend
    from phaseinterp.tasks import ProseNeedle

    torch.set_num_threads(1)
    model, tokenizer = load_smollm2()
    backend = smollm2_backend(model)
    batch = ProseNeedle(tokenizer, seq_len=args.seq_len).sample(args.n_per_residue, args.modulus, seed=0)
    qpos = batch.answer_pos[:, 0]
    gc.collect()
    _reset_peak()  # the model's load peaks higher than what it holds after
    held = _rss_bytes()
    start = time.perf_counter()
    run = KVCacheFinalRun(backend, batch.tokens, qpos, base_tokens=args.base_tokens)
    seconds = time.perf_counter() - start
    peak = _peak_rss_bytes()
    torch.save(run.logits, args.logits)
    print(json.dumps({"seconds": seconds, "peak_above_load_bytes": peak - held, "kept_bytes": held_bytes(run),
                      "forwards": run.n_base_forwards, "prompts": len(batch)}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--n-per-residue", type=int, default=1)
    parser.add_argument("--modulus", type=int, default=8)
    parser.add_argument("--per-chunk", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", default="benchmarks/results/base_chunks.json")
    parser.add_argument("--base-tokens", type=int, help=argparse.SUPPRESS)  # child process
    parser.add_argument("--logits", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.base_tokens is not None:
        return one(args)
    n_prompts = args.n_per_residue * args.modulus
    settings = {"one_forward": n_prompts * args.seq_len, "chunks": args.per_chunk * args.seq_len}
    measured: dict[str, list[dict]] = {k: [] for k in settings}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeats):
            for name, base_tokens in settings.items():
                out = subprocess.run([sys.executable, __file__, "--seq-len", str(args.seq_len), "--n-per-residue",
                                      str(args.n_per_residue), "--modulus", str(args.modulus), "--base-tokens",
                                      str(base_tokens), "--logits", f"{tmp}/{name}.pt"],
                                     check=True, capture_output=True, text=True).stdout
                measured[name].append(json.loads(out.strip().splitlines()[-1]))
        diff = float((torch.load(f"{tmp}/chunks.pt") - torch.load(f"{tmp}/one_forward.pt")).abs().max())

    def ratio(key: str) -> float:
        pairs = sorted(c[key] / o[key] for c, o in zip(measured["chunks"], measured["one_forward"]))
        return pairs[len(pairs) // 2]

    result = {"benchmark": "base_chunks", "device": "cpu", "threads": 1, "python": platform.python_version(),
              "phaseinterp": __version__, "versions": versions(),
              "model": "SmolLM2-135M-Instruct (Q4_1 GGUF, float32)", "prompts": n_prompts, "seq_len": args.seq_len,
              "base_tokens": settings,
              "command": "python benchmarks/base_chunks.py " + " ".join(
                  f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if k not in ("base_tokens", "logits")),
              "measured": measured, "time_ratio": ratio("seconds"), "memory_ratio": ratio("peak_above_load_bytes"),
              "max_abs_logit_difference": diff, "target": {"memory_ratio": 0.8}}
    print(json.dumps({k: result[k] for k in ("prompts", "seq_len", "time_ratio", "memory_ratio",
                                             "max_abs_logit_difference")}))
    write_atomic(Path(args.out), json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
