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
# # 06 HuggingFace models through nnsight: one API for every model
#
# The experiments of tutorials 01-04 are not tied to our own model. `phaseinterp.backends` puts
# three kinds of model behind one interface (`backend_for(model)` picks the right one):
#
# | backend | model |
# |---|---|
# | `HookedBackend` | our `HookedCompressedTransformer` (TransformerLens hooks and the incremental final-position path inside it) |
# | `DeepseekV4Backend` | HF `DeepseekV4ForCausalLM` (CSA and HCA compressors, gates read from the compressor's forward; gate overrides, cycling and attribution) |
# | `HFCausalLMBackend` | any HF causal LM (Qwen3, Llama, GPT-2, ...), heads read at the attention output projection |
#
# A backend exposes named units (`L1.KV0`, `L1.G0`, ...) and runs edits on them through nnsight;
# every intervention and `phase_sweep` talk to a backend only (one engine): given our model or a
# raw HF model they wrap it with `backend_for` themselves, with the same arguments for every model. Here we run the same calls on
# a tiny random DeepSeek-V4, a tiny random Qwen3 (both built from configs: no downloads) and our
# shipped checkpoint. The random models have accuracy ~0: the point is that every call runs
# unchanged on every model, which the test suite checks against the HF reference implementations.
#
# `import beartype` must come before `nnsight` (importing nnsight first breaks a later beartype
# import); `phaseinterp` does this for you, so import it first.

# %%
import beartype  # noqa: F401  (before nnsight)
import warnings

import numpy as np
import torch

torch.set_num_threads(1)

import phaseinterp
from phaseinterp.backends import Replace, SetGate, Unit, backend_for
from phaseinterp.tasks.niah import deepseek_niah
from phaseinterp.backends.tiny import tiny_deepseek_v4, tiny_qwen3, word_tokenizer
from phaseinterp.flip import FillerSpec, completion_flip, completion_flip_text
from phaseinterp.interventions import (activation_patching, cycled_gates, gate_attribution, gate_override,
                                       knockout_map, mapping_swap)
from phaseinterp.plot import flip_figure
from phaseinterp.measure import phase_sweep
from phaseinterp.tasks import RecordLookup


# %% [markdown]
# ## Three models, three backends
#
# The HF models read text, so their task is the DeepSeek-V4 NIAH protocol in text mode
# (`deepseek_niah`: two-token keys and values, target in the middle, query at the end; every prompt
# is re-tokenized and checked so recorded positions are what the model reads). Our checkpoint reads
# token ids (`RecordLookup`). Qwen3 has no compressor, so we tell its backend which period to test
# (`stride=4`).

# %%
tokenizer = word_tokenizer()  # offline word-level tokenizer
models = {
    "deepseek-v4 (tiny, random)": (tiny_deepseek_v4(), None, deepseek_niah(tokenizer, 128)),
    "qwen3 (tiny, random)": (tiny_qwen3(), 4, deepseek_niah(tokenizer, 128)),
    "w4s4 (ours, trained)": (phaseinterp.load("w4s4"), None,
                             RecordLookup(vocab_size=256, n_records=10, n_demos=6, seq_len=64)),
}
backends = {}
for name, (model, stride, _) in models.items():
    backend = backend_for(model, stride=stride)  # the only model-specific line
    backends[name] = backend
    c = backend.cfg
    print(f"{name}: {type(backend).__name__}, {c.n_layers} layers, {c.n_heads} heads / {c.n_kv_heads} KV heads, "
          f"strides {c.strides}, gate units {[u.name for u in backend.units('gate')]}")

# %% [markdown]
# ## The same sweep, knockout and patching on each
#
# `phase_sweep`, `knockout_map` and `activation_patching` are the calls of tutorials 01, 03 and 04.
# On the random models the knockout map is nan (no correct row to lose) and the library warns that
# an intervention changed nothing; we silence that here. Patching maps hold the accuracy restored in
# points with an interval by default (tutorial 04); here we ask for the fraction of the logit
# difference restored (`change="normalized"`), which is defined on a random model too, where it
# means nothing.

