"""Pick the backend for a model, and the documented path to real checkpoints (`from_pretrained`)."""

from __future__ import annotations

from typing import Any

import torch

from phaseinterp.backends.base import Backend
from phaseinterp.backends.compressed_hf import CompressedHFBackend
from phaseinterp.backends.deepseek_v4 import DeepseekV4Backend
from phaseinterp.backends.hf import HFCausalLMBackend
from phaseinterp.backends.hooked import HookedBackend
from phaseinterp.backends.kv_compression import CompressedLlamaAttention
from phaseinterp.model import HookedCompressedTransformer


def backend_for(model: Any, stride: int | None = None) -> Backend:
    """The backend that fits `model`: our `HookedCompressedTransformer`, an `NSATransformer`, HF DeepSeek-V4, or any HF
    causal LM (`stride`: the period to test; only for models without compressors). A backend is
    returned as is.

    Example:
        >>> from phaseinterp import HookedCompressedTransformer, preset
        >>> backend_for(HookedCompressedTransformer(preset("tiny-w4s4"), seed=0)).cfg.strides
        (4,)
    """
    if isinstance(model, Backend):
        return model
    if getattr(model, "is_nsa", False):
        if stride is not None:
            raise ValueError(f"stride={stride} is invalid for an NSA model: allowed None (its stride comes from its config)")
        from phaseinterp.backends.nsa import NSABackend

        return NSABackend(model)
    if isinstance(model, HookedCompressedTransformer):
        if stride is not None:
            raise ValueError(f"stride={stride} is invalid for our model: allowed None (its strides come from its config)")
        return HookedBackend(model)
    if getattr(getattr(model, "config", None), "model_type", None) == "deepseek_v4":
        if stride is not None:
            raise ValueError(f"stride={stride} is invalid for DeepSeek-V4: allowed None (strides come from compress_rates)")
        return DeepseekV4Backend(model)
    if isinstance(model, torch.nn.Module) and hasattr(model, "config"):
        if any(isinstance(m, CompressedLlamaAttention) for m in model.modules()):  # training-free compression
            return CompressedHFBackend(model, stride=stride)
        return HFCausalLMBackend(model, stride=stride)
    raise ValueError(f"model of type {type(model).__name__} is invalid: allowed HookedCompressedTransformer, "
                     "a HF causal LM, or a Backend")


def load_pretrained(name_or_path: str, *, dtype: torch.dtype | str = torch.bfloat16, device_map: Any = "auto",
                    stride: int | None = None, **kwargs: Any) -> Backend:
    """Load a HF checkpoint (local folder or hub name, when reachable) and wrap it in its backend.

    Args:
        name_or_path: e.g. "deepseek-ai/DeepSeek-V4-Flash-Base" or a local folder.
        dtype: weights dtype (bf16 by default; DeepSeek-V4 keeps its norms and gates in fp32).
        device_map: "auto" spreads layers over the visible GPUs (needs `accelerate`); "cpu" for CPU.
        stride: see `backend_for`.
        **kwargs: passed to `AutoModelForCausalLM.from_pretrained` (e.g. `max_memory`).

    Example:
        >>> backend = load_pretrained("deepseek-ai/DeepSeek-V4-Flash-Base", device_map="auto")  # doctest: +SKIP
    """
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(name_or_path, dtype=dtype, device_map=device_map, **kwargs)
    return backend_for(model.eval(), stride=stride)
