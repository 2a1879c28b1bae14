"""Forward time of the compressed model (W8/S8, L=16) against its full-attention twin with both run
through `torch.compile`, next to both eager, at one length (default 16k). Same models as
`benchmarks/attention.py`; each measurement in a fresh process (one thread on CPU), CPU time of the
fastest of `--repeats` forwards after one warm-up forward at full length (which also compiles).
The four processes alternate over `--rounds`; the JSON holds every round and the median ratios.

    python benchmarks/attention_compiled.py --out benchmarks/results/attention_compiled.json
    python benchmarks/attention_compiled.py --check 2048    # compiled vs eager logits, both twins
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

from phaseinterp import HookedCompressedTransformer, __version__

sys.path.insert(0, str(Path(__file__).parent))
from attention import bench_config, in_fresh_process  # noqa: E402


def _model_and_tokens(kind: str, seq_len: int) -> tuple[HookedCompressedTransformer, torch.Tensor]:
    torch.set_num_threads(1)
    return HookedCompressedTransformer(bench_config(kind, seq_len), seed=0).eval(), torch.randint(0, 512, (1, seq_len))


def measure(kind: str, seq_len: int, compiled: bool, repeats: int) -> dict:
    model, tokens = _model_and_tokens(kind, seq_len)
    fn = torch.compile(model, dynamic=False) if compiled else model
    with torch.no_grad():
        start = time.process_time()
        fn(tokens)
        first = time.process_time() - start
        times = []
        for _ in range(repeats):
            start = time.process_time()
            fn(tokens)
            times.append(time.process_time() - start)
    return {"seconds": min(times), "first_forward_seconds": first}


def compiled_vs_eager(kind: str, seq_len: int) -> float:
    """Largest absolute difference between the compiled and the eager forward's logits."""
    model, tokens = _model_and_tokens(kind, seq_len)
    with torch.no_grad():
        return float((model(tokens) - torch.compile(model, dynamic=False)(tokens)).abs().max())


def run_isolated(kind: str, seq_len: int, compiled: bool, repeats: int) -> dict:
    return in_fresh_process("attention_compiled", f"measure({kind!r}, {seq_len}, {compiled}, {repeats})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seq-len", type=int, default=16384)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default="benchmarks/results/attention_compiled.json")
    parser.add_argument("--check", type=int, metavar="SEQ_LEN",
                        help="only print the compiled-vs-eager logit difference of both twins at this length")
    args = parser.parse_args()
    if args.check:
        print(json.dumps({kind: compiled_vs_eager(kind, args.check) for kind in ("full", "compressed")}))
        return
    rounds = []
    for _ in range(args.rounds):
        r = {f"{kind}_{'compiled' if c else 'eager'}": run_isolated(kind, args.seq_len, c, args.repeats)
             for c in (False, True) for kind in ("full", "compressed")}
        r["ratio_eager"] = r["compressed_eager"]["seconds"] / r["full_eager"]["seconds"]
        r["ratio_compiled"] = r["compressed_compiled"]["seconds"] / r["full_compiled"]["seconds"]
        rounds.append(r)
        print(json.dumps({k: v for k, v in r.items() if k.startswith("ratio")}), flush=True)

    def median(key: str) -> float:
        return statistics.median(r[key] for r in rounds)

    result = {"benchmark": "attention_compiled", "seq_len": args.seq_len, "device": "cpu", "threads": 1,
              "torch": torch.__version__, "phaseinterp": __version__, "python": platform.python_version(),
              "target_time_ratio": 0.3, "time_ratio_eager": median("ratio_eager"),
              "time_ratio_compiled": median("ratio_compiled"), "rounds": rounds,
              "command": " ".join(["python", *sys.argv])}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
