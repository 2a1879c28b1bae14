"""The DeepSeek-V4 family: HF `DeepseekV4ForCausalLM` models (any weights) behind `DeepseekV4Backend`,
the flavour of trainer-written HF checkpoints whose config has `model_type` "deepseek_v4" (its
compressor strides: `families.deepseek_v4.convert.layer_strides`, read once, and its schedule: both asked
of `DeepseekV4Backend`) and the tiny model the trainer's recipe "hf-deepseek-v4" trains. The
converter of its compressors to ours is `convert.py` here (`load_hf_compressor`, also `phaseinterp.convert.load_hf_compressor`).

Example:
    >>> from phaseinterp.family import family_of_model
    >>> hf = tiny_deepseek_v4_spec().build(seed=0).hf
    >>> family_of_model(hf).name, FAMILY.backend_class().hf_layer_strides(hf.config)
    ('deepseek-v4', (8, 4))
"""

from __future__ import annotations

from typing import Any

from phaseinterp.families.hf_causal_lm import HFModelSpec
from phaseinterp.family import ModelFamily, register_family

MODEL_TYPE = "deepseek_v4"


def _is_deepseek_v4(model: Any) -> bool:
    return getattr(getattr(model, "config", None), "model_type", None) == MODEL_TYPE


FAMILY = register_family(ModelFamily(name="deepseek-v4", backend="phaseinterp.families.deepseek_v4.backend.DeepseekV4Backend",
                                     recognizes=_is_deepseek_v4))


def tiny_deepseek_v4_spec(vocab_size: int = 256, *, hidden_size: int = 64, head_dim: int = 128, rope_dims: int = 16,
                          sliding_window: int = 16,
                          csa_rate: int = 4, hca_rate: int = 8, n_ctx: int = 128,
                          layer_types: tuple[str, ...] = ("heavily_compressed_attention", "compressed_sparse_attention"),
                          hc_sinkhorn_iters: int = 5) -> HFModelSpec:
    """A tiny DeepSeek-V4 (HF code) for 64-token record lookup; the model of recipe "hf-deepseek-v4".

    Two layers, an HCA layer (W = S = `hca_rate`) then a CSA layer (m = `csa_rate`, W = 2m), like
    V4's schedule that opens with HCA; every layer also has the exact sliding window of
    `sliding_window` tokens (current included, as our `local_window`). Hidden 64, 4 query heads of
    `head_dim` = 128 over the one shared K = V head, RoPE on 16 of the 128 dims (V4: 64 of 512), a
    per-head sink, mHC with 4 streams, MoE with 4 routed experts (2 per token) + 1 shared expert,
    all routed by the learned router (no hash layers: their token -> expert table is a checkpoint
    constant, zero at init). About 0.37M parameters.

    Why head_dim 128 and not 32: V4 RMS-normalizes queries without a weight and K = V with one,
    so the largest attention logit is about sqrt(head_dim) x the norm weight (5.7 at 32, 11.3 at
    128; V4: 22.6). At 32 a query cannot single out one of ~30 keys until the norm weights have
    grown: the same recipe with head_dim 32 reached 6% query accuracy at step 675 (40% with 128)
    and only 15% on the far lookup after 2000 steps.

    Departures from V4-Flash, all size or speed: HCA's rate is 8, not 128 (a 64-token row has no
    complete 128-token window); the lightning indexer keeps `index_topk = n_ctx / csa_rate`
    entries, i.e. every visible one (V4 keeps 512 of up to 32K; with fewer kept the top-k flips
    between near-ties under rounding and training is not reproducible); Sinkhorn runs 5
    iterations instead of 20 (40% of a CPU step otherwise).
    """
    from transformers import DeepseekV4Config

    n = len(layer_types)
    config = DeepseekV4Config(
        vocab_size=vocab_size, hidden_size=hidden_size, num_hidden_layers=n, num_attention_heads=4, head_dim=head_dim,
        qk_rope_head_dim=rope_dims, q_lora_rank=hidden_size, o_groups=2, o_lora_rank=hidden_size // 2,
        n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=hidden_size, n_shared_experts=1,
        layer_types=list(layer_types), mlp_layer_types=["moe"] * n,
        compress_rates={"compressed_sparse_attention": csa_rate, "heavily_compressed_attention": hca_rate},
        sliding_window=sliding_window, index_n_heads=2, index_head_dim=16, index_topk=n_ctx // csa_rate,
        max_position_embeddings=n_ctx, hc_sinkhorn_iters=hc_sinkhorn_iters, bos_token_id=0, eos_token_id=None,
        architectures=["DeepseekV4ForCausalLM"])
    return HFModelSpec.from_config(config)


__all__ = ["FAMILY", "MODEL_TYPE", "tiny_deepseek_v4_spec"]
