"""The documented path to real checkpoints (`load_pretrained`); `backend_for` (re-exported) lives in
`phaseinterp.families.resolve`, which decides what every model runs on."""

from __future__ import annotations

from typing import Any

import torch

from phaseinterp.backends.base import Backend
from phaseinterp.families.resolve import backend_for  # the one decider; re-exported here


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
