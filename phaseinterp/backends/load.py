"""Pick the backend for a model, and the documented path to real checkpoints (`from_pretrained`)."""

from __future__ import annotations

from typing import Any

import torch

from phaseinterp.backends.base import Backend
from phaseinterp.families import backend_of


def backend_for(model: Any, stride: int | None = None) -> Backend:
    """The backend that fits `model`, chosen by its family (`phaseinterp.families`: our
    `HookedCompressedTransformer`, an `NSATransformer`, a trainer-written `HFCausalLM`, HF
    DeepSeek-V4, a training-free compressed HF model, or any HF causal LM; `stride`: the period to
    test, only for models without compressors). A backend is returned as is.

    Example:
        >>> from phaseinterp import HookedCompressedTransformer, preset
        >>> backend_for(HookedCompressedTransformer(preset("tiny-w4s4"), seed=0)).cfg.strides
        (4,)
    """
    if isinstance(model, Backend):
        return model
    return backend_of(model, stride)


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
