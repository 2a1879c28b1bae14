"""Training-free chunked KV compression of Gemma 3 (`Gemma3ForCausalLM`, the text model of
`Gemma3ForConditionalGeneration`): the rules, geometry and hook points of
`backends.kv_compression` (see its docstring), with what Gemma 3's attention does differently:

- QK-norm: each head's query and key go through the layer's own `q_norm` / `k_norm` (RMSNorm)
  before RoPE (`CompressedLlamaAttention.heads`); `hook_k` holds the normed keys.
- scaling `query_pre_attn_scalar ** -0.5` (the wrapped layer's `scaling`), not 1/sqrt(d_head).
- RoPE per layer type: sliding layers rotate with the local base (10k), global ones with the
  global base (1M); the decoder passes each layer its own cos/sin, and the anchor rotation of
  pooled keys asks the rotary embedding for the layer's type (`_cos_sin`).
- sliding-window layers (`config.layer_types[i] == "sliding_attention"`): query t sees keys
  t - sliding_window + 1 .. t only. A compressed sliding layer keeps that rule for everything it
  reads: an entry is visible iff its whole window lies inside (start >= t - sliding_window + 1, and
  complete: end <= t); sink and local slots outside the window are masked. So W = S = 1,
  `local=0` is the original layer at every layer type (tested to float precision).

`attn_logit_softcapping` is a config field that HF's Gemma 3 attention does not apply (Gemma 2's
did), so neither do we. `compress_gemma3(model, spec, layers="global")` compresses the global
layers only (the practitioner's question: the local layers' caches are already bounded), or "all".
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn
from jaxtyping import Bool, Int
from torch import Tensor

from phaseinterp.backends.kv_compression import WRAPPERS, CompressedLlamaAttention, KVCompression, compress_attention

#: `layers=` choices of `compress_gemma3`
LAYER_CHOICES = ("global", "all")


class CompressedGemma3Attention(CompressedLlamaAttention):
    """`CompressedLlamaAttention` for a `Gemma3Attention` (module docstring): QK-norm and scaling
    from the wrapped layer, RoPE of the layer's type, the sliding window on sliding layers."""

    def __init__(self, original: nn.Module, spec: KVCompression, rotary: nn.Module) -> None:
        super().__init__(original, spec, rotary)
        self.layer_type = getattr(original, "layer_type", None) or "full_attention"
        #: None on a global layer; else the window (keys t - sliding_window + 1 .. t)
        self.sliding_window = getattr(original, "sliding_window", None)

    def _cos_sin(self, x: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        return self.rotary(x, positions[None].to(x.device), self.layer_type)

    def visible(self, t: Int[Tensor, " pos"], ends: Int[Tensor, " entry"]) -> Bool[Tensor, "pos key"]:
        seen = super().visible(t, ends)
        if self.sliding_window is None:
            return seen
        spec, dev = self.spec, t.device
        first = t[:, None] - self.sliding_window + 1  # the first position query t may read
        inside = torch.cat([ends[None] - spec.window + 1 >= first,  # the entry's whole window
                            torch.arange(spec.sink, device=dev)[None] >= first,
                            t[:, None] - spec.local + 1 + torch.arange(spec.local, device=dev) >= first], 1)
        return seen & inside


WRAPPERS["Gemma3Attention"] = CompressedGemma3Attention


def global_layers(model: Any) -> tuple[int, ...]:
    """Indices of the full-attention (global) layers of a Gemma 3 model."""
    return tuple(i for i, t in enumerate(_text_config(model).layer_types) if t == "full_attention")


def _text_config(model: Any) -> Any:
    cfg = getattr(model, "config", None)
    cfg = getattr(cfg, "text_config", None) or cfg
    if getattr(cfg, "model_type", None) not in ("gemma3_text", "gemma3") or not getattr(cfg, "layer_types", None):
        raise ValueError(f"model of type {type(model).__name__} is invalid: allowed a Gemma 3 causal LM "
                         "(Gemma3ForCausalLM, config.model_type 'gemma3_text')")
    return cfg


def compress_gemma3(model: nn.Module, spec: KVCompression, layers: str = "global") -> nn.Module:
    """Compress a Gemma 3 model in place with `spec` (earlier compression undone first); returns it.

    Args:
        layers: "global" (default: the full-attention layers only) or "all"; ignored when
            `spec.layers` names the layers itself.

    Raises:
        ValueError: `layers` outside {"global", "all"}, or a model that is not Gemma 3.

    Example:
        >>> from phaseinterp.families.gemma3 import tiny_gemma3
        >>> model = compress_gemma3(tiny_gemma3(), KVCompression(4, 4, local=2))
        >>> from phaseinterp.backends.kv_compression import compressed_layers
        >>> sorted(compressed_layers(model)), global_layers(model)
        ([2, 5], (2, 5))
    """
    if layers not in LAYER_CHOICES:
        raise ValueError(f"layers={layers!r} is invalid: allowed {list(LAYER_CHOICES)} (or name them in spec.layers)")
    n = len(_text_config(model).layer_types)
    if spec.layers is None:
        chosen = global_layers(model) if layers == "global" else tuple(range(n))
        spec = KVCompression(**{**spec.to_dict(), "layers": chosen})
    return compress_attention(model, spec)
