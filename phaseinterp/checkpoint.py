"""Checkpoints: safetensors with the config JSON in the metadata, written atomically.

Two formats, told apart by the metadata's "format":

- "phaseinterp-checkpoint-v1": a `HookedCompressedTransformer` (config = `ModelConfig.to_dict()`).
- "phaseinterp-hf-checkpoint-v1": a HuggingFace causal LM trained by `phaseinterp.train`
  (`phaseinterp.train.hf_model.HFCausalLM`). Tensors are the HF model's own state dict (the keys
  of e.g. `DeepseekV4ForCausalLM.state_dict()`); metadata "config" is
  `{"architecture": ..., "hf_config": <the HF config's to_dict()>}`, plus "transformers_version".
  `load` returns an `HFCausalLM` (tokens -> logits), `load_hf` the HF model itself.
- "phaseinterp-nsa-checkpoint-v1": an `NSATransformer` (Native Sparse Attention, config =
  `NSAConfig.to_dict()`; loading needs `pip install 'phaseinterp[nsa]'`).
"""

from __future__ import annotations

import os

from phaseinterp.checkpoint_io import FORMAT, HF_FORMAT, NSA_FORMAT, read_metadata, read_tensors, save_hf, save_model


def load(path: str | os.PathLike, device: str = "cpu", *, allow_nonfinite: bool = False):
    """Load a model written by `model.save(path)`; raises on missing, truncated or mismatched files,
    on a config or weights changed after saving (digest), and on nan/inf weights unless
    `allow_nonfinite`.
    A HuggingFace checkpoint (format "phaseinterp-hf-checkpoint-v1") loads as an
    `HFCausalLM` (tokens -> logits; the HF model is its `.hf`, see `load_hf`).

    Example:
        >>> model.save("w4s4.safetensors")  # shipped: phaseinterp.load("assets/checkpoints/w4s4.safetensors")
        >>> type(phaseinterp.load("w4s4.safetensors")).__name__
        'HookedCompressedTransformer'
    """
    from phaseinterp.config import ModelConfig
    from phaseinterp.model import HookedCompressedTransformer

    meta = read_metadata(path)
    if meta["format"] == HF_FORMAT:
        return _load_hf_checkpoint(path, meta, device, allow_nonfinite)
    if meta["format"] == NSA_FORMAT:
        from phaseinterp.model.nsa.config import NSAConfig
        from phaseinterp.model.nsa.transformer import NSATransformer

        model = NSATransformer(NSAConfig.from_dict(meta["config"]), seed=None)
        model.load_state_dict(read_tensors(path, model.state_dict(), device, allow_nonfinite=allow_nonfinite, meta=meta))
        return model.to(device).eval()
    model = HookedCompressedTransformer(ModelConfig.from_dict(meta["config"]))
    model.load_state_dict(read_tensors(path, model.state_dict(), device, allow_nonfinite=allow_nonfinite, meta=meta))
    return model.to(device).eval()


def _load_hf_checkpoint(path: str | os.PathLike, meta: dict, device: str, allow_nonfinite: bool = False):
    from phaseinterp.train.hf_model import HFModelSpec

    model = HFModelSpec.from_dict(meta["config"]).build(seed=0)
    model.hf.load_state_dict(read_tensors(path, model.hf.state_dict(), "cpu", allow_nonfinite=allow_nonfinite, meta=meta))
    return model.to(device).eval()


def load_hf(path: str | os.PathLike, device: str = "cpu"):
    """The HuggingFace model (e.g. a `DeepseekV4ForCausalLM`, eval mode) of an HF checkpoint
    written by the trainer; raises ValueError for our own models' checkpoints.

    Example:
        >>> from phaseinterp.backends import backend_for
        >>> backend = backend_for(load_hf("assets/checkpoints/hf-deepseek-v4.safetensors"))  # doctest: +SKIP
    """
    meta = read_metadata(path)
    if meta["format"] != HF_FORMAT:
        raise ValueError(f"{str(path)!r} holds a HookedCompressedTransformer, not a HuggingFace model: "
                         "load it with phaseinterp.load")
    return _load_hf_checkpoint(path, meta, device).hf


__all__ = ["FORMAT", "HF_FORMAT", "NSA_FORMAT", "load", "load_hf", "read_metadata", "save_hf", "save_model"]
