"""Any HuggingFace causal LM (an `nn.Module` with a `config`), tried after every other family:
run behind `HFCausalLMBackend` (head and layer units; `stride` names the period to test, since such
a model has no compressor). Backend only. Qwen3 models run here; their converter to our model is
`convert.from_hf_qwen3` (same logits with compression off)."""

from __future__ import annotations

from typing import Any

import torch

from phaseinterp.family import ModelFamily, register_family


def _recognizes(model: Any) -> bool:
    return isinstance(model, torch.nn.Module) and hasattr(model, "config")


FAMILY = register_family(ModelFamily(name="hf", backend="phaseinterp.families.hf.backend.HFCausalLMBackend",
                                     recognizes=_recognizes, fallback=True))

__all__ = ["FAMILY"]
