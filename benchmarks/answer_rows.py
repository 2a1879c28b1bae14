"""What scoring every answer token of a prose needle costs the KV-cache path of a knockout map, as a
ratio to scoring one token per prompt, side by side in one run.

    python benchmarks/answer_rows.py --out benchmarks/results/answer_rows.json

A 4-digit needle's answer is several tokens, scored teacher-forced: `tasks.scoring.token_rows` turns each
prompt into one row per answer token, rows with equal tokens and different query positions. On one CPU
thread, for SmolLM2-135M-Instruct (offline, `load_smollm2`) and `ProseNeedle` prompts, it times the base run of
the KV-cache path (`backend.final_position_run`: one forward keeping the cache each unit reads):
- `one_row_per_prompt`: each prompt once, scored at its first answer token (the unit of cost);
- `answer_rows`: every answer token's row.

It counts the bytes of the tensors each run holds for the units (cache prefixes, residual streams, head
outputs, logits; each storage once) and checks that both runs give the same logits at the first answer
token. Rows of one prompt share one forward and one cache row, so both ratios sit near 1 (target <= 1.3
each); before they did (through f343312; `results/answer_rows_f343312.json`: this script, before it
checked logits, run with f343312's `backends/kv_cache.py`), a run cost one forward and one cache row per
answer token. A ratio is the median of paired ratios over interleaved rounds.
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
from phaseinterp.measure.outputs import write_atomic
from phaseinterp.measure.provenance import versions
from phaseinterp.tasks import ProseNeedle
from phaseinterp.tasks.scoring import token_rows


def held_bytes(run) -> int:
    """Bytes of the distinct storages a `KVCacheFinalRun` keeps for its units."""
    tensors = [run.logits, *run._resid, *run._z]
    for _, _, prefix in run.groups:
        for p in prefix:
            tensors += list(p) if isinstance(p, tuple) else [p.keys, p.values]
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors if t is not None}
    return sum(storages.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--n-per-residue", type=int, default=1)
    parser.add_argument("--modulus", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default="benchmarks/results/answer_rows.json")
    args = parser.parse_args()
    torch.set_num_threads(1)
    model, tokenizer = load_smollm2()
    backend = smollm2_backend(model)
    batch = ProseNeedle(tokenizer, seq_len=args.seq_len).sample(args.n_per_residue, args.modulus, seed=0)
    rows, owner = token_rows(batch)
    runs = {"one_row_per_prompt": (batch.tokens, batch.answer_pos[:, 0]), "answer_rows": (rows.tokens, rows.query_pos)}
    seconds: dict[str, list[float]] = {k: [] for k in runs}
    held, logits = {}, {}
    for _ in range(args.repeats):
        for name, (tokens, qpos) in runs.items():
            start = time.perf_counter()
            run = backend.final_position_run(tokens, qpos)
            seconds[name].append(time.perf_counter() - start)
            held[name], logits[name] = held_bytes(run), run.logits
            del run
    first = rows.query_pos == batch.answer_pos[:, 0][owner]  # each prompt's first answer token among the rows
    ratios = [a / b for a, b in zip(seconds["answer_rows"], seconds["one_row_per_prompt"])]
    result = {"benchmark": "answer_rows", "device": "cpu", "threads": 1, "python": platform.python_version(),
              "phaseinterp": __version__, "versions": versions(),
              "model": "SmolLM2-135M-Instruct (Q4_1 GGUF, float32)", "task": batch.meta,
              "prompts": len(batch), "answer_rows": len(rows), "seq_len": args.seq_len,
              "command": "python benchmarks/answer_rows.py " + " ".join(
                  f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items()),
              "seconds": seconds, "held_bytes": held,
              "time_ratio": sorted(ratios)[len(ratios) // 2],
              "memory_ratio": held["answer_rows"] / held["one_row_per_prompt"],
              "max_abs_logit_difference_first_answer_token": float(
                  (logits["answer_rows"][first] - logits["one_row_per_prompt"][owner[first]]).abs().max()),
              "target": {"time_ratio": 1.3, "memory_ratio": 1.3}}
    print(json.dumps({k: result[k] for k in ("prompts", "answer_rows", "time_ratio", "memory_ratio", "held_bytes")}))
    write_atomic(Path(args.out), json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
