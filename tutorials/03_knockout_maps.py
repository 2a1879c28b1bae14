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
# # 03 Knockout maps: which KV head owns which phase?
#
# Reading gates (tutorial 02) shows *where* information could be; a causal test shows what the model
# *uses*. A **knockout** replaces the output of one unit (by default the query heads that read one
# KV head) at the final position with its mean over a disjoint calibration set, and measures the
# accuracy change per residue. Over all units this gives a **specialization map**
# (layer x KV head x residue): in a compressed model single heads own a few phases; with full
# attention knockouts act on every phase alike.
#
# The map's value is `100 * (acc_knockout - acc_clean) / acc_clean` per residue (nan where the clean
# accuracy is 0), with a paired cluster-bootstrap interval (`lo`, `hi`). See
# `docs/interventions.md`.

# %%
import warnings
from pathlib import Path

import numpy as np
import torch

torch.set_num_threads(1)

import phaseinterp
from phaseinterp.analysis import SpecializationMap, stack_maps
from phaseinterp.interventions import knockout, knockout_map, planted_model
from phaseinterp.plot import map_figure
from phaseinterp.tasks import RecordLookup

w4s4 = phaseinterp.load("w4s4")
full = phaseinterp.load("full")

task = RecordLookup(vocab_size=256, n_records=10, n_demos=6, seq_len=64)
batch = task.sample(32, modulus=8, seed=0)
calib = task.sample(32, modulus=8, seed=0, split="calibration")  # never shares a record with `batch`

# %% [markdown]
# ## A map for the compressed model
#
# One call scans every (layer, KV head). At the final position it does not run one forward per
# head: it caches the clean run and recomputes only the query position for all units at once.

# %%
kmap = knockout_map(w4s4, batch, calib, label="w4s4")  # absolute change, percentage points
print(kmap)
print("values (pp):\n", np.round(kmap.values, 1))
print("significant (interval excludes 0):\n", kmap.significant.astype(int))
print("owned phases (change <= -50 pp, significant):", kmap.coverage(threshold=50, significant=True))
print("residues no unit owns:", kmap.uncovered(threshold=50, significant=True))

# %% [markdown]
# In Jupyter a map displays as its figure (`map_figure`), with its repr and top cells folded under
# it; the figure carries its own plotly.js, so it shows offline.

# %%
kmap

# %% [markdown]
# Layer 1's KV head owns residues 1, 2, 5, 6 (knocking it out loses ~90 pp there, every interval
# far from 0); nobody owns the weak residues, where there is nothing left to lose: their changes
# are a few points at most and their intervals include 0, so they are not significant (the figure
# prints them in parentheses). Each cell is an absolute change in points with a paired
# logical-example bootstrap interval (`lo`, `hi`).

# %%
kmap.to_pandas().query("layer == 1")[["unit", "residue", "value", "lo", "hi", "significant", "acc_knockout"]]

# %% [markdown]
# The paper reports the relative change, `100 (acc_ko - acc_clean) / acc_clean`. Dividing by a
# clean accuracy near 0 turns one flipped example into +-100%, so `change="relative"` reports it
# only where the clean accuracy's interval lies above a floor (its lower bound >= 0.25, above the
# task's chance) and masks the rest, with the reason in `meta["masked"]`.

# %%
rel = knockout_map(w4s4, batch, calib, change="relative", label="w4s4")
print(rel.meta["masked"]["reason"], "-> masked residues", rel.meta["masked"]["residues"])
print("relative values (%):\n", np.round(rel.values, 1))
assert set(rel.meta["masked"]["residues"]) >= {0, 3, 4, 7}  # the boundary phases, where W4/S4 fails
map_figure(rel)

# %% [markdown]
# ## Full attention
#
# The same knockout on the full-attention checkpoint removes retrieval at every residue: the head
# matters, the phase does not.

# %%
fmap = knockout_map(full, batch, calib, label="full")
print("full attention, owned residues:", fmap.coverage(threshold=50))
assert kmap.coverage(threshold=50, significant=True)["L1.KV0"] == [1, 2, 5, 6]
assert fmap.coverage(threshold=50, significant=True)["L1.KV0"] == list(range(8))
assert not kmap.significant[:, :, [0, 3, 4, 7]].any()  # the weak phases: no effect claimed

# %% [markdown]
# Both maps have the same dims and coordinates, so `stack_maps` puts them on a new `model` axis for
# one figure. `phaseinterp.plot.map_figure` draws a diverging heatmap clipped at
# +-100; the hover shows the unclipped value and whether the interval excludes 0.

# %%
both = stack_maps([kmap, fmap], "model", ["w4s4", "full"])
map_figure(both, title="KV-head knockout: absolute accuracy change (pp)")

# %% [markdown]
# ## Finer units and other replacements
#
# `positions="all"` (or a list of absolute positions) knocks out more than the final position;
# `level="head"` knocks out single query heads; `replacement="zero"` or `"resample"` change what
# replaces them; `knockout(...)` returns the phase curve with one unit out. Layer 0 stays
# unimportant even at every position: retrieval runs through layer 1's compressed entries.

# %%
allpos = knockout_map(w4s4, batch, calib, layers=[0], positions="all")
print("layer 0 knocked out at every position (pp):", np.round(allpos.values[0, 0], 0))
hmap = knockout_map(w4s4, batch, calib, level="head", layers=[1])
print("layer 1, single query heads (pp):\n", np.round(hmap.values[0], 0))
print(knockout(w4s4, batch, calib, layer=1, kv_head=0))

# %% [markdown]
# No single query head matters on its own (the four heads reading the KV head are redundant), but
# together they carry all retrieval: a head-level map alone would have missed the mechanism.
#
# ## Ground truth: a planted model
#
# Does the method find a known answer? `planted_model` is a hand-set one-layer model in which KV
# head `h` stores exactly the records whose key sits at phase `key_offsets[h]`. The map must recover
# that assignment (the tests check this exactly).

# %%
planted = planted_model(64, stride=4, key_offsets=(0, 2))
ptask = RecordLookup(vocab_size=64, n_records=8, n_demos=2)
pbatch, pcalib = ptask.sample(16, 8, seed=0), ptask.sample(16, 8, seed=0, split="calibration")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # nan cells where the clean accuracy is 0
    pmap = knockout_map(planted, pbatch, pcalib)
print(pmap.coverage(threshold=50))
assert pmap.coverage(threshold=50) == {"L0.KV0": [0, 4], "L0.KV1": [2, 6]}

# %% [markdown]
# ## Saving
#
# Maps round-trip through JSON (everything, including the clean curve and provenance) or a long CSV
# table.

# %%
import tempfile

path = kmap.save(Path(tempfile.mkdtemp()) / "knockout.json")
again = SpecializationMap.load(path)
assert np.array_equal(again.values, kmap.values, equal_nan=True)
print("saved and reloaded", path.name, again.meta["intervention"])
