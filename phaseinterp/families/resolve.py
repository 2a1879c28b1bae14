"""What a model runs on, decided here and nowhere else.

- `resolve_model`: a backend for a backend (as is) or a model of a registered family (its family's
  Backend, `ModelFamily.backend_class().wrap`); what every intervention and the phase sweep talk to.
- `backend_for`: the same with a `stride` (the period to test, for models without compressors).
- `runner`: what a phase sweep runs: that backend, or any other tokens -> logits callable behind
  `PlainModel`, which answers the sweep's questions (its logits at the query positions, its module,
  its period) the way a backend does. Nothing outside `phaseinterp.families` asks what kind of
  model it holds: it asks the object these return.

Example:
    >>> from phaseinterp import HookedCompressedTransformer, preset
    >>> m = HookedCompressedTransformer(preset("tiny-w4s4"), seed=0)
    >>> backend = resolve_model(m)
    >>> type(backend).__name__, backend.model is m, resolve_model(backend) is backend
    ('HookedBackend', True, True)
"""

from __future__ import annotations

import sys
from typing import Any

import torch
from torch import Tensor

from phaseinterp.config import period_of
from phaseinterp.families import FAMILIES, backend_of, find_family

_BASE = "phaseinterp.backends.base"  # a Backend exists only once its module is imported


def is_backend(obj: Any) -> bool:
    """Whether `obj` is a `Backend` (without importing the backends, and nnsight, when none exists)."""
    base = sys.modules.get(_BASE)
    return base is not None and isinstance(obj, base.Backend)


def resolve_model(model: Any, *, require: bool = False) -> Any:
    """The backend an experiment runs on.

    - a backend: returned as is;
    - a model of a registered family (ours, NSA, a HuggingFace causal LM, ...): its family's
      backend, built once per call of an entry point;
    - anything else: returned as is (`phase_sweep` scores any tokens -> logits callable), or, with
      `require=True` (interventions), a ValueError naming the type and what is allowed.
    """
    if is_backend(model):
        return model
    if find_family(model) is None:
        if require:
            raise ValueError(f"model of type {type(model).__name__} is invalid: allowed a phaseinterp.backends Backend "
                             f"or a model of a registered family {[f.name for f in FAMILIES]} (our model, NSA, a "
                             "HuggingFace causal LM, ...)")
        return model
    return backend_of(model)


def backend_for(model: Any, stride: int | None = None) -> Any:
    """The backend that fits `model`, chosen by its family (`phaseinterp.families`: our
    `HookedCompressedTransformer`, an `NSATransformer`, a trainer-written `HFCausalLM`, HF
    DeepSeek-V4, a training-free compressed HF model, or any HF causal LM; `stride`: the period to
    test, only for models without compressors). A backend is returned as is.

    Example:
        >>> from phaseinterp import HookedCompressedTransformer, preset
        >>> backend_for(HookedCompressedTransformer(preset("tiny-w4s4"), seed=0)).cfg.strides
        (4,)
    """
    return model if is_backend(model) else backend_of(model, stride)


def forward_logits(model: Any, tokens: Tensor) -> Tensor:
    """Run `model` on `tokens` and check it returned logits [batch, pos, vocab]. The model may
    return the tensor itself or an object with `.logits` (HuggingFace)."""
    out = model(tokens)
    logits = getattr(out, "logits", out)
    if not isinstance(logits, Tensor) or logits.ndim != 3 or logits.shape[:2] != tokens.shape:
        shape = tuple(logits.shape) if isinstance(logits, Tensor) else type(logits).__name__
        raise ValueError(f"model must map tokens {tuple(tokens.shape)} to logits [batch, pos, vocab]; got {shape}")
    return logits


class PlainModel:
    """A tokens -> logits callable that no family knows, with the questions a sweep asks of a backend.

    Rows that share a prompt (several queries) share one forward pass within a minibatch.
    """

    def __init__(self, model: Any) -> None:
        self.model, self._device = model, torch.device("cpu")

    def module(self) -> torch.nn.Module | None:
        return self.model if isinstance(self.model, torch.nn.Module) else None

    def sweep_device(self, device: torch.device | str | None = None) -> torch.device:
        """`device`, else the device of the callable's parameters, else CPU; its inputs go there."""
        module = self.module()
        found = next((p.device for p in module.parameters()), None) if module is not None else None
        self._device = torch.device(device) if device is not None else found or torch.device("cpu")
        return self._device

    def sweep_info(self) -> None:
        return None  # full forwards

    def sweep_logits(self, tokens: Tensor, query_pos: Tensor, prompt_id: Tensor) -> Tensor:
        from phaseinterp.backends.prompts import distinct_prompts

        first, inverse = distinct_prompts(prompt_id, tokens)
        logits = forward_logits(self.model, tokens[first].to(self._device))
        return logits[inverse.to(self._device), query_pos.to(self._device)]

    def period(self) -> int | None:
        return period_of(getattr(getattr(self.model, "cfg", None), "strides", ()) or ())

    def model_class(self) -> str:
        return type(self.model).__name__

    @property
    def recorded_cfg(self) -> Any:
        return getattr(self.model, "cfg", None)


def runner(model: Any) -> Any:
    """What a phase sweep runs: the model's backend (`resolve_model`), else the callable as a `PlainModel`."""
    if isinstance(model, PlainModel):
        return model
    model = resolve_model(model)
    return model if is_backend(model) else PlainModel(model)


def module_of(model: Any) -> torch.nn.Module | None:
    """The torch module holding a model's weights: a backend's model, a module itself, else None."""
    if is_backend(model) or isinstance(model, PlainModel):
        return model.module()
    return model if isinstance(model, torch.nn.Module) else None


def recorded_config(model: Any) -> Any:
    """The configuration results record: a backend's `recorded_cfg`, else the model's own `cfg` (or None)."""
    return getattr(model, "recorded_cfg", None) or getattr(model, "cfg", None)


def context_length(model: Any) -> int | None:
    """The longest sequence an HF model's positions cover (`config.max_position_embeddings`, of the text
    config where there is one), or None where its config does not say."""
    config = getattr(model, "config", None)
    return getattr(getattr(config, "text_config", None) or config, "max_position_embeddings", None)


def model_class(model: Any) -> str:
    """The class name results record: a backend's wrapped model class, else the object's type."""
    return model.model_class() if is_backend(model) or isinstance(model, PlainModel) else type(model).__name__


__all__ = ["PlainModel", "backend_for", "context_length", "forward_logits", "is_backend", "model_class", "module_of", "recorded_config",
           "resolve_model", "runner"]
