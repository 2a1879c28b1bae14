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
# # 05 Training a compressed model
#
# The shipped checkpoints were trained with `phaseinterp.train` on CPU in under 10 minutes each. This
# notebook trains a tiny W4/S4 model for a few dozen steps (seconds), shows the run folder, resumes
# it exactly, and sweeps it. A few dozen steps are far too few to learn retrieval, so we then follow
# the shipped W4/S4 run through its saved intermediate checkpoints to see *when* the phase pattern
# appears.
#
# The training data (`Mixture`) uses the layout of the evaluation task (`RecordLookup`): records
# among filler, demonstrations, a target key. The target's key position is uniform over a range
# whose length is a multiple of 24, so **no phase is favoured by the data**: any phase structure the
# model ends up with comes from its architecture.

# %%
import json
import tempfile
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
import torch

torch.set_num_threads(1)

import phaseinterp
from phaseinterp.assets import asset  # shipped files by name: the wheel's package data or a checkout's assets/
from phaseinterp.measure import phase_sweep
from phaseinterp.tasks import RecordLookup
from phaseinterp.train import RECIPES, Mixture, TrainConfig, recipe, train


# %% [markdown]
# ## The recipes behind the shipped checkpoints
#
# `recipe(name)` returns the `(ModelConfig, TrainConfig)` that made a shipped checkpoint
# (`phaseinterp/train/recipes.py`): the same data and optimizer for every model, only the
# compressor differs. `phaseinterp train --preset w4s4 --out runs/w4s4` reruns one from the
# command line.

# %%
print(sorted(RECIPES))
model_cfg, shipped_tcfg = recipe("w4s4")
print("model:", model_cfg.n_layers, "layers, d_model", model_cfg.d_model, "strides", model_cfg.strides)
print("shipped run:", shipped_tcfg.steps, "steps, batch", shipped_tcfg.batch_size, "lr", shipped_tcfg.lr)
print("mixture:", shipped_tcfg.mixture)

# %% [markdown]
# ## A short run
#
# We keep the recipe's model and shrink the data: 48-token rows with 2-4 records. `until=30` stops
# after step 30 as if interrupted (with a checkpoint); `resume="latest"` continues from it. Batches
# are a pure function of (mixture, seed, step), so the resumed run is the run that was never
# interrupted.

# %%
mixture = Mixture(vocab_size=256, seq_len=48, min_records=2, max_records=4, min_demos=1, max_demos=3)
tcfg = TrainConfig(steps=60, batch_size=32, lr=3e-3, warmup_steps=10, seed=0, mixture=mixture,
                   checkpoint_every=30, log_every=10, device="cpu")
run_dir = Path(tempfile.mkdtemp()) / "w4s4-short"

first = train(model_cfg, tcfg, run_dir, until=30, progress=False)
print("stopped at step", first.step, "->", first.checkpoint.name)
result = train(model_cfg, tcfg, run_dir, resume="latest", progress=False)
print("finished at step", result.step, f"({result.wall_time_s:.1f} s)")
print(sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*") if p.is_file()))

# %%
pd.read_json(run_dir / "metrics.jsonl", lines=True)[["step", "loss", "lookup_acc", "lr", "tokens_per_s"]]

# %% [markdown]
# Checkpoints are ordinary phaseinterp checkpoints: `phaseinterp.load` reads them, and the matched
# evaluation task comes from the mixture.

# %%
short = phaseinterp.load(result.checkpoint)
print(mixture.eval_task_kwargs())
eval_task = RecordLookup(**mixture.eval_task_kwargs())
short_curve = phase_sweep(short, eval_task.sample(32, modulus=8, seed=0), progress=False, label="60 steps")
print(short_curve)

# %% [markdown]
# Near chance at every phase, as expected after 60 steps. The shipped run took 2000 steps and sat on
# a loss plateau for the first few hundred (the recipe notes in `docs/training.md` explain how the
# data were chosen to get off it).
#
# ## How the shipped W4/S4 learned
#
# Its training log and seven intermediate checkpoints ship with it (in the wheel too; `asset(...)`
# finds them wherever phaseinterp is installed).

# %%
log = pd.read_json(asset("checkpoints/w4s4.metrics.jsonl"), lines=True)
fig = go.Figure([go.Scatter(x=log.step, y=log.loss, name="loss"),
                 go.Scatter(x=log.step, y=log.lookup_acc, name="lookup accuracy (train)", yaxis="y2")])
fig.update_layout(title="shipped W4/S4 run", xaxis_title="step", yaxis_title="loss",
                  yaxis2=dict(title="accuracy", overlaying="y", side="right", range=[0, 1]),
                  template="plotly_white")
fig

# %% [markdown]
# Sweeping each intermediate checkpoint on the card's evaluation task shows the phase curve form:

# %%
card = json.loads(asset("checkpoints/w4s4.json").read_text())
batch = RecordLookup(**card["data"]["eval_task"]).sample(16, modulus=8, seed=0)
paths = sorted(asset("checkpoints/w4s4").glob("step_*.safetensors")) + [asset("checkpoints/w4s4.safetensors")]
rows = []
for p in paths:
    c = phase_sweep(phaseinterp.load(p), batch, progress=False, n_boot=200, n_perm=200)
    step = int(p.stem.split("_")[1]) if p.stem.startswith("step_") else card["steps"]
    rows.append({"step": step, **{f"r{r}": round(100 * a) for r, a in enumerate(c.accuracy)},
                 "mean %": round(100 * c.mean, 1), "gap pp": round(c.gap_pp, 1)})
dynamics = pd.DataFrame(rows)
print(dynamics.to_string(index=False))

# %%
assert dynamics["gap pp"].iloc[-1] > 50  # the final checkpoint is phase sensitive

# %% [markdown]
# Retrieval appears at the strong phases only; the weak phases never catch up, even though the data
# put targets at every phase equally often. `phaseinterp.analysis.gate_dynamics` follows the gate
# concentration over the same checkpoints, and `phaseinterp gates CHECKPOINT --dynamics` writes it
# as a figure.
#
# ## From the command line
#
#     phaseinterp train --preset w4s4 --out runs/w4s4                  # a shipped recipe (~5 min on CPU)
#     phaseinterp train --preset tiny-w8s8 --steps 500 --out runs/x    # a model preset, default data
#     phaseinterp train --config run.json --out runs/mine              # {"model": ..., "train": ...}
#
# Add `--ship DIR` to copy the final weights, card and metrics next to the shipped ones.
