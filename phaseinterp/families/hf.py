"""Any HuggingFace causal LM (an `nn.Module` with a `config`), tried after every other family:
run behind `HFCausalLMBackend` (head and layer units; `stride` names the period to test, since such
a model has no compressor). Backend only. Its Qwen3 flavour carries the converter to our model
(`convert.from_hf_qwen3`: same logits with compression off)."""

from __future__ import annotations

from typing import Any

import torch

from phaseinterp.convert.qwen3 import from_hf_qwen3
from phaseinterp.family import ModelFamily, register_family


def _backend(model: Any, stride: int | None):
    from phaseinterp.backends.hf import HFCausalLMBackend

    return HFCausalLMBackend(model, stride=stride)


FAMILY = register_family(ModelFamily(
    name="hf", recognizes=lambda m: isinstance(m, torch.nn.Module) and hasattr(m, "config"), backend=_backend,
    runnable=lambda m: _backend(m, None), fallback=True))
QWEN3 = register_family(ModelFamily(name="qwen3", hf_model_type="qwen3", converter=from_hf_qwen3))

__all__ = ["FAMILY", "QWEN3"]
