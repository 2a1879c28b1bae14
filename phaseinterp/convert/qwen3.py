"""HuggingFace `Qwen3ForCausalLM` -> `HookedCompressedTransformer` (all layers full attention, or
any schedule: compressed layers keep the Qwen3 attention weights for their local window and get
freshly initialized compressors)."""

from __future__ import annotations

import torch

from phaseinterp.config import LayerSpec, ModelConfig
from phaseinterp.model import HookedCompressedTransformer


def config_from_hf_qwen3(hf_cfg, layers: tuple[LayerSpec, ...] | None = None) -> ModelConfig:
    """The `ModelConfig` matching a `transformers.Qwen3Config` (biases and sliding windows unsupported)."""
    if getattr(hf_cfg, "attention_bias", False):
        raise ValueError("attention_bias=True is not supported: allowed False (Qwen3 default)")
    rope = getattr(hf_cfg, "rope_parameters", None) or {}
    if rope.get("rope_type", "default") != "default":
        raise ValueError(f"rope_type={rope.get('rope_type')!r} is not supported: allowed 'default'")
    return ModelConfig(
        vocab_size=hf_cfg.vocab_size,
        d_model=hf_cfg.hidden_size,
        n_layers=hf_cfg.num_hidden_layers,
        n_heads=hf_cfg.num_attention_heads,
        n_kv_heads=hf_cfg.num_key_value_heads,
        d_head=hf_cfg.head_dim,
        d_mlp=hf_cfg.intermediate_size,
        rope_theta=float(rope.get("rope_theta", getattr(hf_cfg, "rope_theta", 10000.0))),
        qk_norm=True,
        norm_eps=hf_cfg.rms_norm_eps,
        n_ctx=hf_cfg.max_position_embeddings,
        tie_embeddings=bool(hf_cfg.tie_word_embeddings),
        layers=layers,
    )


@torch.no_grad()
def from_hf_qwen3(hf_model, layers: tuple[LayerSpec, ...] | None = None) -> HookedCompressedTransformer:
    """Build our model from a HF Qwen3 causal LM, copying every weight."""
    cfg = config_from_hf_qwen3(hf_model.config, layers)
    model = HookedCompressedTransformer(cfg, seed=0)
    H, K, D, d = cfg.n_heads, cfg.n_kv_heads, cfg.d_model, cfg.d_head
    hf = hf_model.model
    model.W_E.copy_(hf.embed_tokens.weight)
    if not cfg.tie_embeddings:
        model.W_U.copy_(hf_model.lm_head.weight.T)
    model.ln_final.weight.copy_(hf.norm.weight)
    for block, layer in zip(model.blocks, hf.layers):
        a, sa = block.attn, layer.self_attn
        a.W_Q.copy_(sa.q_proj.weight.view(H, d, D).transpose(1, 2))
        a.W_K.copy_(sa.k_proj.weight.view(K, d, D).transpose(1, 2))
        a.W_V.copy_(sa.v_proj.weight.view(K, d, D).transpose(1, 2))
        a.W_O.copy_(sa.o_proj.weight.T.reshape(H, d, D))
        a.q_norm.weight.copy_(sa.q_norm.weight)
        a.k_norm.weight.copy_(sa.k_norm.weight)
        block.ln1.weight.copy_(layer.input_layernorm.weight)
        block.ln2.weight.copy_(layer.post_attention_layernorm.weight)
        block.mlp.W_gate.copy_(layer.mlp.gate_proj.weight.T)
        block.mlp.W_in.copy_(layer.mlp.up_proj.weight.T)
        block.mlp.W_out.copy_(layer.mlp.down_proj.weight.T)
    return model.eval()
