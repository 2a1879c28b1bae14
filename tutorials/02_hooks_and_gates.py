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
# # 02 Hooks, caches and compression gates
#
# Tutorial 01 showed that the W4/S4 checkpoint retrieves a record only when its key sits at phases 1
# or 2 of the 4-token window. To see why, we look inside: every activation of
# `HookedCompressedTransformer` passes through a TransformerLens `HookPoint`, including the
# compressor's **gates**, the softmax weights with which each window's `W` tokens are mixed into one
# cache entry. If a gate gives a token almost no weight, that token is effectively not in the cache.
#
# Hook names and shapes are public API, listed in `docs/hooks.md` (a test keeps that table in sync
# with the model).

# %%
import torch

torch.set_num_threads(1)

import phaseinterp
from phaseinterp.analysis import gate_profiles, gate_statistics, pattern_by_token
from phaseinterp.model import key_positions
from phaseinterp.tasks import RecordLookup

model = phaseinterp.load("w4s4")  # a shipped model by name
task = RecordLookup(vocab_size=256, n_records=10, n_demos=6, seq_len=64)  # the card's eval task
batch = task.sample(16, modulus=8, seed=0)

# %% [markdown]
# ## `run_with_cache`
#
# As in TransformerLens, `run_with_cache` returns the logits and an `ActivationCache` keyed by hook
# name. A `names_filter` keeps only what you need (and saves memory).

# %%
logits, cache = model.run_with_cache(batch.tokens)
print(type(cache).__name__, "with", len(cache), "activations; logits", tuple(logits.shape))
for name in cache.keys():
    if name.startswith("blocks.1.attn"):
        print(f"  {name:45s} {tuple(cache[name].shape)}")

# %% [markdown]
# Compressed layers add the compressor hooks: per branch (`compress_k` for keys, `compress_v` for
# values; one `compress_kv` when K and V are tied) the gate logits, the gate weights
# `[batch, entry, offset, kv_head]` and the entries `[batch, entry, kv_head, d_head]` that attention
# reads. Hook-name typos raise a `KeyError` that suggests the closest names:

# %%
try:
    model.run_with_cache(batch.tokens[:1], names_filter=["blocks.1.attn.compress_k.hook_gates"])
except KeyError as err:
    print("KeyError:", err)

# %% [markdown]
# ## Attention by source token
#
# `hook_pattern`'s key axis holds compressed entries then local slots, so it does not say how much a
# query read from token `s`. `pattern_by_token` spreads each entry's weight over its window's tokens
# by the value gates that built it and adds the local slots at their positions: a
# `[batch, head, query_pos, key_pos]` pattern like full attention's (rows sum to 1).

# %%
import plotly.graph_objects as go

by_token = pattern_by_token(model, batch.tokens[:4], layer=1)[:, 0]  # head 0, rows at residues 0..3
print("rows sum to", round(float(by_token.sum(-1).min()), 4), "..", round(float(by_token.sum(-1).max()), 4))
shares = []
for row in range(4):
    k, q = int(batch.key_pos[row]), int(batch.query_pos[row])
    shares.append(float(by_token[row, q, k:k + 4].sum()))
    print(f"residue {int(batch.residue[row])}: the query reads {100 * shares[-1]:.0f}% from the needle's record")
assert min(shares[1], shares[2]) > 0.5 > max(shares[0], shares[3])

# %% [markdown]
# At residues 1 and 2 the query reads most of its attention from the needle's record; at 0 and 3
# (the weak phases of W4/S4) it reads almost nothing from it: the phase effect, token by token.
#
# `attention_figure` draws it with every token named by its role (`to_str_tokens`: `BOS`, `K5`,
# `V130`, `FILL`); hover a cell for the query, the key and the weight. (`attention_view` gives the
# circuitsvis view of the same data, with the extra `pip install 'phaseinterp[views]'`.)

# %%
from phaseinterp.plot import attention_figure
from phaseinterp.tasks import to_str_tokens

print(to_str_tokens(batch.tokens[1], task)[int(batch.key_pos[1]):int(batch.key_pos[1]) + 4], "<- the needle's record")
attention_figure(pattern_by_token(model, batch.tokens[:4], layer=1), batch.tokens[:4], task, row=1, heads=0, layer=1)

# %%
row = 1
go.Figure(go.Heatmap(z=by_token[row].numpy(), colorscale="Blues", zmin=0)).update_layout(
    title="layer 1, head 0: attention by source token", xaxis_title="key position", yaxis_title="query position",
    yaxis_autorange="reversed", width=520, height=480)

