"""`NSAConfig`: a tiny decoder whose every layer is Native Sparse Attention (the open
`native-sparse-attention-pytorch` `SparseAttention`), validated and JSON round-tripping.

The config itself needs no torch and no NSA package: checkpoints and cards can be read, and
errors raised, without the optional dependency (`phaseinterp.model.nsa.require_nsa` says how to
install it when a model is built).

Example:
    >>> cfg = NSAConfig(num_selected=2)
    >>> cfg.strides, cfg.residue_modulus, cfg.describe()
    ((8,), 8, 'NSA W8/S8, select k=2 of 8-token blocks, sliding window 8')
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from phaseinterp.config import check_known_fields, period_of

#: The checkpoint format of NSA models (`NSATransformer.save`).
NSA_FORMAT = "phaseinterp-nsa-checkpoint-v1"

#: The key that marks a stored model config as NSA (`NSAConfig.is_nsa_dict`).
ARCH = "nsa"


def _bad(name: str, value: Any, allowed: str) -> ValueError:
    return ValueError(f"{name}={value!r} is invalid: allowed {allowed}")


def _int(name: str, value: Any, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise _bad(name, value, f"an integer >= {low}")


@dataclass(frozen=True)
class NSAConfig:
    """An NSA transformer: Qwen3-style blocks (RMSNorm, SwiGLU) whose attention is `SparseAttention`.

    Attributes:
        vocab_size, d_model, n_layers, n_heads, n_kv_heads, d_head, d_mlp, n_ctx: the usual sizes;
            query head h reads KV head h // (n_heads / n_kv_heads).
        compress_block: W, tokens folded into one compressed entry (`compress_block_size`).
        compress_stride: S, distance between compressed windows (`compress_block_sliding_stride`),
            1 <= S <= W. Window j covers positions jS - (W - S) .. jS + S - 1 (zeros before 0).
        num_selected: k, raw blocks the selection branch re-reads per query and KV head (0 = the
            selection branch reads only the query's own block, the library's ablation setting).
        sliding_window: the sliding branch reads positions t - sliding_window .. t.
        compress_mlp_expand_factor: hidden width of the compressor MLP as a fraction of W * d_head.
        norm_eps, init_std: RMSNorm epsilon; std of our embedding / MLP init (NSA's own modules
            keep the library's initialization).

    The selection block size equals S (the library also allows multiples of S; our step-by-step
    forward implements the equal case, which is the case its scores are defined on without
    re-pooling).
    """

    vocab_size: int = 256
    d_model: int = 32
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int = 2
    d_head: int = 16
    d_mlp: int = 96
    n_ctx: int = 512
    compress_block: int = 8
    compress_stride: int = 8
    num_selected: int = 0
    sliding_window: int = 8
    compress_mlp_expand_factor: float = 0.5
    norm_eps: float = 1e-6
    init_std: float = 0.02

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_head", "d_mlp", "n_ctx",
                     "compress_block", "compress_stride", "sliding_window"):
            _int(name, getattr(self, name), 1)
        _int("num_selected", self.num_selected, 0)
        if self.n_heads % self.n_kv_heads:
            raise _bad("n_kv_heads", self.n_kv_heads, f"a divisor of n_heads={self.n_heads}")
        if self.compress_stride > self.compress_block:
            raise _bad("compress_stride", self.compress_stride, f"an integer in [1, compress_block={self.compress_block}]")
        for name in ("compress_mlp_expand_factor", "norm_eps", "init_std"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (v > 0 and math.isfinite(v)):
                raise _bad(name, v, "a finite number > 0")
        if int(self.compress_mlp_expand_factor * self.compress_block * self.d_head) < 1:
            raise _bad("compress_mlp_expand_factor", self.compress_mlp_expand_factor,
                       f"a factor giving >= 1 hidden unit (W * d_head = {self.compress_block * self.d_head})")

    # what the trainer, the sweeps and the backends read
    @property
    def selection_block(self) -> int:
        return self.compress_stride

    @property
    def strides(self) -> tuple[int, ...]:
        return (self.compress_stride,)

    @property
    def residue_modulus(self) -> int | None:
        return period_of(self.strides)

    def describe(self) -> str:
        sel = f"select k={self.num_selected} of {self.selection_block}-token blocks" if self.num_selected else "selection off (k=0)"
        return f"NSA W{self.compress_block}/S{self.compress_stride}, {sel}, sliding window {self.sliding_window}"

    def to_dict(self) -> dict[str, Any]:
        return {"arch": ARCH, **dataclasses.asdict(self)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "NSAConfig":
        if not cls.is_nsa_dict(d):
            raise ValueError(f"an NSA config dict has 'arch': {ARCH!r}; got {d.get('arch') if isinstance(d, dict) else d!r}")
        fields = {k: v for k, v in d.items() if k != "arch"}
        check_known_fields(cls, fields)
        return cls(**fields)

    @staticmethod
    def is_nsa_dict(d: Any) -> bool:
        return isinstance(d, dict) and d.get("arch") == ARCH

    def replace(self, **changes: Any) -> "NSAConfig":
        return dataclasses.replace(self, **changes)


__all__ = ["ARCH", "NSAConfig"]
