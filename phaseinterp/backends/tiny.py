"""Tiny random-weight HuggingFace models and an offline tokenizer, built from configs (no
downloads): the stand-ins for DeepSeek-V4 and Qwen3 in tests, demos and the report."""

from __future__ import annotations

import itertools

import torch


def word_tokenizer(vocab_size: int = 512):
    """An offline word-level tokenizer: BOS/EOS/PAD/UNK and lowercase syllable words."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["".join(p) for p in itertools.product("bcdfghklmnprstvz", "aeiou", "bcdfghklmnprstvz")]
    vocab = {t: i for i, t in enumerate(["<s>", "</s>", "<pad>", "<unk>"])}
    vocab.update({w: i + 4 for i, w in enumerate(words[: vocab_size - 4])})
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                                   pad_token="<pad>")


def tiny_deepseek_v4(seed: int = 0, index_topk: int = 8):
    """A 4-layer DeepSeek-V4 (sliding, CSA m=4, HCA m=16, CSA) with ~1M random parameters.

    `index_topk` >= the number of CSA entries makes the lightning indexer keep every entry."""
    from transformers import DeepseekV4Config, DeepseekV4ForCausalLM

    cfg = DeepseekV4Config(
        vocab_size=512, hidden_size=128, num_hidden_layers=4, num_attention_heads=4,
        head_dim=64, qk_rope_head_dim=16, q_lora_rank=64, o_groups=2, o_lora_rank=32,
        n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=64, n_shared_experts=1,
        layer_types=["sliding_attention", "compressed_sparse_attention",
                     "heavily_compressed_attention", "compressed_sparse_attention"],
        compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 16},
        mlp_layer_types=["hash_moe", "moe", "moe", "moe"],
        sliding_window=16, index_n_heads=4, index_head_dim=32, index_topk=index_topk, max_position_embeddings=1024)
    torch.manual_seed(seed)
    return DeepseekV4ForCausalLM(cfg).eval()


def tiny_qwen3(seed: int = 0):
    """A 2-layer Qwen3 with 4 query heads over 2 KV heads, random weights."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = Qwen3Config(vocab_size=512, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=1024)
    torch.manual_seed(seed)
    return Qwen3ForCausalLM(cfg).eval()
