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
# # 08 Mitigations: toward phase-uniform compression
#
# Weak phases come from where facts sit relative to the chunk grid. This notebook shows that link
# directly on a trained model, introduces the five mitigations phaseinterp implements (random chunk
# offsets, multi-offset compression, overlapping windows, a coverage regularizer and a gate
# entropy regularizer), and reads the equal-budget experiment that ships with the repository
# (the study in `experiments/mitigations`). The costs of each option are in `docs/mitigations.md`.

# %%
import json

import torch

torch.set_num_threads(1)  # tiny models on a few cores: one thread is much faster

import numpy as np
import pandas as pd

import phaseinterp
from phaseinterp.assets import asset  # shipped files by name: the wheel's package data or a checkout's assets/
from phaseinterp import CompressionConfig
from phaseinterp.measure import phase_sweep
from phaseinterp.plot import memory_figure
from phaseinterp.tasks import RecordLookup
from phaseinterp.train.mitigation import Mitigation, coverage_penalty, recorded_key_gates, shifted_grid


# %% [markdown]
# ## Weak phases move with the grid
#
# `shifted_grid(model, o)` runs a model with every compressed layer's windows starting `o`
# positions earlier. If the weak phases are a property of the grid, residue `r + o` of the
# unshifted model becomes residue `r` of the shifted one.

# %%
model = phaseinterp.load("w4s4").eval()
card = json.loads(asset("checkpoints/w4s4.json").read_text())
batch = RecordLookup(**card["data"]["eval_task"]).sample(16, modulus=8, seed=0)
rows = {}
for o in range(4):
    with shifted_grid(model, o):
        rows[f"grid shifted by {o}"] = phase_sweep(model, batch, progress=False, n_boot=100, n_perm=100).accuracy
pd.DataFrame(rows, index=[f"r={r}" for r in range(8)]).T.round(2)

# %%
base = rows["grid shifted by 0"]
for o in (1, 2, 3):
    assert np.abs(rows[f"grid shifted by {o}"] - np.roll(base, -o)).max() < 0.2

# %% [markdown]
# ## The options
#
# Architectural options live in `CompressionConfig`: `chunkings=k` keeps k interleaved grids shifted
# by S/k, each with its own gates (k/S entries per token), and overlapping windows are `window >
# stride`. Training-time options live in `TrainConfig(mitigation=Mitigation(...))`.

# %% [markdown]
# The equal-budget study below (`experiments/mitigations/variants.py` in the repository) compares
# these variants, each differing from the W4/S4 baseline in one option:

# %%
variants = json.loads(asset("results/mitigations/mitigations.json").read_text())["variants"]
for name, description in variants.items():
    print(f"{name:15s} - {description}")

# %%
multi = CompressionConfig(window=4, stride=4, chunkings=2)
print("entries in 64 tokens: W4/S4", CompressionConfig(window=4, stride=4).n_entries(64), "| multi-offset",
      multi.n_entries(64), "| starts", [multi.window_start(j) for j in range(5)])

# %% [markdown]
# The coverage regularizer measures how much the key gates of different units (layer, KV head)
# sit on the same phases. On the shipped W4/S4 model the two layers' key gates overlap:

# %%
with torch.no_grad(), recorded_key_gates(model) as gates:
    model(batch.tokens[:64])
print("phase overlap of the key gates:", round(float(coverage_penalty(gates)), 3), "(0 = disjoint, 1 = same phase)")
print(Mitigation(coverage_weight=0.1, entropy_weight=0.1))

# %% [markdown]
# ## The equal-budget experiment
#
# `python -m experiments.mitigations.run --out DIR --jobs 2` (the study in `experiments/mitigations/`) trained every variant with the shipped W4/S4 recipe
# (2000 steps, seeds 0 and 1) and measured it on record lookup mod 8. Its results ship in
# `assets/results/mitigations/`.

# %%
data = json.loads(asset("results/mitigations/mitigations.json").read_text())
summary = pd.DataFrame(data["summary"])
summary[["variant", "mean", "worst", "gap_pp", "gap_min", "gap_max", "entries_per_token", "gap_reduction_pp"]].round(3)

# %%
memory_figure(pd.DataFrame(data["rows"]))

# %% [markdown]
# Knockout maps of the baseline and of the best mitigation (highest worst-phase accuracy, mean
# over seeds), each on its most accurate seed: which residues each KV head owns (knockout lowers
# accuracy by at least 50%).

# %%
print("best mitigation:", data["best"])
for name, result in data.get("knockout", {}).items():
    print(f"{name:15s} owned residues {result['coverage']}  uncovered {result['uncovered_residues']}")