# %%
results = {}
for name, (_, _, task) in models.items():
    backend = backends[name]
    n = 2 if "ours" not in name else 16  # logical examples per residue
    batch = task.sample(n, modulus=8, seed=0)
    calib = task.sample(n, modulus=8, seed=0, split="calibration")
    curve = phase_sweep(backend, batch, period=4, progress=False, n_boot=200, n_perm=200, label=name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        kmap = knockout_map(backend, batch, calib, level="kv_head", n_boot=200, label=name)
        pmap = activation_patching(backend, mapping_swap(batch), unit="z", level="kv_head", change="normalized")
    results[name] = (curve, kmap, pmap)
    print(f"\n{name}: {len(batch)} prompts of {batch.tokens.shape[1]} tokens")
    print("  accuracy by residue mod 8 (%):", np.round(100 * curve.accuracy).astype(int).tolist())
    print("  knockout map", dict(zip(kmap.dims, kmap.values.shape)), "owned residues:", kmap.coverage(50))
    restored = pmap.as_2d()  # [layer.kv_head, residue]; nan where there is nothing to restore
    print("  patching map (mapping swap)", dict(zip(pmap.dims, pmap.values.shape)), "mean restored per unit:",
          [round(float(np.nanmean(row)), 2) if np.isfinite(row).any() else None for row in restored])

# %%
_, ours_kmap, ours_pmap = results["w4s4 (ours, trained)"]
assert ours_kmap.coverage(50)["L1.KV0"] == [1, 2, 5, 6]  # as in tutorial 03
assert np.nanmin(ours_pmap.sel(layer=1, kv_head=0)) > 0.9  # layer 1's head carries the answer (tutorial 04)

# %% [markdown]
# ## Reading and editing units
#
# Every backend reads and edits the same canonical sites: head outputs `[batch, pos, head, d_head]`,
# gate weights `[batch, entry, offset, kv_head, channel]`, compressed entries. On DeepSeek-V4 the
# gates are the softmax inside the HF compressor's forward (CSA: `W = 2m = 8` slots per entry).

# %%
ds = backends["deepseek-v4 (tiny, random)"]
tokens = deepseek_niah(tokenizer, 128).sample(1, modulus=8, seed=0).tokens[:2]
gates = ds.gate_weights(tokens, Unit("gate", 1, 0))
print("L1.G0 weights", tuple(gates.shape), "sum over offsets:", gates.sum(2).mean().item())

# %% [markdown]
# The gate interventions of tutorial 04 (`gate_override`, `cycled_gates` / `gate_cycling`,
# `gate_attribution`) take this backend as they take our model, on CSA layers (`W = 2m` overlapping
# slots; entry 0's previous-block slots lie before position 0 and stay masked) and HCA layers
# (`W = m`). `ds.compression(layer)` describes a layer's gates; its gate logits live only inside the
# HF forward, so the backend rebuilds them from `gate_proj` and `position_bias` (bit for bit), and
# cycling rebuilds them with every offset using the map and bias of offset `i - delta`.

# %%
print({l: (ds.compression(l).cc.window, ds.compression(l).cc.stride, ds.compression(l).logits) for l in (1, 2)})
niah = deepseek_niah(tokenizer, 128).sample(1, modulus=8, seed=0)
base = ds.final_logits(niah.tokens, niah.query_pos)
with gate_override(ds, "uniform", layers=[1]):
    uniform = ds.final_logits(niah.tokens, niah.query_pos)
with cycled_gates(ds, 1, layers=[1, 3]):  # the CSA layers (one stride per cycle)
    cycled = ds.final_logits(niah.tokens, niah.query_pos)
print("max |logit change|: uniform L1 gates", round(float((uniform - base).abs().max()), 3),
      "| CSA gates cycled by 1:", round(float((cycled - base).abs().max()), 3))
assert torch.equal(ds.final_logits(niah.tokens, niah.query_pos), base)  # nothing left behind
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    print(gate_attribution(ds, niah, override="uniform", layers=[1, 2]))  # attribution vs the exact overrides

# %% [markdown]
# Edits apply inside a `with backend.intervene(...)` block and are gone afterwards (the tests check
# bit-identical logits, unchanged `state_dict` and no leftover hooks). Uniform gates in layer 1 of
# our checkpoint, through the backend, do what `gate_override` did in tutorial 04:

# %%
ours = backends["w4s4 (ours, trained)"]
ours_batch = models["w4s4 (ours, trained)"][2].sample(16, modulus=8, seed=0)
with ours.intervene(SetGate(Unit("gate", 1, 0), "uniform"), SetGate(Unit("gate", 1, 1), "uniform")):
    edited = phase_sweep(ours, ours_batch, progress=False, n_boot=200, n_perm=200)
with ours.intervene(Replace(Unit("kv_head", 1, 0), value=0.0)):
    zeroed = phase_sweep(ours, ours_batch, progress=False, n_boot=200, n_perm=200)
after = phase_sweep(ours, ours_batch, progress=False, n_boot=200, n_perm=200)
print("uniform layer-1 gates (%):", np.round(100 * edited.accuracy).astype(int).tolist())
print("L1.KV0 zeroed at the end (%):", np.round(100 * zeroed.accuracy).astype(int).tolist())
print("after the blocks (%):       ", np.round(100 * after.accuracy).astype(int).tolist())
assert np.array_equal(after.accuracy, results["w4s4 (ours, trained)"][0].accuracy)

# %% [markdown]
# ## nnsight in its own idiom
#
# The backends are a convenience over nnsight, not a wall around it. Plain `nnsight.NNsight(model)`
# traces our model by module path: read any hook point's `.output` and `.save()` it, assign to it to
# edit, in the order the forward runs (the pattern before `hook_z`). Inside a trace our attention
# materializes its pattern (nnsight sets no TransformerLens hooks), so `hook_pattern` is there to read.

# %%
import nnsight

plain = phaseinterp.load("w4s4")  # a fresh copy, not behind a backend
nn_ours = nnsight.NNsight(plain)
toks = ours_batch.tokens[:4]
with nn_ours.trace(toks):
    pattern = nn_ours.blocks[1].attn.hook_pattern.output.save()  # [batch, head, query, entries + local]
    z = nn_ours.blocks[1].attn.hook_z.output.save()
    logits = nn_ours.output.save()
print("pattern", tuple(pattern.shape), "z", tuple(z.shape), "logits", tuple(logits.shape))
with nn_ours.trace(toks):
    nn_ours.blocks[1].attn.hook_z.output[:, -1] = 0  # every head of layer 1 (its one KV head) at the end
    knocked = nn_ours.output.save()
with ours.intervene(Replace(Unit("kv_head", 1, 0), value=0.0)):  # the same edit through the wrapper
    wrapped = ours(toks)
print("plain nnsight edit == backend edit:", torch.allclose(knocked, wrapped, atol=1e-4))
assert torch.allclose(knocked, wrapped, atol=1e-4) and not torch.allclose(knocked, logits, atol=1e-4)

# %% [markdown]
# HuggingFace models trace the same way: `nnsight.TransformersModel` (the successor of
# `LanguageModel`) takes the HF model and its tokenizer and traces text. On DeepSeek-V4 the
# compressor of a CSA layer is `model.layers[l].self_attn.compressor`; its `gate_proj` gives the gate
# logits per token, before the softmax over each window.

# %%
lm = nnsight.TransformersModel(tiny_deepseek_v4(), tokenizer=tokenizer)
with lm.trace("caf cag cak cal"):
    gate_logits = lm.model.layers[1].self_attn.compressor.gate_proj.output.save()
    attn_out = lm.model.layers[1].self_attn.output[0].save()
    hf_logits = lm.output.logits.save()
print("gate logits", tuple(gate_logits.shape), "attention output", tuple(attn_out.shape),
      "logits", tuple(hf_logits.shape))

# %% [markdown]
# ## Completion flip
#
# The paper's behavioural probe: keep a prompt fixed, put `L` filler tokens in front of it, and see
# whether the preferred next token flips with `L mod S`. Shifting by `L` moves every prompt token's
# phase without changing content.
#
# On our checkpoint we build a conflict: two records with the same key 5 (values 130 and 131) two
# tokens apart, far before the query. A record is retrievable only when its key sits at phase 1 or
# 2, so exactly one of the two survives compression, and which one depends on `L`.

# %%
filler = FillerSpec(symbol=240, words=tuple(range(225, 256)), comment_prefix=(226,), newline=227)
records = [10, 150, 20, 160, 30, 170, 5, 130, 5, 131, 40, 180, 50, 190, 60, 200]
prompt = records + [233, 247, 229, 251, 238, 226] + [10, 150, 40, 180, 60, 200] + [5]  # filler, demos, query
flip = completion_flip(ours, prompt, [130, 131], range(24), filler=filler, family="words", period=4, head=[0],
                       n_perm=500)
print(flip.describe())
assert flip.summary()["p_value"] < 0.01
flip_figure(flip)

# %% [markdown]
# With `L` filler tokens after BOS, the first key 5 sits at position `L + 7`: its phase is 1 or 2
# exactly when `L mod 4` is 2 or 3, and then value 130 wins; otherwise the second record (two
# positions later) is the one at a strong phase and 131 wins. The same shape as the paper's
# DeepSeek-V4-Flash-Base observation ("the right token iff L mod 4 in {2, 3}").
#
# The same call with text, on the tiny random DeepSeek-V4 (random weights: no rule is expected, and
# the permutation test says so):

# %%
spec = FillerSpec.from_tokenizer(tokenizer, symbol="bab", comment_prefix="bac", newline="bad", n_words=16)
ds_flip = completion_flip_text(ds, tokenizer, "caf cag cak cal", [" cam", " can"], range(16), period=4,
                               family="words", filler=spec, n_perm=200)
print(ds_flip.describe())

# %% [markdown]
# ## Real checkpoints (documented, not run here)
#
# Nothing in this repository has loaded real DeepSeek-V4 or Qwen3 weights (no GPU, no network where
# it was built). The calls are the ones above; `load_pretrained` is
# `AutoModelForCausalLM.from_pretrained(path, dtype=..., device_map=...)` followed by `backend_for`:
#
# ```python
# import beartype  # before nnsight
# import torch
# from transformers import AutoTokenizer
# from phaseinterp.backends import load_pretrained
# from phaseinterp.tasks.niah import deepseek_niah
# from phaseinterp.measure import phase_sweep          # on a backend: logits at the query positions only
#
# path = "deepseek-ai/DeepSeek-V4-Flash-Base"          # or a local folder
# backend = load_pretrained(path, dtype=torch.bfloat16, device_map="auto")   # layers over all GPUs
# backend.prefill_chunk = 2048                         # read long prompts through the KV cache
# tokenizer = AutoTokenizer.from_pretrained(path)
# batch = deepseek_niah(tokenizer, 8192).sample(16, modulus=8, seed=0)
# curve = phase_sweep(backend, batch, period=4)
#
# qwen = load_pretrained("Qwen/Qwen3-8B", stride=4, device_map="auto")   # any causal LM: pick the period
# ```
#
# `docs/deepseek_v4.md` covers memory (about 530 GiB of bf16 weights for V4-Flash), batch sizing and
# chunked prefill on a multi-GPU node.
