"""Models held by another toolkit: a TransformerLens `TransformerBridge` and an nnsight
`LanguageModel` over a HuggingFace causal LM run behind the backend of that HF model (its own
family's: `DeepseekV4Backend`, `HFCausalLMBackend`, ...; see `families.bridges.backend`). Backend only.

This family comes first in `families.MODULES` on purpose: families are tried in registration
order, and both wrappers answer `.config` with their HF model's config, which the
DeepSeek-V4 family (and the HF fallback) would otherwise claim."""

from __future__ import annotations

from typing import Any

from phaseinterp.family import ModelFamily, register_family


def _has_class(obj: Any, name: str, module_prefix: str) -> bool:
    """Whether `obj` is an instance of a class `name` from `module_prefix` (no import of that package)."""
    return any(c.__name__ == name and c.__module__.startswith(module_prefix) for c in type(obj).__mro__)


def is_bridge(obj: Any) -> bool:
    """A TransformerLens `TransformerBridge` (checked without importing transformer_lens)."""
    return _has_class(obj, "TransformerBridge", "transformer_lens.")


def is_language_model(obj: Any) -> bool:
    """An nnsight model wrapper: `LanguageModel`, `TransformersModel` (its successor in nnsight 0.8),
    `NNsight`, any nnsight `Envoy` (checked without importing nnsight)."""
    return _has_class(obj, "Envoy", "nnsight.")


BRIDGE = register_family(ModelFamily(name="transformer-lens-bridge", backend="phaseinterp.families.bridges.backend.BridgeBackend",
                                     recognizes=is_bridge))
LANGUAGE_MODEL = register_family(ModelFamily(name="nnsight", backend="phaseinterp.families.bridges.backend.LanguageModelBackend",
                                             recognizes=is_language_model))

__all__ = ["BRIDGE", "LANGUAGE_MODEL", "is_bridge", "is_language_model"]
