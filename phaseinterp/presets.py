"""Named model configs. `preset(name)` returns a `ModelConfig`; `PRESETS` lists them."""

from __future__ import annotations

from typing import Callable

from phaseinterp.config import CompressionConfig, ModelConfig, uniform_schedule


def _tiny(spec, **kw) -> ModelConfig:
    base = dict(vocab_size=512, d_model=64, n_layers=2, n_heads=4, n_kv_heads=1, d_head=16, d_mlp=192, n_ctx=512)
    base.update(kw)
    return ModelConfig(layers=uniform_schedule(base["n_layers"], spec), **base)


def _qwen3_0p6b(spec) -> ModelConfig:
    # Qwen3-0.6B geometry (28 layers, d_model 1024, 16 query heads of 128, SwiGLU 3072, tied
    # embeddings, theta 1e6); the paper's controlled runs use 1 KV head in compressed layers.
    return ModelConfig(
        vocab_size=151936, d_model=1024, n_layers=28, n_heads=16, n_kv_heads=1, d_head=128, d_mlp=3072,
        rope_theta=1_000_000.0, n_ctx=4096, tie_embeddings=True, layers=uniform_schedule(28, spec),
    )


DEEPSEEK_KERNEL = CompressionConfig(window=8, stride=4, gate="vector", kv="tied", payload="shared", gate_maps="shared")
DEEPSEEK_CSA = CompressionConfig(
    window=8, stride=4, gate="vector", kv="tied", payload="shared", gate_maps="shared",
    layout="deepseek-csa", rope="partial", rope_dims=8, rope_style="interleaved", sink=True,
)

PRESETS: dict[str, Callable[[], ModelConfig]] = {
    "qwen3-0.6b-w8s8": lambda: _qwen3_0p6b(CompressionConfig(window=8, stride=8)),
    "qwen3-0.6b-full": lambda: _qwen3_0p6b("full"),
    "tiny-full": lambda: _tiny("full"),
    "tiny-w4s4": lambda: _tiny(CompressionConfig(window=4, stride=4)),
    "tiny-w8s8": lambda: _tiny(CompressionConfig(window=8, stride=8)),
    "tiny-w8s4": lambda: _tiny(CompressionConfig(window=8, stride=4)),
    "tiny-w4s4-uniform": lambda: _tiny(CompressionConfig(window=4, stride=4, gate="uniform")),
    "tiny-deepseek-kernel": lambda: _tiny(DEEPSEEK_KERNEL),
    "tiny-deepseek-csa": lambda: _tiny(DEEPSEEK_CSA),
}


def preset(name: str) -> ModelConfig:
    """The named config, e.g. `preset("tiny-w4s4")`; raises ValueError listing valid names."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}: allowed {sorted(PRESETS)}")
    return PRESETS[name]()
