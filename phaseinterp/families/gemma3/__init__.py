"""Gemma 3 (text models: `Gemma3ForCausalLM`) with training-free chunked KV compression
(`attention.compress_gemma3`: the global layers only, or all), and Gemma 3 270M from the package
registry (`load.load_gemma3_270m`, the `gemma3` extra). A compressed Gemma 3 runs behind the
compressed-HF family's `CompressedHFBackend` (gate and entry units on the compressed layers); a
plain one runs on the generic HF family. `tiny_gemma3()` is the random model of the test suite."""

from __future__ import annotations

from typing import Any

import torch

from phaseinterp.family import ModelFamily, register_family


def _recognizes(model: Any) -> bool:
    if not (isinstance(model, torch.nn.Module) and hasattr(model, "config")):
        return False
    from phaseinterp.families.gemma3.attention import CompressedGemma3Attention

    return any(isinstance(m, CompressedGemma3Attention) for m in model.modules())


def tiny_gemma3(seed: int = 0, n_layers: int = 6, sliding_window: int = 8) -> Any:
    """A random Gemma 3 text model (float32, eval): vocab 256, d_model 64, 4 query heads, 2 KV
    heads, head_dim 16; layers 0-4 sliding (window `sliding_window`) and every 3rd global
    (2 and 5 of 6), as Gemma 3's 5:1 interleave shrunk to test size. Built offline."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    types = ["full_attention" if i % 3 == 2 else "sliding_attention" for i in range(n_layers)]
    cfg = Gemma3TextConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=n_layers,
                           num_attention_heads=4, num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=16,
                           sliding_window=sliding_window, layer_types=types, max_position_embeddings=1024,
                           pad_token_id=0, bos_token_id=2, eos_token_id=1)
    cfg._attn_implementation = "eager"
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = Gemma3ForCausalLM(cfg)
    return model.eval()


FAMILY = register_family(ModelFamily(name="gemma3-compressed",
                                     backend="phaseinterp.families.compressed_hf.backend.CompressedHFBackend",
                                     recognizes=_recognizes))

__all__ = ["FAMILY", "tiny_gemma3"]
