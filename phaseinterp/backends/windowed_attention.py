"""Sliding-window layers that read only their window: fused attention (`sdpa`) over one block of queries at a
time, each block against the keys its window can reach.

HF's `sdpa` and `eager` attention compute every query against every key and mask the ones outside a
sliding layer's window, so a 4,096-token prompt through Gemma 3 (window 512 on 15 of its 18 layers)
pays full T x T attention in every layer. `use_windowed_attention(model)` registers the attention
function `WINDOWED` and sets the model to it: a sliding layer's queries run in blocks of
`sliding_window` tokens, each block against keys from `sliding_window` before its first query to its
last, with the matching slice of HF's own mask. Global layers, decoding steps, short prompts and
masks that reach outside the band (never HF's sliding masks) run HF's `sdpa` unchanged. The result
equals `sdpa` to float precision (tested on tiny Gemma 3 and Mistral configs, padded rows included);
the attention weights are not returned, as with `sdpa` (use `eager` to read them).
`benchmarks/windowed_attention.py` measures it on Gemma 3 270M.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

#: the attention implementation's name (`config._attn_implementation`)
WINDOWED = "phaseinterp_windowed_sdpa"
#: `set_attention` choices
ATTENTIONS = ("eager", "sdpa", "windowed")


def windowed_sdpa(module: Any, query: Tensor, key: Tensor, value: Tensor, attention_mask: Tensor | None,
                  dropout: float = 0.0, scaling: float | None = None, sliding_window: int | None = None,
                  **kwargs: Any) -> tuple[Tensor, None]:
    """HF attention function (`AttentionInterface`): `sdpa` by blocks of queries on sliding-window layers
    (module docstring), `sdpa` itself elsewhere. query [b, H, q, d], key and value [b, K, k, d]; returns
    ([b, q, H, d], None) as `sdpa_attention_forward` does."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    def sdpa(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
        return sdpa_attention_forward(module, q, k, v, mask, dropout=dropout, scaling=scaling,
                                      sliding_window=sliding_window, **kwargs)[0]

    n_q, n_k = query.shape[2], key.shape[2]
    w = sliding_window
    if (w is None or n_q != n_k or n_q <= 2 * w or attention_mask is None or attention_mask.dtype != torch.bool
            or attention_mask.shape[-2:] != (n_q, n_k)):
        return sdpa(query, key, value, attention_mask), None
    # block [s, s + w) of queries reads keys [s - w, s + w); a mask that lets it read others runs sdpa whole
    spans = [(s, min(s + w, n_q), max(0, s - w)) for s in range(0, n_q, w)]
    if any(attention_mask[..., s:e, :lo].any() or attention_mask[..., s:e, e:].any() for s, e, lo in spans):
        return sdpa(query, key, value, attention_mask), None
    blocks = [sdpa(query[:, :, s:e], key[:, :, lo:e], value[:, :, lo:e], attention_mask[..., s:e, lo:e])
              for s, e, lo in spans]
    return torch.cat(blocks, 1), None


def use_windowed_attention(model: Any) -> Any:
    """Set HF `model` (in place) to `WINDOWED` attention and return it; `model.config._attn_implementation`
    names it, and setting it back to "sdpa" or "eager" undoes it.

    Example:
        >>> from phaseinterp.families.gemma3 import tiny_gemma3
        >>> model = use_windowed_attention(tiny_gemma3(seed=0))
        >>> model.config._attn_implementation
        'phaseinterp_windowed_sdpa'
    """
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    AttentionInterface.register(WINDOWED, windowed_sdpa)
    ALL_MASK_ATTENTION_FUNCTIONS.register(WINDOWED, sdpa_mask)  # HF's boolean masks, as for sdpa
    model.config._attn_implementation = WINDOWED
    return model


def set_attention(model: Any, attention: str) -> Any:
    """Set HF `model` (in place) to HF's "eager" or "sdpa" attention or to "windowed" (`use_windowed_attention`);
    returns it.

    Raises:
        ValueError: another `attention`, naming the choices.
    """
    if attention not in ATTENTIONS:
        raise ValueError(f"attention={attention!r} is invalid: allowed one of {list(ATTENTIONS)}")
    if attention == "windowed":
        return use_windowed_attention(model)
    model.config._attn_implementation = attention
    return model


__all__ = ["ATTENTIONS", "WINDOWED", "set_attention", "use_windowed_attention", "windowed_sdpa"]
