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
# # 01 Quickstart: a phase curve from a shipped checkpoint
#
# A compressed attention layer folds each window of `W` tokens, one window every `S` tokens, into a
# single cache entry. Whether a fact survives that folding can depend on where it sits inside the
# window, that is on its **phase** `t mod S` (absolute position `t`, BOS = 0). An average accuracy
# hides this; a **phase curve** (accuracy per residue `r = t mod R`, with `R` a multiple of `S`)
# shows it.
#
# This notebook loads a small W4/S4 model that ships with the repository, builds the record-lookup
# task it was evaluated on, measures its phase curve and compares it with a full-attention model
# trained the same way. Everything runs on CPU in a few seconds.

# %%
from pathlib import Path

import torch

torch.set_num_threads(1)  # tiny models on a few cores: one thread is much faster

import phaseinterp
from phaseinterp.measure import phase_sweep
from phaseinterp.plot import phase_figure
from phaseinterp.sources import resolve_source
from phaseinterp.tasks import RecordLookup

# %% [markdown]
# ## Load a checkpoint and its card
#
# `phaseinterp.load("w4s4")` loads a shipped model by name (`phaseinterp.models()` lists them; the
# wheel carries this one) and returns a `HookedCompressedTransformer`; it also takes a path to a
# safetensors checkpoint (the model config travels in its metadata). Each shipped checkpoint has a
# JSON card with the training recipe, timings and the **matched evaluation task**
# (`data.eval_task`); `resolve_source` returns the model and its card together.

# %%
model = phaseinterp.load("w4s4")
card = resolve_source("w4s4").card

print(f"{card['name']}: {card['n_parameters']:,} parameters, {card['steps']} steps, "
      f"trained in {card['wall_time_s']:.0f} s on CPU")
print("compression per layer:", [(c.window, c.stride, c.gate) for c in (model.cfg.compression(l)
                                                                        for l in range(model.cfg.n_layers))])
print("eval task:", card["data"]["eval_task"])

# %% [markdown]
# ## The task: record lookup, stratified by phase
#
# A prompt is `BOS | records "key value" among filler | demonstrations | target key`; the model must
# answer with the target's value. `RecordLookup.sample(n, modulus=R)` renders each of `n` logical
# examples once at **every** residue `r` of the target key's position, changing only the padding,
# so residues differ in position alone. Rows record where the key, value and query sit.

# %%
task = RecordLookup(**card["data"]["eval_task"])
batch = task.sample(64, modulus=8, seed=0)  # 64 logical examples x 8 residues = 512 prompts

print(len(batch), "prompts of", batch.tokens.shape[1], "tokens")
print("first example at residues 0..7: key positions", batch.key_pos[:8].tolist())
print("                                 residues     ", batch.residue[:8].tolist())
print("query position", batch.query_pos[0].item(), "answer token", batch.answers[0].item())

# %% [markdown]
# ## The phase curve
#
# `phase_sweep` scores top-1 accuracy at each row's query position and returns a `PhaseCurve` with
# per-residue accuracies, logical-example cluster-bootstrap intervals and permutation tests: `p`
# tests "no phase effect", `p_periodic` tests "the residue matters only through `r mod S`"
# (see `docs/statistics.md`).

# %%
curve = phase_sweep(model, batch, progress=False, label="w4s4")
print(curve)
curve.to_pandas()[["residue", "phase", "n", "accuracy", "boot_lo", "boot_hi"]]

# %% [markdown]
# Two of every four phases are near 100% and two near 0%: the same pattern repeats with period
# `S = 4`. Full attention, trained with the same recipe, has no such structure (we pass `period=4`
# so its curve is tested for the same period).

# %%
full = phaseinterp.load("full")
full_curve = phase_sweep(full, batch, period=4, progress=False, label="full attention")
print(full_curve)

for c in (curve, full_curve):
    print(f"{c.label:>15}: mean {100 * c.mean:5.1f}%  worst {100 * c.worst:5.1f}% (r={c.worst_residue})  "
          f"gap {c.gap_pp:5.1f} pp  periodicity {c.periodicity_pp:4.1f} pp  p={c.p_value:.3g}")

# %%
assert curve.gap_pp > 50 and full_curve.gap_pp < 10  # what this notebook is about

# %% [markdown]
# ## Plot
#
# `phaseinterp.plot.phase_figure` builds a plotly figure (the library never calls `show()`); the
# dashed line marks the window boundary every `S` residues. `save_html` writes an HTML file that
# loads the `plotly.min.js` written once into its folder (`include_plotlyjs=True` embeds it instead).

# %%
import tempfile

from phaseinterp.plot import save_html

fig = phase_figure({"W4/S4 compressed": curve, "full attention": full_curve}, periods=[4],
                   title="Record lookup accuracy by needle phase")
out = save_html(fig, Path(tempfile.mkdtemp()) / "phase_curve.html")
print("wrote", out)
fig

# %% [markdown]
# Next: `02_hooks_and_gates` looks inside the model (hooks, caches, compression gates) to see *why*
# phases 0 and 3 are weak.
