"""DeepSeek Sparse Attention families: HF `DeepseekV32ForCausalLM` ("deepseek_v32") and
`GlmMoeDsaForCausalLM` ("glm_moe_dsa"), behind `DSABackend` (the indexer's scores and selection as
sites), trained by our trainer with the indexer distilled from the main attention
(`indexer.distill_indexer` in this folder, installed whenever an `HFCausalLM` wraps such a model:
`DSABackend.prepare_hf_training`), and the tiny model of recipe "hf-deepseek-v32".

Both model types share the mechanism: a lightning indexer scores every visible token for every query
(ReLU of per-head dot products, weighted per query and summed over heads) and the query attends only to
its `index_topk` best tokens. GLM-MoE-DSA differs in the indexer's RoPE layout (interleaved) and in
letting "shared" layers reuse the previous full layer's selection. There is no compressor: tokens are
selected one by one, so these models have no stride of their own; `stride` names the period to test.

Example:
    >>> from phaseinterp.family import family_of_model
    >>> hf = tiny_dsa_spec().build(seed=0).hf
    >>> family_of_model(hf).name, tiny_dsa_spec().describe()
    ('deepseek-v32', 'HF DeepseekV32ForCausalLM: DSA top-16 of 64 positions, 2 layers')
"""

from __future__ import annotations

from typing import Any

from phaseinterp.families.hf_causal_lm import HFModelSpec
from phaseinterp.family import ModelFamily, register_family

MODEL_TYPES = {"deepseek_v32": "deepseek-v32", "glm_moe_dsa": "glm-moe-dsa"}

#: the period the phase statistics of these models test by default: a common compressor stride (these models have no S of their own)
DEFAULT_STRIDE = 8  # (also `backend.DEFAULT_STRIDE`, what `DSABackend.wrap` uses; kept here so registering imports no backend)


def is_dsa(model: Any) -> bool:
    return getattr(getattr(model, "config", None), "model_type", None) in MODEL_TYPES


FAMILIES = {model_type: register_family(ModelFamily(
    name=name, backend="phaseinterp.families.dsa.backend.DSABackend",
    recognizes=lambda m, t=model_type: getattr(getattr(m, "config", None), "model_type", None) == t))
    for model_type, name in MODEL_TYPES.items()}


def tiny_dsa_spec(vocab_size: int = 256, *, model_type: str = "deepseek_v32", hidden_size: int = 64,
                  index_topk: int = 16, n_ctx: int = 64, n_layers: int = 2, index_n_heads: int = 2,
                  index_head_dim: int = 32, **changes: Any) -> HFModelSpec:
    """A tiny DSA model (HF code) for 64-token record lookup; the model of recipe "hf-deepseek-v32".

    Two layers of MLA (4 heads; q and kv LoRA rank 32, nope 16 + rope 16 query/key dims, values 16) with a
    lightning indexer of `index_n_heads` heads of `index_head_dim` (RoPE on 16 of them) that keeps
    `index_topk` = 16 tokens per query: a quarter of a 64-token row, so selection selects (the last query
    sees 64 tokens and attends to 16). Dense SwiGLU MLPs of 192 (`first_k_dense_replace` = every layer:
    the MoE is not what is studied here, and it would slow the CPU run), like our tiny presets.
    About 0.15M parameters. `model_type="glm_moe_dsa"` gives the GLM-MoE-DSA variant of the same sizes
    (every layer with its own indexer unless `indexer_types` says otherwise). `changes`: other HF fields.
    """
    from transformers import DeepseekV32Config, GlmMoeDsaConfig

    if model_type not in MODEL_TYPES:
        raise ValueError(f"model_type={model_type!r} is invalid: allowed one of {sorted(MODEL_TYPES)}")
    if not 1 <= index_topk:
        raise ValueError(f"index_topk={index_topk} is invalid: allowed an integer >= 1")
    cls, arch = ((DeepseekV32Config, "DeepseekV32ForCausalLM") if model_type == "deepseek_v32"
                 else (GlmMoeDsaConfig, "GlmMoeDsaForCausalLM"))
    fields = dict(
        vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=3 * hidden_size,
        moe_intermediate_size=hidden_size, num_hidden_layers=n_layers, num_attention_heads=4,
        num_key_value_heads=4, n_shared_experts=1, n_routed_experts=4, kv_lora_rank=32, q_lora_rank=32,
        qk_rope_head_dim=16, v_head_dim=16, qk_nope_head_dim=16, n_group=1, topk_group=1, num_experts_per_tok=2,
        max_position_embeddings=n_ctx, index_topk=index_topk, index_head_dim=index_head_dim,
        index_n_heads=index_n_heads, first_k_dense_replace=n_layers, bos_token_id=0, eos_token_id=None,
        architectures=[arch])
    if model_type == "glm_moe_dsa":
        fields["indexer_types"] = ["full"] * n_layers
    fields.update(changes)
    return HFModelSpec.from_config(cls(**fields))


__all__ = ["DEFAULT_STRIDE", "FAMILIES", "MODEL_TYPES", "is_dsa", "tiny_dsa_spec"]
