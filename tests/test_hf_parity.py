"""Parity against independent implementations: HuggingFace Qwen3 and DeepSeek-V4 compressors."""

import pytest
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from phaseinterp.backends.tiny import tiny_deepseek_v4
from phaseinterp.convert import compression_config_from_hf, from_hf_qwen3, load_hf_compressor
from phaseinterp.model.compressor import Compressor
from phaseinterp.model.layers import apply_rope, rope_angles


@pytest.mark.parametrize("kv_heads,tied", [(2, False), (1, True), (4, False)])
def test_full_attention_matches_hf_qwen3_logits(kv_heads, tied):
    cfg = Qwen3Config(
        vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=kv_heads, head_dim=16, max_position_embeddings=256, tie_word_embeddings=tied,
        rope_theta=500.0,
    )
    torch.manual_seed(kv_heads)
    hf = Qwen3ForCausalLM(cfg).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.normal_(std=0.3)
    ours = from_hf_qwen3(hf)
    tokens = torch.randint(0, 128, (2, 48))
    with torch.no_grad():
        expected, got = hf(tokens).logits, ours(tokens)
    assert expected.abs().max() > 1.0  # the comparison is not between near-zero tensors
    assert (expected - got).abs().max() <= 1e-4
    ours.set_explicit_attention(True)  # the hookable path agrees too
    with torch.no_grad():
        assert (expected - ours(tokens)).abs().max() <= 1e-4


@pytest.mark.parametrize("layer", [1, 2])
def test_deepseek_layouts_match_hf_compressor_entries(layer):
    model = tiny_deepseek_v4()
    cfg = model.config
    hf = model.model.layers[layer].self_attn.compressor
    with torch.no_grad():
        for p in hf.parameters():
            p.normal_(std=0.5)
    cc = compression_config_from_hf(cfg, cfg.layer_types[layer])
    assert cc.layout == ("deepseek-csa" if layer == 1 else "hca")
    ours = Compressor(cc, cfg.hidden_size, 1, cfg.head_dim, cfg.rms_norm_eps)
    load_hf_compressor(ours, hf)
    seq_len = 53
    h = torch.randn(2, seq_len, cfg.hidden_size)
    with torch.no_grad():
        expected, _ = hf(h, torch.randn(2, seq_len, cfg.q_lora_rank), torch.arange(seq_len)[None].expand(2, -1), None, layer)
        entries = ours(h)
    rotated = apply_rope(entries, rope_angles(torch.arange(entries.shape[1]) * cc.stride, cc.rope_dims, cc.rope_theta), cc.rope_style)
    assert expected.shape[2] == entries.shape[1] == cc.n_entries(seq_len) > 2
    torch.testing.assert_close(rotated[:, :, 0], expected[:, 0], atol=1e-5, rtol=1e-5)
