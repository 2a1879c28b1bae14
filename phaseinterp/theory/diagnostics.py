"""Convergence diagnostics and retrieval accuracy of learned gates, on a held-out sample.

For a gate ``p`` over the S positions of a chunk (one head h, branch B in {K, V}):

    mean gate      pbar(r) = E_chunks[p(r)]              position = argmax_r pbar(r)
    one-hot score  E_chunks[max_r p(r)]                  one-hot when >= threshold
    static share   P_chunks[argmax_r p(r) = position]    the same position for (almost) every input
    concentration  static = exp(H(pbar)), per-chunk = E_chunks[exp(H(p))], both in [1, S]
                   (docs/paper.md, the mechanism: one-hot and static means both are close to 1)

A head *holds* the pair (r, r+1) when its key position is r and its value position r+1.
Coverage of a run = fraction of the S-1 non-final positions r held by at least one head.
Per-phase retrieval accuracy at phase r = P(argmax_v logit_v(q) = answer) over queries at r*=r.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor

from phaseinterp.theory.config import FlowConfig, TheoryConfig
from phaseinterp.theory.model import gate_probs, query_correct, query_losses, static_loss_mc
from phaseinterp.theory.optimum import exact_static_loss, theorem1_rules
from phaseinterp.theory.task import DTYPE, RunData, build_runs, query_positions


def _exp_entropy(p: Tensor) -> Tensor:
    return torch.exp(-(p * p.clamp_min(1e-300).log()).sum(dim=-1))


@torch.no_grad()
def gate_stats(theta: Float[Tensor, "run 2 m S N"], data: RunData) -> dict[str, Tensor]:
    """Per run, branch and head: mean gate, position, one-hot score, static share, concentrations."""
    p = gate_probs(theta, data.tokens)  # [R, 2, m, n, L, S]
    pbar = p.mean(dim=(3, 4))
    position = pbar.argmax(dim=-1)
    return {
        "mean_gate": pbar,
        "position": position,
        "onehot": p.max(dim=-1).values.mean(dim=(3, 4)),
        "static_share": (p.argmax(dim=-1) == position[..., None, None]).double().mean(dim=(3, 4)),
        "static_concentration": _exp_entropy(pbar),
        "chunk_concentration": _exp_entropy(p).mean(dim=(3, 4)),
    }


@torch.no_grad()
def phase_accuracy(theta: Float[Tensor, "run 2 m S N"], data: RunData, cfg: TheoryConfig
                   ) -> Float[Tensor, "run phase"]:
    """Top-1 retrieval accuracy per query phase r* in 0..S-2 (ties count as wrong)."""
    pk, pv = gate_probs(theta, data.tokens).unbind(dim=1)
    correct = query_correct(pk, pv, data, cfg)  # [R, n, Q]
    _, phase = query_positions(cfg)
    return torch.stack([correct[..., phase == r].mean(dim=(1, 2)) for r in range(cfg.S - 1)], dim=-1)


@torch.no_grad()
def eval_loss(theta: Float[Tensor, "run 2 m S N"], data: RunData, cfg: TheoryConfig) -> Float[Tensor, " run"]:
    """Monte Carlo loss of the gates on ``data``."""
    pk, pv = gate_probs(theta, data.tokens).unbind(dim=1)
    return query_losses(pk, pv, data, cfg).mean(dim=(1, 2))


def head_table(stats: dict[str, Tensor], seeds: list[int], threshold: float) -> pd.DataFrame:
    """One row per (seed, head): key/value positions and the diagnostics of both gates."""
    rows = []
    for i, seed in enumerate(seeds):
        for h in range(stats["position"].shape[2]):
            row = {"seed": seed, "head": h}
            for b, name in enumerate(("key", "value")):
                row[f"{name}_position"] = int(stats["position"][i, b, h])
                for k in ("onehot", "static_share", "static_concentration", "chunk_concentration"):
                    row[f"{name}_{k}"] = float(stats[k][i, b, h])
            row["paired"] = row["value_position"] == row["key_position"] + 1
            row["onehot"] = min(row["key_onehot"], row["value_onehot"]) >= threshold
            row["static"] = min(row["key_static_share"], row["value_static_share"]) >= threshold
            rows.append(row)
    return pd.DataFrame(rows)


def covered_positions(heads: pd.DataFrame, S: int) -> dict[int, set[int]]:
    """Per seed, the non-final positions r held by some head (key on r, value on r+1)."""
    out: dict[int, set[int]] = {}
    for seed, group in heads.groupby("seed", sort=False):
        held = group[group["paired"]]["key_position"]
        out[int(seed)] = {int(r) for r in held if 0 <= r <= S - 2}
    return out


def expected_random_coverage(m: int, S: int) -> float:
    """Coverage if each head picked a pair uniformly at random, independently: 1 - (1 - 1/(S-1))^m."""
    return float(1.0 - (1.0 - 1.0 / (S - 1)) ** m)


def best_coverage(m: int, S: int) -> float:
    """Coverage of the Theorem 1 optimum (distinct positions): m / (S-1)."""
    return m / (S - 1)


def summarize_seeds(heads: pd.DataFrame, accuracy: np.ndarray, seeds: list[int], S: int) -> pd.DataFrame:
    """One row per seed: coverage, whether every head is one-hot, paired and static, accuracies."""
    cover = covered_positions(heads, S)
    rows = []
    for i, seed in enumerate(seeds):
        g = heads[heads["seed"] == seed]
        rows.append({
            "seed": seed,
            "coverage": len(cover[seed]) / (S - 1),
            "covered_positions": " ".join(str(r) for r in sorted(cover[seed])),
            "distinct_keys": int(g["key_position"].nunique()),
            "all_onehot": bool(g["onehot"].all()),
            "all_paired": bool(g["paired"].all()),
            "all_static": bool(g["static"].all()),
            "all_onehot_paired": bool((g["onehot"] & g["paired"]).all()),
            "mean_accuracy": float(accuracy[i].mean()),
            "worst_phase_accuracy": float(accuracy[i].min()),
        })
    return pd.DataFrame(rows)


def onehot_rules(heads: pd.DataFrame, seeds: list[int], cfg: TheoryConfig
                 ) -> tuple[Float[Tensor, "run m S"], Float[Tensor, "run m S"]]:
    """Static one-hot rules at each head's learned key and value positions (the flow's limit)."""
    eye = torch.eye(cfg.S, dtype=DTYPE)
    pk, pv = [], []
    for seed in seeds:
        g = heads[heads["seed"] == seed].sort_values("head")
        pk.append(eye[torch.tensor(g["key_position"].tolist())])
        pv.append(eye[torch.tensor(g["value_position"].tolist())])
    return torch.stack(pk), torch.stack(pv)


@dataclass
class Evaluation:
    """Held-out evaluation of the flow's end point for R seeds.

    Attributes:
        heads: `head_table` (one row per seed and head).
        seeds: `summarize_seeds` plus the losses (one row per seed): ``loss`` (learned gates),
            ``onehot_limit_loss`` (one-hot rules at the learned positions), ``theorem1_loss``
            (distinct one-hot positions 0..m-1), all Monte Carlo on the same held-out sample.
        accuracy: per-phase top-1 accuracy ``[run, S-1]``.
    """

    heads: pd.DataFrame
    seeds: pd.DataFrame
    accuracy: np.ndarray


def evaluate(theta: Float[Tensor, "run 2 m S N"], cfg: TheoryConfig, flow: FlowConfig, seeds: list[int],
             chunk: int | None = None) -> Evaluation:
    """Diagnostics, accuracies and losses on ``flow.n_eval_contexts`` fresh contexts per seed.

    Runs are evaluated in chunks (all at once on the exact eps = 0 shortcut).
    """
    if chunk is None:
        chunk = 128 if cfg.eps == 0 and cfg.distinct_context else max(
            1, int(2e7 // (flow.n_eval_contexts * cfg.n_queries * cfg.N)))
    heads, acc, losses, limits, optimum = [], [], [], [], []
    for i in range(0, len(seeds), chunk):
        part = list(seeds[i:i + chunk])
        data = build_runs(cfg, part, flow.n_eval_contexts, "eval")
        th = theta[i:i + chunk]
        h = head_table(gate_stats(th, data), part, flow.onehot_threshold)
        heads.append(h)
        acc.append(phase_accuracy(th, data, cfg).numpy())
        losses.append(eval_loss(th, data, cfg).numpy())
        with torch.no_grad():
            limits.append(static_loss_mc(*onehot_rules(h, part, cfg), data, cfg).numpy())
            pk, pv = theorem1_rules(cfg)
            R = len(part)
            optimum.append(static_loss_mc(pk.expand(R, -1, -1), pv.expand(R, -1, -1), data, cfg).numpy())
    heads_df = pd.concat(heads, ignore_index=True)
    accuracy = np.concatenate(acc)
    table = summarize_seeds(heads_df, accuracy, list(seeds), cfg.S)
    table["loss"] = np.concatenate(losses)
    table["onehot_limit_loss"] = np.concatenate(limits)
    table["theorem1_loss"] = np.concatenate(optimum)
    if cfg.eps == 0 and cfg.distinct_context:
        pk, pv = theorem1_rules(cfg)
        table["theorem1_loss_exact"] = float(exact_static_loss(pk, pv, cfg))
    return Evaluation(heads=heads_df, seeds=table, accuracy=accuracy)
