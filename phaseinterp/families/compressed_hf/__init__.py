"""HF Llama-family models with training-free KV compression (`backends.kv_compression.compress_attention`
swapped some attention layers for `CompressedLlamaAttention`): run behind `CompressedHFBackend`, with
gate and entry units on the compressed layers. Backend only: no checkpoint format, not trainable."""

from __future__ import annotations

from typing import Any

import torch

from phaseinterp.family import ModelFamily, register_family


def _recognizes(model: Any) -> bool:
    if not (isinstance(model, torch.nn.Module) and hasattr(model, "config")):
        return False
    from phaseinterp.backends.kv_compression import CompressedLlamaAttention

    return any(isinstance(m, CompressedLlamaAttention) for m in model.modules())


FAMILY = register_family(ModelFamily(name="compressed-hf", backend="phaseinterp.families.compressed_hf.backend.CompressedHFBackend",
                                     recognizes=_recognizes))

__all__ = ["FAMILY"]
