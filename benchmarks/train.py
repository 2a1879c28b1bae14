"""Training throughput: the hooked model against the same model with its hook points bypassed.

    python benchmarks/train.py                      # shipped-recipe shapes, prints a table
    python benchmarks/train.py --out benchmarks/results/train.json

For each recipe, two copies of the same weights train side by side on the same batches
(forward, backward, AdamW step): the `HookedCompressedTransformer` as is, and a deep copy whose
`HookPoint` modules are swapped for identity modules. Rounds alternate between the two (A B B A
...) so load on a shared machine hits both alike; the result is the median tokens per second of
each and their ratio (target: hooked within 10% of bypassed, ratio >= 0.90). One thread.
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
from torch import nn

from phaseinterp import __version__
from phaseinterp.train import make_batch, recipe
from phaseinterp.train.loop import batch_sums
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


def train_steps(model: nn.Module, opt: torch.optim.Optimizer, batches: list) -> float:
    """Seconds for one optimizer step per batch."""
    t0 = time.perf_counter()
    for b in batches:
        wloss, _ = batch_sums(model(b.tokens), b)
        (wloss / b.weights.sum()).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return time.perf_counter() - t0


def bench(name: str, rounds: int, steps: int) -> dict:
    from phaseinterp import HookedCompressedTransformer

    model_cfg, tcfg = recipe(name)
    hooked = HookedCompressedTransformer(model_cfg, seed=0).train()
    plain = bypass_hooks(hooked)
    models = {"hooked": hooked, "bypassed": plain}
    opts = {k: torch.optim.AdamW(m.parameters(), lr=1e-4) for k, m in models.items()}
    batches = [make_batch(tcfg.mixture, 0, s, tcfg.batch_size) for s in range(steps)]
    tokens = steps * tcfg.batch_size * tcfg.mixture.seq_len
    for k in models:  # warm-up
        train_steps(models[k], opts[k], batches[:2])
    rates = {k: [] for k in models}
    for r in range(rounds):
        order = ["hooked", "bypassed"] if r % 2 == 0 else ["bypassed", "hooked"]
        for k in order:
            rates[k].append(tokens / train_steps(models[k], opts[k], batches))
    med = {k: statistics.median(v) for k, v in rates.items()}
    return {"recipe": name, "batch_size": tcfg.batch_size, "seq_len": tcfg.mixture.seq_len, "steps_per_round": steps,
            "rounds": rounds, "tokens_per_s": med, "all_rounds": rates, "ratio_hooked_over_bypassed": med["hooked"] / med["bypassed"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--recipes", nargs="+", default=["full", "w4s4", "w8s4", "deepseek-kernel"])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=10, help="optimizer steps per round")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(1)
    results = []
    for name in args.recipes:
        res = bench(name, args.rounds, args.steps)
        results.append(res)
        tps = res["tokens_per_s"]
        print(f"{name:16s} hooked {tps['hooked']:9.0f} tok/s  bypassed {tps['bypassed']:9.0f} tok/s  "
              f"ratio {res['ratio_hooked_over_bypassed']:.3f}", flush=True)
    out = {"benchmark": "train_throughput", "results": results, "torch_threads": 1,
           "versions": {"phaseinterp": __version__, "torch": torch.__version__, "python": platform.python_version()},
           "machine": platform.machine(), "processor": platform.processor()}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, indent=2) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
