# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 07 Theory: why gates specialize, in an idealized model
#
# The paper explains phase sensitivity with an idealized retrieval model: `m` heads, each with a
# log-linear key gate and value gate over the `S` tokens of every chunk, read by one joint softmax.
# The query is a token at phase `r` of some chunk; the answer is the token after it (phase `r + 1`).
# A head can only answer queries at the phase its key gate looks at, so with `m < S - 1` heads some
# phases are necessarily uncovered: **weak phases**.
#
# `phaseinterp.theory` makes this a simulator: the exact loss of static rules, the gradient flow on
# the gates, diagnostics and experiments. Defaults: `m = 3` heads, `S = 8`, `L = 4` chunks, `N = 256`
# tokens (see `docs/theory.md` for the model and what the experiments show).

# %%
import torch

torch.set_num_threads(1)

from phaseinterp.theory import (FlowConfig, TheoryConfig, exact_static_loss, expected_random_coverage,
                                run_seeds, run_trajectory, theorem1_rules)

cfg, flow = TheoryConfig(), FlowConfig()
print(cfg)
print(flow)

# %% [markdown]
# ## Static rules and Theorem 1
#
# For rules that do not depend on content, the loss has a closed form (`exact_static_loss`). Theorem
# 1's optimum keys each head one-hot on a distinct phase `r_h` and values it on `r_h + 1`. It beats
# uniform gates and two heads sharing a phase:

# %%
pk, pv = theorem1_rules(cfg)  # heads on phases 0, 1, 2
print("key rules (one row per head):\n", pk.int())
uniform = torch.full((cfg.m, cfg.S), 1.0 / cfg.S, dtype=torch.float64)
dup_k, dup_v = theorem1_rules(cfg, key_positions=[1, 1, 5])
losses = {"Theorem 1 (distinct one-hot)": float(exact_static_loss(pk, pv, cfg)),
          "two heads on one phase": float(exact_static_loss(dup_k, dup_v, cfg)),
          "uniform gates": float(exact_static_loss(uniform, uniform, cfg))}
for name, loss in losses.items():
    print(f"{name:30s} {loss:.4f}")
assert losses["Theorem 1 (distinct one-hot)"] < min(losses["two heads on one phase"], losses["uniform gates"])

# %% [markdown]
# ## Gradient flow from a random start (experiment a)
#
# `run_trajectory` integrates the flow of the gate parameters from a small random start and records
# every head's mean gate over time. The gates become one-hot and static (the same position for every
# chunk), each head keying one phase and valuing the next.

# %%
traj = run_trajectory(cfg, flow, seed=0)
print(f"{traj.meta['runtime_s']:.1f} s; end point:", {k: traj.meta["end"][k] for k in
      ("coverage", "covered_positions", "all_onehot", "all_static", "loss", "theorem1_loss")})
traj.tables["heads"][["head", "key_position", "value_position", "key_onehot", "value_onehot", "static"]]

# %%
traj.figures["gates"]

# %%
traj.figures["loss"]

# %% [markdown]
# ## Many seeds: coverage and weak phases (experiment b)
#
# Which phases a run covers depends on the seed. `run_seeds` runs seeds in one batch; per-phase
# accuracy is exactly coverage: a covered phase is always retrieved, an uncovered one never. Mean
# coverage sits between independent random picks and Theorem 1's `m / (S - 1)`.

# %%
seeds = run_seeds(cfg, flow, list(range(8)))
summary = seeds.tables["summary"].iloc[0]
print(f"coverage {summary.coverage_mean:.3f} (random picks {expected_random_coverage(cfg.m, cfg.S):.3f}, "
      f"Theorem 1 {cfg.m / (cfg.S - 1):.3f}); all heads one-hot and paired in "
      f"{100 * summary.all_heads_onehot_paired_share:.0f}% of seeds")
assert summary.all_heads_onehot_paired_share == 1.0
seeds.tables["phase_summary"]

# %%
seeds.figures["phase_accuracy"]

# %% [markdown]
# ## Turning a knob
#
# Every parameter is a field of `TheoryConfig` or `FlowConfig`. With a larger read-out scale `beta`,
# retrieval saturates and duplicate heads are pushed apart: every seed ends on distinct phases
# (`docs/theory.md` discusses when Theorem 1 stops holding). `run_sweep` scans one parameter at a
# time; `phaseinterp theory --out DIR` runs all four experiments and writes tables and figures.

# %%
sharp = run_seeds(TheoryConfig(beta=5.0), flow, list(range(8)))
print("beta=5 coverage:", round(float(sharp.tables["summary"].iloc[0].coverage_mean), 3),
      "vs beta=3:", round(float(summary.coverage_mean), 3))
