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


def _backend(model: Any, stride: int | None):
    from phaseinterp.backends.compressed_hf import CompressedHFBackend

    return CompressedHFBackend(model, stride=stride)


FAMILY = register_family(ModelFamily(name="compressed-hf", recognizes=_recognizes, backend=_backend,
                                     runnable=lambda m: _backend(m, None)))

__all__ = ["FAMILY"]
