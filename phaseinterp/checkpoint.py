"""Checkpoints: safetensors with the config JSON in the metadata, written atomically.

The metadata's "format" names the model family (`phaseinterp.families`), which builds the model:

- "phaseinterp-checkpoint-v1": a `HookedCompressedTransformer` (config = `ModelConfig.to_dict()`).
- "phaseinterp-hf-checkpoint-v1": a HuggingFace causal LM trained by `phaseinterp.train`
  (`phaseinterp.families.hf_causal_lm.HFCausalLM`). Tensors are the HF model's own state dict (the
  keys of e.g. `DeepseekV4ForCausalLM.state_dict()`); metadata "config" is
  `{"architecture": ..., "hf_config": <the HF config's to_dict()>}`, plus "transformers_version".
  `load` returns an `HFCausalLM` (tokens -> logits), `load_hf` the HF model itself.
- "phaseinterp-nsa-checkpoint-v1": an `NSATransformer` (Native Sparse Attention, config =
  `NSAConfig.to_dict()`; loading needs `pip install 'phaseinterp[nsa]'`).

A family registered later (`phaseinterp.family.register_family`) adds its own format.
"""

from __future__ import annotations

import os
from pathlib import Path

from phaseinterp import checkpoint_io
from phaseinterp.checkpoint_io import read_tensors
from phaseinterp.families import family_of_format, family_of_model, hf_causal_lm


def read_metadata(path: str | os.PathLike) -> dict:
    """The checkpoint's metadata (header only), with "config" and "extra" decoded; raises on a
    missing, unreadable or foreign file and on a format no registered family reads."""
    meta = checkpoint_io.read_metadata(path)
    try:
        family_of_format(meta["format"])
    except ValueError as e:
        raise ValueError(f"{str(path)!r} is not a phaseinterp checkpoint this library can read: {e}") from None
    return meta


def load(path: str | os.PathLike, device: str = "cpu", *, allow_nonfinite: bool = False):
    """Load a model written by `model.save(path)`, built by the family its format names; raises
    on missing, truncated or mismatched files, on a config or weights changed after saving
    (digest), and on nan/inf weights unless `allow_nonfinite`.
    A HuggingFace checkpoint (format "phaseinterp-hf-checkpoint-v1") loads as an
    `HFCausalLM` (tokens -> logits; the HF model is its `.hf`, see `load_hf`).

    Example:
        >>> path = model.save("w4s4.safetensors")  # shipped: phaseinterp.load("assets/checkpoints/w4s4.safetensors")
        >>> type(phaseinterp.load("w4s4.safetensors")).__name__
        'HookedCompressedTransformer'
    """
    meta = read_metadata(path)
    family = family_of_format(meta["format"])
    if family.build is None or family.as_config is None:
        raise ValueError(f"{str(path)!r}: family {family.name!r} cannot build a model from a checkpoint")
    model = family.build(family.as_config(meta["config"]), None)
    weights = family.weights(model)
    weights.load_state_dict(read_tensors(path, weights.state_dict(), "cpu", allow_nonfinite=allow_nonfinite, meta=meta))
    return model.to(device).eval()


def save_model(model, path: str | os.PathLike, extra: dict | None = None) -> Path:
    """Write any family's model (`model.save(path, extra=extra)`: each family names its format)."""
    family_of_model(model)  # a clear error for an object no family knows
    return Path(model.save(path, extra=extra))


def load_hf(path: str | os.PathLike, device: str = "cpu"):
    """The HuggingFace model (e.g. a `DeepseekV4ForCausalLM`, eval mode) of an HF checkpoint
    written by the trainer; raises ValueError for other families' checkpoints.

    Example:
        >>> from phaseinterp.backends import backend_for
        >>> backend = backend_for(load_hf("assets/checkpoints/hf-deepseek-v4.safetensors"))  # doctest: +SKIP
    """
    fmt = read_metadata(path)["format"]
    if family_of_format(fmt) is not hf_causal_lm.FAMILY:
        raise ValueError(f"{str(path)!r} holds a {family_of_format(fmt).name!r} model, not a HuggingFace model: "
                         "load it with phaseinterp.load")
    return load(path, device).hf


__all__ = ["load", "load_hf", "read_metadata", "save_model"]
