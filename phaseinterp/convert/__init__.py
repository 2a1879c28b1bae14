"""Weight converters between HuggingFace models and phaseinterp models."""

from phaseinterp.families.deepseek_v4.convert import compression_config_from_hf, load_hf_compressor
from phaseinterp.convert.qwen3 import config_from_hf_qwen3, from_hf_qwen3

__all__ = ["compression_config_from_hf", "config_from_hf_qwen3", "from_hf_qwen3", "load_hf_compressor"]
