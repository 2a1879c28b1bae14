"""`resolve_model`: what an experiment runs on, decided here and nowhere else: a backend.

Every intervention (`phaseinterp.interventions`) and the phase sweep call it first, so they talk
to one interface whatever they were given: our `HookedCompressedTransformer` runs behind
`HookedBackend` (TransformerLens hooks, the incremental final-position path), an `NSATransformer`
behind `NSABackend`, a raw HuggingFace causal LM behind its backend (`backend_for`); a backend
is returned as is."""

from __future__ import annotations

from typing import Any

import torch

from phaseinterp.backends.base import Backend
from phaseinterp.backends.load import backend_for
from phaseinterp.model import HookedCompressedTransformer


def is_hf_model(model: Any) -> bool:
    """A HuggingFace model (an `nn.Module` with a `config` that has a `model_type`), not ours."""
    return (isinstance(model, torch.nn.Module) and not isinstance(model, HookedCompressedTransformer)
            and hasattr(getattr(model, "config", None), "model_type"))


def resolve_model(model: Any, *, require: bool = False) -> Any:
    """The backend an experiment runs on.

    - a backend: returned as is;
    - our `HookedCompressedTransformer`, an `NSATransformer` or a raw HuggingFace causal LM: its
      backend (`backend_for`), built once per call of an entry point;
    - anything else: returned as is (`phase_sweep` scores any tokens -> logits callable), or, with
      `require=True` (interventions), a ValueError naming the type and what is allowed.

    Example:
        >>> from phaseinterp import HookedCompressedTransformer, preset
        >>> m = HookedCompressedTransformer(preset("tiny-w4s4"), seed=0)
        >>> backend = resolve_model(m)
        >>> type(backend).__name__, backend.model is m, resolve_model(backend) is backend
        ('HookedBackend', True, True)
    """
    if isinstance(model, Backend):
        return model
    if isinstance(model, HookedCompressedTransformer) or getattr(model, "is_nsa", False) or is_hf_model(model):
        return backend_for(model)
    if require:
        raise ValueError(f"model of type {type(model).__name__} is invalid: allowed a HookedCompressedTransformer, "
                         "an NSATransformer, a phaseinterp.backends Backend, or a HuggingFace causal LM "
                         "(an nn.Module with a .config)")
    return model


__all__ = ["is_hf_model", "resolve_model"]
