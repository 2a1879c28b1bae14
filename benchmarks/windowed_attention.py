"""One forward of Gemma 3 270M over a 4,096-token prose needle prompt under three attention
implementations, side by side in one run: HF's `eager` (what `load_gemma3_270m` loads), HF's `sdpa`, and
`backends.windowed_attention` (sliding layers by blocks of queries).

    python benchmarks/windowed_attention.py --out benchmarks/results/windowed_attention.json

One CPU thread; logits at the answer positions only (`logits_to_keep`), as a phase sweep projects them.
A ratio is a time over `eager`'s in the same round; the median over rounds is kept. It checks that the
three give the same answer tokens and records the largest logit difference from `eager`.
Target: windowed <= 0.5x eager.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import torch

from phaseinterp import __version__
from phaseinterp.backends.windowed_attention import ATTENTIONS, set_attention
from phaseinterp.families.gemma3.load import load_gemma3_270m
from phaseinterp.measure.outputs import write_atomic
from phaseinterp.measure.provenance import versions
from phaseinterp.tasks import ProseNeedle



def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seq-len", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", default="benchmarks/results/windowed_attention.json")
    args = parser.parse_args()
    torch.set_num_threads(1)
    model, tokenizer = load_gemma3_270m()
    batch = ProseNeedle(tokenizer, seq_len=args.seq_len).sample(1, 1, seed=0)
    tokens, keep = batch.tokens[:1], batch.answer_pos[:1]
    # keyed by the implementation's name in the config ("phaseinterp_windowed_sdpa" for "windowed")
    seconds: dict[str, list[float]] = {}
    logits = {}
    for _ in range(args.rounds):
        for choice in ATTENTIONS:
            impl = set_attention(model, choice).config._attn_implementation
            with torch.no_grad():
                start = time.perf_counter()
                logits[impl] = model(input_ids=tokens, use_cache=False, logits_to_keep=keep).logits
                seconds.setdefault(impl, []).append(time.perf_counter() - start)
    ratio = {k: sorted(a / b for a, b in zip(seconds[k], seconds["eager"]))[args.rounds // 2] for k in seconds}
    result = {"benchmark": "windowed_attention", "device": "cpu", "threads": 1, "python": platform.python_version(),
              "phaseinterp": __version__, "versions": versions(), "model": "Gemma 3 270M (Q4_K_M GGUF, float32)",
              "seq_len": args.seq_len, "sliding_window": model.config.sliding_window,
              "command": "python benchmarks/windowed_attention.py " + " ".join(
                  f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items()),
              "seconds": seconds, "ratio_to_eager": ratio,
              "same_answer_tokens": all(torch.equal(logits[k].argmax(-1), logits["eager"].argmax(-1)) for k in seconds),
              "max_abs_logit_difference_to_eager": {k: float((logits[k] - logits["eager"]).abs().max()) for k in seconds},
              "target": {"windowed_ratio": 0.5}}
    print(json.dumps({k: result[k] for k in ("ratio_to_eager", "same_answer_tokens", "max_abs_logit_difference_to_eager")}))
    write_atomic(Path(args.out), json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
