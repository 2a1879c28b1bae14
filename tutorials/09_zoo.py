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
# # 09 The zoo: one recipe rule, every compressor, heads that divide the phases
#
# `phaseinterp.train.rule.rule_recipe(W, S, ...)` builds model and training config for any
# compressor by one rule (docs/training.md, "The recipe rule"); the zoo is that rule applied to the
# paper's compressor family, two seeds each (the study in `experiments/zoo/`), shipped in `assets/checkpoints/zoo/` and tabled in
# `assets/results/zoo.md`. A run has *learned* when its best residue reaches 80% on its matched
# task: a compressed model may still fail most residues, which is the effect.
#
# This notebook reads the table, then asks the paper's mechanistic question on the W8/S8 model
# with **four KV heads**: which KV head owns which phase, are the phases no head owns the weak
# ones, and do two seeds put their weak phases in the same place?
#
# **Needs more than the wheel**: the zoo's checkpoints (`zoo-w8s8-kv4-s0`, `-s1`) are not in the
# wheel (`phaseinterp models --all` marks what is installed). Run from a git checkout of phaseinterp,
# or point `PHASEINTERP_HOME` at a checkout's `assets/` folder
# (`PHASEINTERP_HOME=/path/to/phaseinterp/assets jupyter lab`); the zoo table (`zoo.json`) ships in
# the wheel.

# %%
import json

import numpy as np
import pandas as pd
import torch

torch.set_num_threads(1)

import phaseinterp
from phaseinterp.interventions import knockout_map
from phaseinterp.measure import phase_sweep
from phaseinterp.plot import map_figure
from phaseinterp.tasks import RecordLookup
from phaseinterp.train.rule import rule_recipe

from phaseinterp.assets import asset  # shipped files by name: the wheel's package data or a checkout's assets/

model_cfg, tcfg = rule_recipe(6, 6)  # a stride that is not in the zoo: same rule
print(model_cfg.compression(0).window, model_cfg.d_head, tcfg.steps, tcfg.mixture.seq_len)

# %% [markdown]
# ## The table
#
# One row per checkpoint and padding protocol: mean and worst accuracy, the gap with its
# cluster-bootstrap interval, the best residue, the dominant period of the residue curve (the
# smallest period whose harmonics carry 90% of its spectral power) and the permutation verdict.

# %%
rows = pd.DataFrame(json.loads(asset("results/zoo.json").read_text())["rows"])
print(sorted(rows.member.unique()))  # the members (experiments/zoo/members.py: their rule arguments)
rows[["model", "protocol", "modulus", "learned", "mean", "worst", "gap_pp", "best_residue", "dominant_period",
      "verdict"]].round(3)

# %% [markdown]
# ## Four KV heads, one stride: who owns which phase?
#
# The knockout replaces the outputs of the query heads that read one KV head, at the final
# position, by their mean over a disjoint calibration set. We report the **absolute** change in
# percentage points (`change="absolute"`), which is defined at weak residues too; a relative change
# divides by a clean accuracy near zero there and turns noise into large numbers. Residues run mod
# 16 (two periods of S = 8), on rows of 88 tokens (the models trained on 64; RoPE is relative).

# %%
task = RecordLookup(vocab_size=256, n_records=10, n_demos=6, seq_len=88)
batch = task.sample(48, modulus=16, seed=0)
calib = task.sample(48, modulus=16, seed=0, split="calibration")

maps, curves = {}, {}
for seed in (0, 1):
    model = phaseinterp.load(f"zoo-w8s8-kv4-s{seed}")  # not in the wheel: see the first cell
    curves[seed] = phase_sweep(model, batch, period=8, n_boot=200, n_perm=200, progress=False)
    maps[seed] = knockout_map(model, batch, calib, change="absolute", n_boot=200, label=f"w8s8-kv4 seed {seed}")
    print(f"seed {seed}: clean accuracy by residue", np.round(100 * curves[seed].accuracy).astype(int))

# %%
for seed, kmap in maps.items():
    clean = curves[seed].accuracy
    weak = sorted(int(r) for r in np.flatnonzero(clean < 0.5))
    owners = kmap.coverage(threshold=30)  # a KV head "owns" a residue when knocking it out costs >= 30 pp
    owned = sorted({r for rs in owners.values() for r in rs})
    print(f"seed {seed}: owners {owners}")
    print(f"   weak residues (< 50%): {weak}; residues some head owns: {owned}; "
          f"weak and unowned: {sorted(set(weak) - set(owned))}")

# %% [markdown]
# Where a weak residue is owned by no head, the model simply has no head reading that phase: the
# paper's "nothing pushes heads apart" picture. Compare the weak residues of the two seeds: with
# random gate-bias initialization they need not coincide.

# %%
first = next(iter(maps.values()))
map_figure(first, title=f"{first.meta['label']}: KV-head knockout, absolute change (pp)")
