"""`resolve_model`: what an experiment runs on, decided here and nowhere else: a backend.

Every intervention (`phaseinterp.interventions`) and the phase sweep call it first, so they talk
to one interface whatever they were given. The model's family (`phaseinterp.families`) names its
backend: our `HookedCompressedTransformer` runs behind `HookedBackend` (TransformerLens hooks, the
incremental final-position path), an `NSATransformer` behind `NSABackend`, a HuggingFace causal LM
behind its backend; a backend is returned as is."""

from __future__ import annotations

from typing import Any

from phaseinterp.backends.base import Backend
from phaseinterp.families import FAMILIES, backend_of, family_of_model


def resolve_model(model: Any, *, require: bool = False) -> Any:
    """The backend an experiment runs on.

    - a backend: returned as is;
    - a model of a registered family (ours, NSA, a HuggingFace causal LM, ...): its family's
      backend, built once per call of an entry point;
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
    try:
        family_of_model(model)
    except ValueError:
        if require:
            raise ValueError(f"model of type {type(model).__name__} is invalid: allowed a phaseinterp.backends Backend "
                             f"or a model of a registered family {[f.name for f in FAMILIES]} (our model, NSA, a "
                             "HuggingFace causal LM, ...)") from None
        return model
    return backend_of(model)


__all__ = ["resolve_model"]
