"""A model with hand-set weights whose KV heads own known phases: ground truth for interventions.

One compressed layer (W = S, scalar gates, no RoPE, separate K/V branches), one-hot embeddings
(d_model = vocab_size) and identity maps everywhere:

- KV head h's key gate is one-hot on offset `key_offsets[h]` (bias `gate_logit`, no gate maps) and
  its value gate on the next offset, so entry j of KV head h holds (key, value) = (token at
  jS + o_h, token at jS + o_h + 1): a record whose key sits at phase o_h is stored whole.
- The query heads of KV head h read the query token through `W_Q = I`, so the final key matches
  the entry holding the target key (score `match_score`, 0 elsewhere); local keys and values are
  zero, the MLP is off, and `W_O = I / group` writes the retrieved value into the residual.

On record lookup (one-token keys and values) the model is right exactly when the target key's
phase is one of the `key_offsets` (each must be <= W - 2, so the value lands in the same window),
and knocking out KV head h removes exactly phase `key_offsets[h]`.
"""

from __future__ import annotations

from typing import Sequence

import torch

from phaseinterp.config import CompressionConfig, ModelConfig
from phaseinterp.model import HookedCompressedTransformer


def planted_model(vocab_size: int = 64, stride: int = 4, key_offsets: Sequence[int] = (0, 2), *,
                  heads_per_kv: int = 2, match_score: float | int = 8.0, gate_logit: float | int = 30.0,
                  local_window: int = 4) -> HookedCompressedTransformer:
    """The hand-set phase-owning model described in the module docstring.

    Args:
        vocab_size: vocabulary = d_model = d_head (one-hot embeddings), >= 8.
        stride: W = S of the compressed layer, >= 2.
        key_offsets: per KV head, the offset (phase) whose records it stores; each in [0, S - 2].
        heads_per_kv: query heads per KV head, >= 1.
        match_score: attention score of the matching entry (others score 0), > 0.
        gate_logit: gate bias on the chosen offset (others 0); large = one-hot.
        local_window: exact local window length L (its keys and values are zero).

    Returns:
        An eval-mode HookedCompressedTransformer.

    Example:
        >>> model = planted_model(64, stride=4, key_offsets=(0, 2))
        >>> model.cfg.n_kv_heads, model.cfg.layers[0].window
        (2, 4)
    """
    offsets = [int(o) for o in key_offsets]
    if vocab_size < 8:
        raise ValueError(f"vocab_size={vocab_size} out of range: must be >= 8")
    if stride < 2:
        raise ValueError(f"stride={stride} out of range: must be >= 2")
    if not offsets or any(not 0 <= o <= stride - 2 for o in offsets):
        raise ValueError(f"key_offsets={offsets} out of range: each in [0, {stride - 2}] (value at offset + 1 < W)")
    if heads_per_kv < 1 or match_score <= 0:
        raise ValueError(f"heads_per_kv={heads_per_kv} (>= 1) or match_score={match_score} (> 0) out of range")
    K, V = len(offsets), vocab_size
    cc = CompressionConfig(window=stride, stride=stride, rope="none", local_window=local_window,
                           payload="shared", gate_maps="shared")
    cfg = ModelConfig(vocab_size=V, d_model=V, n_layers=1, n_heads=K * heads_per_kv, n_kv_heads=K, d_head=V,
                      d_mlp=8, n_ctx=1024, layers=(cc,))
    model = HookedCompressedTransformer(cfg, seed=0)
    eye = torch.eye(V)
    attn = model.blocks[0].attn
    with torch.no_grad():
        model.W_E.copy_(eye)
        model.W_U.copy_(eye)
        attn.W_Q.copy_(eye.expand(cfg.n_heads, V, V))
        attn.W_K.zero_()
        attn.W_V.zero_()
        attn.W_O.copy_(eye.expand(cfg.n_heads, V, V) / heads_per_kv)
        # RMSNorm of a one-hot vector in V dims is sqrt(V) e_k: score = scale * V * w_q = match_score
        attn.q_norm.weight.fill_(match_score / V ** 0.5)
        model.blocks[0].mlp.W_out.zero_()
        for name, shift in (("compress_k", 0), ("compress_v", 1)):
            comp = getattr(attn, name)
            comp.W_C.copy_(eye.expand(1, V, V).repeat(1, 1, K))
            comp.W_Z.zero_()
            comp.b_Z.zero_()
            for h, o in enumerate(offsets):
                comp.b_Z[o + shift, h] = gate_logit
    return model.eval()
