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
# # 11 Native Sparse Attention: a model we did not write
#
# NSA (`native-sparse-attention-pytorch`, `pip install 'phaseinterp[nsa]'`) reads three branches:
# **compressed** entries (W-token windows every S tokens, folded by an MLP: our W/S geometry), a
# **selection** branch that re-reads the k raw blocks the compressed scores rank highest, and a
# **sliding** window, mixed by learned per-head sigmoid gates. `phaseinterp.model.nsa` runs the
# library's `SparseAttention` step by step inside our blocks, so every step has a hook point
# (docs/nsa.md), and our trainer, sweeps and knockouts take it.
#
# The question of issue 18: does NSA have periodic weak spots, and does selection repair them?
#
# **Needs more than the wheel**: the `nsa` extra (`pip install 'phaseinterp[nsa]'`) and the trained
# NSA checkpoints (`nsa-w8s8-k0-s0`, `nsa-w8s8-k2-s0`), which are not in the wheel: run from a git
# checkout of phaseinterp, or point `PHASEINTERP_HOME` at a checkout's `assets/` folder.

# %%
import numpy as np
import torch

torch.set_num_threads(1)

import phaseinterp
from phaseinterp.analysis.nsa_selection import selection_frequency
from phaseinterp.backends import backend_for
from phaseinterp.interventions import knockout_map
from phaseinterp.interventions.nsa_branches import branch_knockout
from phaseinterp.measure import phase_sweep
from phaseinterp.model.nsa import NSAConfig, NSATransformer
from phaseinterp.catalog import model_info
from phaseinterp.tasks import RecordLookup

# %% [markdown]
# ## The hook sites
#
# A tiny random NSA model: every step of the attention is a TransformerLens hook point, readable by
# `run_with_cache` (and nnsight). The branch outputs recombine into `hook_z` through the gates.

# %%
model = NSATransformer(NSAConfig(num_selected=2), seed=0)
print(model.cfg.describe())
print([n for n in model.hook_dict if n.startswith("blocks.1.attn")])
tokens = torch.randint(0, 256, (2, 48))
_, cache = model.run_with_cache(tokens)
a = "blocks.1.attn."
gates = cache[a + "hook_branch_gates"]
mix = sum(gates[..., i:i + 1] * cache[a + f"hook_z_{b}"] for i, b in enumerate(("compress", "select", "sliding")))
print("branches x gates == hook_z:", torch.allclose(mix, cache[a + "hook_z"]))
print("blocks chosen at the last position (per KV head):", cache[a + "select.hook_indices"][0, -1].tolist())

# %% [markdown]
# ## Trained models: phase curves with and without selection
#
# The shipped NSA zoo (`python -m experiments.nsa.train`; cards next to the weights) has a sliding window
# of 8 tokens: the target record is 13 or more tokens before the query, so it must come through the
# compressed or the selected branch. A quick sweep (48 logical examples per residue, mod 16 = two
# periods of S = 8; the full tables are in `assets/results/nsa.md`):

# %%
task = RecordLookup(**{**model_info("nsa-w8s8-k2-s0").task, "seq_len": 88})  # its card's matched task, longer rows
batch = task.sample(48, 16, seed=0)
models = {name: phaseinterp.load(name) for name in ("nsa-w8s8-k0-s0", "nsa-w8s8-k2-s0")}
for name, m in models.items():
    curve = phase_sweep(m, batch, progress=False, n_boot=200, n_perm=200)
    print(f"{name}: mean {100 * curve.accuracy.mean():.0f}%, worst {100 * curve.accuracy.min():.0f}%, "
          f"by residue {np.round(100 * curve.accuracy).astype(int).tolist()}")

# %% [markdown]
# ## Which branch carries the needle?
#
# Zero one branch's output in one layer (at every position) and measure the accuracy change per
# residue, in percentage points.

# %%
k2 = models["nsa-w8s8-k2-s0"]
small = task.sample(24, 16, seed=0)
ko = branch_knockout(k2, small, n_boot=200)
print(ko.to_pandas().pivot_table(index="unit", columns="residue", values="value").round(0))

# %% [markdown]
# ## What does selection pick, by the needle's phase?
#
# The share of queries whose k chosen blocks include the block of the target key (and of its value:
# a record at phase S - 1 straddles two blocks).

# %%
sel = selection_frequency(k2, small, layer=1)
print("key block chosen (%), KV head 0:", np.round(100 * sel["key_block"][0]).astype(int).tolist())
print("value block chosen (%), KV head 0:", np.round(100 * sel["value_block"][0]).astype(int).tolist())

# %% [markdown]
# ## The same KV-head knockout as for every other model
#
# `backend_for` gives the NSA model a backend (nnsight on `hook_z`), so `knockout_map` runs the
# paper's protocol unchanged.

# %%
kmap = knockout_map(backend_for(k2), small, task.sample(12, 16, seed=1, split="calibration"), n_boot=200)
print(kmap.dims, kmap.shape)
print(np.round(kmap.values[1]).astype(int))
