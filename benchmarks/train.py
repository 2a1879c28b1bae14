"""Training throughput: today's trainer step against the one before it, and the hooked model
against the same model with its hook points bypassed.

    python benchmarks/train.py                      # shipped-recipe shapes, prints a table
    python benchmarks/train.py --out benchmarks/results/train.json

For each recipe, copies of the same weights train side by side on the same batches (forward,
backward, clipping, AdamW step), in rounds that rotate the order so load on a shared machine hits
all alike; the result is the median tokens per second of each variant:

- `baseline`: the trainer step as it was before the speed-up (logits and cross-entropy at every
  position, per-parameter AdamW and clipping), kept here verbatim for this comparison;
- `trainer`: `phaseinterp.train.loop`'s step (logits only where a target is, fused AdamW, foreach
  clipping), on the hooked model;
- `bypassed`: the same step on a copy whose `HookPoint`s are identity modules;
- `compiled` (with --compile): the trainer step with its forward compiled as `TrainConfig(compile=True)`
  does (`loop.compile_forward`: one graph per model).

Reported: speed-up trainer/baseline (target >= 2) and hooked/bypassed (target >= 0.95), as the ratio
of the variants' median rates and as the median of the per-round ratios (`paired_median_ratios`;
the variants of a round run back to back, so the machine's drift between rounds cancels). One thread.
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from phaseinterp import __version__
from phaseinterp.train import make_batch, recipe
from phaseinterp.train.data import IGNORE
from phaseinterp.train.loop import adamw_kernel, batch_sums, compile_forward, step_logits
from phaseinterp.train.mitigation import Mitigation
from transformer_lens.hook_points import HookPoint


class Bypass(nn.Identity):
    """Identity in place of a HookPoint (answers `has_hooks()` like an unhooked HookPoint)."""

    def has_hooks(self, *args, **kwargs) -> bool:
        return False


def bypass_hooks(model: nn.Module) -> nn.Module:
    """A deep copy of `model` with every HookPoint replaced by `Bypass`."""
    twin = copy.deepcopy(model)
    names = [name for name, m in twin.named_modules() if isinstance(m, HookPoint)]
    for name in names:
        parent_name, _, leaf = name.rpartition(".")
        setattr(twin.get_submodule(parent_name) if parent_name else twin, leaf, Bypass())
    assert not any(isinstance(m, HookPoint) for m in twin.modules())
    return twin


def baseline_loss(model: nn.Module, b) -> torch.Tensor:
    """The loss of the trainer before the speed-up: logits and CE at every position."""
    logits = model(b.tokens)
    B, T, V = logits.shape
    ce = F.cross_entropy(logits.reshape(B * T, V).float(), b.targets.reshape(-1), ignore_index=IGNORE,
                         reduction="none").view(B, T)
    with torch.no_grad():  # its per-step metrics
        correct = logits.argmax(-1) == b.targets
        lm = (b.targets != IGNORE) & ~b.lookup
        torch.stack([ce[b.lookup].sum(), ce[lm].sum(), correct[b.query].sum(), correct[b.lookup].sum()])
    return (ce * b.weights).sum()


def trainer_loss(forward, model: nn.Module, b) -> torch.Tensor:
    logits, _ = step_logits(forward, model, b, Mitigation(), None)
    return batch_sums(logits, b)[0]


def train_steps(loss_fn, params: list, opt: torch.optim.Optimizer, batches: list, foreach: bool) -> float:
    """Seconds for one optimizer step per batch."""
    t0 = time.perf_counter()
    for b in batches:
        (loss_fn(b) / b.weights.sum()).backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=foreach or None)
        opt.step()
        opt.zero_grad(set_to_none=True)
    return time.perf_counter() - t0


def bench(name: str, rounds: int, steps: int, compile: bool) -> dict:
    from phaseinterp import HookedCompressedTransformer

    model_cfg, tcfg = recipe(name)
    hooked = HookedCompressedTransformer(model_cfg, seed=0).train()
    models = {"baseline": copy.deepcopy(hooked), "trainer": hooked, "bypassed": bypass_hooks(hooked)}
    if compile:
        models["compiled"] = copy.deepcopy(hooked)
    losses = {
        "baseline": lambda b: baseline_loss(models["baseline"], b),
        "trainer": lambda b: trainer_loss(models["trainer"], models["trainer"], b),
        "bypassed": lambda b: trainer_loss(models["bypassed"], models["bypassed"], b),
    }
    if compile:
        compiled = compile_forward(models["compiled"])
        losses["compiled"] = lambda b: trainer_loss(compiled, models["compiled"], b)
    foreach = {k: k != "baseline" for k in models}
    params = {k: list(m.parameters()) for k, m in models.items()}
    kernel = {k: adamw_kernel(torch.device("cpu")) if foreach[k] else {"foreach": False} for k in models}
    opts = {k: torch.optim.AdamW(params[k], lr=1e-4, **kernel[k]) for k in models}
    batches = [make_batch(tcfg.mixture, 0, s, tcfg.batch_size) for s in range(steps)]
    tokens = steps * tcfg.batch_size * tcfg.mixture.seq_len
    for k in models:  # warm-up (and compilation)
        train_steps(losses[k], params[k], opts[k], batches[:4], foreach[k])
    rates = {k: [] for k in models}
    order = list(models)
    for r in range(rounds):
        for k in order[r % len(order):] + order[:r % len(order)]:
            rates[k].append(tokens / train_steps(losses[k], params[k], opts[k], batches, foreach[k]))
    med = {k: statistics.median(v) for k, v in rates.items()}
    out = {"recipe": name, "batch_size": tcfg.batch_size, "seq_len": tcfg.mixture.seq_len, "steps_per_round": steps,
           "rounds": rounds, "tokens_per_s": med, "all_rounds": rates,
           "speedup_trainer_over_baseline": med["trainer"] / med["baseline"],
           "ratio_hooked_over_bypassed": med["trainer"] / med["bypassed"]}
    if compile:
        out["speedup_compiled_over_baseline"] = med["compiled"] / med["baseline"]
    # each round runs every variant back to back: its ratios cancel the machine's drift between rounds
    paired = lambda a, b: statistics.median(x / y for x, y in zip(rates[a], rates[b]))  # noqa: E731
    out["paired_median_ratios"] = {"trainer_over_baseline": paired("trainer", "baseline"),
                                   "hooked_over_bypassed": paired("trainer", "bypassed"),
                                   **({"compiled_over_baseline": paired("compiled", "baseline")} if compile else {})}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--recipes", nargs="+", default=["full", "w4s4", "w8s4", "deepseek-kernel"])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=10, help="optimizer steps per round")
    parser.add_argument("--compile", action="store_true", help="also measure the torch.compile'd trainer step")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(1)
    results = []
    for name in args.recipes:
        res = bench(name, args.rounds, args.steps, args.compile)
        results.append(res)
        rates = "  ".join(f"{k} {v:7.0f}" for k, v in res["tokens_per_s"].items())
        extra = f"  compiled/baseline {res['speedup_compiled_over_baseline']:.2f}" if args.compile else ""
        print(f"{name:16s} tok/s: {rates}  trainer/baseline {res['speedup_trainer_over_baseline']:.2f}  "
              f"hooked/bypassed {res['ratio_hooked_over_bypassed']:.3f}{extra}", flush=True)
        print(f"{'':16s} per-round ratios (median): " + "  ".join(f"{k} {v:.3f}" for k, v in res["paired_median_ratios"].items()),
              flush=True)
    out = {"benchmark": "train_throughput", "results": results, "torch_threads": 1,
           "versions": {"phaseinterp": __version__, "torch": torch.__version__, "python": platform.python_version()},
           "machine": platform.machine(), "processor": platform.processor()}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, indent=2) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