# %% [markdown]
# ## Reading the gates
#
# With `W = S = 4`, the target key at position `t` lands in entry `t // 4` at offset `t % 4`, and its
# value (one token later) at position `t + 1`. We read, for each prompt, the weight layer 1's key
# gate puts on the key and the weight its value gate puts on the value, and average them by phase.

# %%
S = model.cfg.compression(1).stride
rows = torch.arange(len(batch))
phase = batch.key_pos % S


def weight_on(gate_name: str, pos: torch.Tensor) -> list[float]:
    """Mean gate weight on the token at `pos` (one per row), by the target key's phase."""
    gate = cache[gate_name][..., 0]  # [batch, entry, offset] (one KV head)
    w = gate[rows, pos // S, pos % S]
    return [round(w[phase == p].mean().item(), 3) for p in range(S)]


for layer in range(model.cfg.n_layers):
    print(f"layer {layer}: key gate on the key   by phase 0..3:",
          weight_on(f"blocks.{layer}.attn.compress_k.hook_gate", batch.key_pos))
    print("         value gate on the value by phase 0..3:",
          weight_on(f"blocks.{layer}.attn.compress_v.hook_gate", batch.value_pos))

# %% [markdown]
# Layer 1's gates are nearly one-hot: a key at phase 1 or 2 receives ~98% of its entry, a key at
# phase 0 or 3 ~1%. At phase 3 the value even falls into the *next* window (the boundary phase).
# Layer 0's gates stay close to uniform (1/4).
#
# Attention agrees: at the query position, layer 1's heads put most of their weight on the entry
# that holds the target key only when that key is at a strong phase. The pattern's key axis spans
# the compressed entries first, then the exact local window; `key_positions` maps a key index to the
# absolute positions it covers.

# %%
pattern = cache["blocks.1.attn.hook_pattern"]  # [batch, head, query, key]
to_entry = pattern[rows, :, batch.query_pos, batch.key_pos // S].mean(1)
print("attention from the query to the key's entry, by phase:",
      [round(to_entry[phase == p].mean().item(), 2) for p in range(S)])
cc = model.cfg.compression(1)
print("key 5 covers positions", key_positions(cc, 64, 63, 5), "; key 16 is local position",
      key_positions(cc, 64, 63, 16))

# %% [markdown]
# ## Gate statistics and profiles
#
# `phaseinterp.analysis` summarises every gate (layer, branch, KV head) over all complete windows:
#
# - `static` = `exp(H(mean gate))`: how many offsets the *average* gate uses;
# - `per_window` = mean of `exp(H(gate))`: how many offsets one window's gate uses.
#
# Both run from 1 (one-hot) to `W` (uniform). `gate_profiles` gives `g(r)`, the gate mass at phase
# `r` relative to its uniform share (value gates rolled by -1, so that a head storing a key at `r`
# and its value at `r + 1` peaks at `r` in both branches).

# %%
stats = gate_statistics(model, batch.tokens)
stats

# %%
profiles = gate_profiles(model, batch.tokens)
profiles.pivot_table(index=["layer", "branch"], columns="phase", values="g").round(2)

# %% [markdown]
# Averaged over every window (most tokens are filler, not keys), layer 1's profile peaks at phase 1
# and is lowest at phase 0 in both branches. The sharp preference for keys at phases 1 and 2 seen
# above is content dependent: layer 1's per-window concentration (~2 offsets) is much lower than its
# static one (~3.7), so each window's gate picks a token, and which one depends on what the window
# holds.
#
# Figures: `phaseinterp.plot.gate_profile_figure(profiles)` and `gate_plane_figure(stats)`.

# %%
from phaseinterp.plot import gate_profile_figure

gate_profile_figure(profiles)

# %% [markdown]
# ## Editing with hooks
#
# `run_with_hooks` works as in TransformerLens. Here we replace layer 1's key-gate weights with the
# uniform `1/W` and watch retrieval fall at the strong phases (tutorial 04 does this properly with
# `gate_override`, gate attribution and gate cycling).

# %%
def uniform_gate(gate, hook):
    return torch.full_like(gate, 1.0 / gate.shape[2])


def accuracy_by_phase(logits: torch.Tensor) -> list[float]:
    pred = logits[rows, batch.query_pos].argmax(-1)
    correct = (pred == batch.answers[:, 0]).float()
    return [round(correct[phase == p].mean().item(), 2) for p in range(S)]


clean = accuracy_by_phase(logits)
edited = accuracy_by_phase(model.run_with_hooks(
    batch.tokens, fwd_hooks=[("blocks.1.attn.compress_k.hook_gate", uniform_gate)]))
print("accuracy by phase, clean:                 ", clean)
print("accuracy by phase, layer-1 key gate uniform:", edited)
assert min(clean[1], clean[2]) > 0.8 and max(edited) < max(clean[1], clean[2])
