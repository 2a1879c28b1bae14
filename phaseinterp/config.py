"""Model and compression configs: validated dataclasses that serialize to plain JSON.

Every invalid field raises a `ValueError` that names the field, the value and the allowed range.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Literal, Union

from phaseinterp.gates import GATE_KINDS
from phaseinterp.layouts import layout_of

MAPS = ("per_offset", "shared")
KV_MODES = ("separate", "tied")
ROPE_MODES = ("full", "partial", "none")
ROPE_STYLES = ("neox", "interleaved")


def _bad(name: str, value: Any, allowed: str) -> ValueError:
    return ValueError(f"{name}={value!r} is invalid: allowed {allowed}")


def _check_int(name: str, value: Any, low: int, high: int | float = math.inf) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        upper = "" if high == math.inf else f" and <= {high}"
        raise _bad(name, value, f"an integer >= {low}{upper}")


def _check_choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise _bad(name, value, f"one of {list(choices)}")


def _check_bool(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise _bad(name, value, "True or False")


def check_known_fields(cls: type, d: dict[str, Any]) -> None:
    """Raise a ValueError naming keys of `d` that are not fields of dataclass `cls` (or `d` itself
    when it is not a dict: a string would otherwise be read as its characters)."""
    if not isinstance(d, dict):
        raise ValueError(f"{cls.__name__} fields must be a dict (a JSON object), got {type(d).__name__} {d!r}")
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = set(d) - known
    if unknown:
        raise ValueError(f"unknown {cls.__name__} fields {sorted(unknown)}: allowed {sorted(known)}")


def _check_positive(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or not math.isfinite(value):
        raise _bad(name, value, "a finite number > 0")



def period_of(strides: Iterable[int]) -> int | None:
    """The period of a model's phase effect: the lcm of its compressed layers' strides (None
    without compressed layers). The one place that computes it; "period" is its name everywhere.

    Example:
        >>> period_of((4, 6)), period_of(())
        (12, None)
    """
    strides = tuple(strides)
    return math.lcm(*strides) if strides else None


def renamed_keyword(func: str, deprecated: dict[str, Any], old: str, new: str, value: Any, *, default: Any = None) -> Any:
    """The value of keyword `new` of `func`, also accepted under its deprecated name `old`.

    A function that renamed a keyword takes `**deprecated` and calls this once: the old name
    still works, with a DeprecationWarning, and gives the same result; any other leftover
    keyword raises TypeError as Python would. `value` is what the function got for `new`
    (`default` when not given).

    Example:
        >>> def sweep(*, period=None, **deprecated):
        ...     return renamed_keyword("sweep", deprecated, "stride", "period", period)
        >>> import warnings
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     sweep(stride=4), sweep(period=4), caught[0].category.__name__
        (4, 4, 'DeprecationWarning')
    """
    if old in deprecated:
        warnings.warn(f"{func}({old}=...) is deprecated: use {new}=... (same meaning, same results)",
                      DeprecationWarning, stacklevel=3)
        if value is not default:
            raise TypeError(f"{func}() got both {new}= and its deprecated name {old}=: pass {new}= only")
        value = deprecated.pop(old)
    if deprecated:
        raise TypeError(f"{func}() got an unexpected keyword argument {next(iter(deprecated))!r}")
    return value


@dataclass(frozen=True)
class CompressionConfig:
    """One compressed-attention layer: W-token windows every S tokens, each folded into one entry.

    Window `j` covers absolute positions `start_j + i`, offset `i = 0..W-1`, with `start_j = jS`
    (layout "deepseek-csa": `start_j = (j-1)S`, the previous block's `a` slots then block `j`'s `b`
    slots). Entry `j` is visible to query `t` iff `end_j = start_j + W - 1 <= t`.

    Attributes:
        window: W, tokens folded into one entry.
        stride: S, distance between window starts, 1 <= S <= W.
        gate: a registered gate kind (`phaseinterp.gates`): "scalar" (one logit per offset and KV
            head), "vector" (one per channel), "uniform" (a = 1/W, no gate parameters), or one
            added with `register_gate`.
        offset_bias: learned bias b_i on the gate logits (DeepSeek's `ape`).
        payload: payload maps C_i "per_offset" or one "shared" map.
        gate_maps: gate maps Z_i "per_offset" or one "shared" map.
        kv: "separate" key and value branches, or one "tied" branch read as both.
        entry_norm: RMSNorm (with learned weight) on each entry.
        rope: "full", "partial" (`rope_dims` trailing channels) or "none"; applied to key entries at
            their RoPE position (window's first position; deepseek-csa: the current block's start),
            and with the same dims to the layer's queries and local keys.
        rope_dims: rotated channels when rope="partial" (even, < d_head).
        rope_style: "neox" (rotate halves, Qwen3) or "interleaved" (pairs, DeepSeek-V4).
        rope_theta: RoPE base for this layer; None uses the model's.
        local_window: exact local window length L (last L tokens, current included), or "tail":
            exact tokens after the last visible entry only.
        sink: per-head sink logit that appears only in the softmax denominator.
        layout: a registered layout (`phaseinterp.layouts`): "generic", "deepseek-csa" (W = 2S
            two-half overlap, vector gates, tied K/V), "hca" (W = S), or one added with
            `register_layout`.
        grid_offset: shift the chunk grid back by this many positions, 0 <= grid_offset < S (window
            j starts at jS - grid_offset; slots before position 0 get weight 0). The trainer's
            random-offset mitigation varies it per sequence.
        chunkings: k interleaved chunk grids, each with its own gate and payload maps, shifted by
            S/k from each other (a divisor of S). Entries come every S/k tokens: k/S entries per
            token instead of 1/S (the multi-offset mitigation).
    """

    window: int = 8
    stride: int = 8
    gate: str = "scalar"
    offset_bias: bool = True
    payload: Literal["per_offset", "shared"] = "per_offset"
    gate_maps: Literal["per_offset", "shared"] = "per_offset"
    kv: Literal["separate", "tied"] = "separate"
    entry_norm: bool = True
    rope: Literal["full", "partial", "none"] = "full"
    rope_dims: int | None = None
    rope_style: Literal["neox", "interleaved"] = "neox"
    rope_theta: float | None = None
    local_window: Union[int, Literal["tail"]] = 16
    sink: bool = False
    layout: str = "generic"
    grid_offset: int = 0
    chunkings: int = 1

    def __post_init__(self) -> None:
        _check_int("window", self.window, 1)
        _check_int("stride", self.stride, 1, self.window)
        _check_choice("gate", self.gate, tuple(GATE_KINDS))
        _check_bool("offset_bias", self.offset_bias)
        _check_choice("payload", self.payload, MAPS)
        _check_choice("gate_maps", self.gate_maps, MAPS)
        _check_choice("kv", self.kv, KV_MODES)
        _check_bool("entry_norm", self.entry_norm)
        _check_choice("rope", self.rope, ROPE_MODES)
        _check_choice("rope_style", self.rope_style, ROPE_STYLES)
        if self.rope == "partial":
            _check_int("rope_dims", self.rope_dims, 2)
            if self.rope_dims % 2:
                raise _bad("rope_dims", self.rope_dims, "an even integer >= 2 (RoPE rotates pairs)")
        elif self.rope_dims is not None:
            raise _bad("rope_dims", self.rope_dims, f"None unless rope='partial' (rope={self.rope!r})")
        if self.rope_theta is not None:
            _check_positive("rope_theta", self.rope_theta)
        if self.local_window != "tail":
            _check_int("local_window", self.local_window, 0)
        _check_bool("sink", self.sink)
        layout = layout_of(self.layout)
        if layout.window_strides is not None and self.window != layout.window_strides * self.stride:
            raise _bad("window", self.window, f"{layout.window_rule(self.stride)} for layout {self.layout!r}")
        if any(getattr(self, field) != value for field, value in layout.requires):
            fixed = " and ".join(f"{field}={value!r}" for field, value in layout.requires)
            raise _bad("layout", self.layout, f"{self.layout!r} only with {fixed}")
        _check_int("grid_offset", self.grid_offset, 0, self.stride - 1)
        _check_int("chunkings", self.chunkings, 1, self.stride)
        if self.stride % self.chunkings:
            raise _bad("chunkings", self.chunkings, f"a divisor of stride ({self.stride})")

    @property
    def pad(self) -> int:
        """How many positions before 0 the first window starts: the layout's lookback in strides
        (S for deepseek-csa, else 0), plus `grid_offset`."""
        return layout_of(self.layout).lookback * self.stride + self.grid_offset

    @property
    def entry_stride(self) -> int:
        """Distance between consecutive entries: S / chunkings."""
        return self.stride // self.chunkings

    @property
    def entries_per_token(self) -> float:
        """Compressed cache entries per token and KV head (k / S), the local window aside."""
        return self.chunkings / self.stride

    def window_start(self, entry: int) -> int:
        """First absolute position of entry `entry`'s window (negative for a partly padded one)."""
        return entry * self.entry_stride - self.pad

    @property
    def rope_shift(self) -> int:
        """Positions from a window's start to where its key entry is rotated: the layout's
        `rope_shift` in strides (S for deepseek-csa: the current block's start; else 0)."""
        return layout_of(self.layout).rope_shift * self.stride

    def rope_position(self, entry: int) -> int:
        """Position at which entry `entry`'s key is rotated: its window start (deepseek-csa: the
        current block's start)."""
        return self.window_start(entry) + self.rope_shift

    def n_entries(self, seq_len: int) -> int:
        """Number of complete windows in a sequence of `seq_len` tokens."""
        return max(0, (seq_len + self.pad - self.window) // self.entry_stride + 1)

    def local_length(self) -> int:
        """Slots in the local key block: L, or W - 1 in tail mode (the longest possible tail)."""
        return self.window - 1 if self.local_window == "tail" else self.local_window

    def check_head_dim(self, d_head: int, where: str) -> None:
        if self.rope == "partial" and self.rope_dims >= d_head:
            raise _bad(f"{where}.rope_dims", self.rope_dims, f"< d_head ({d_head}); use rope='full'")


LayerSpec = Union[Literal["full"], CompressionConfig]


@dataclass(frozen=True)
class ModelConfig:
    """A Qwen3-style decoder with a per-layer attention schedule.

    `layers[l]` is "full" (causal full attention) or a `CompressionConfig`. `layers=None` means all
    layers full. The TransformerLens attribute names `n_key_value_heads` and `device` are provided
    as properties so `transformer_lens.patching` works.

    `gate_bias_init_std`: the compressors' offset biases `b_Z` start as Normal(0, this) instead of
    zeros (a random, seed-dependent preference among offsets that breaks their symmetry; no
    offset is favoured in expectation).
    """

    vocab_size: int = 512
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int = 1
    d_head: int = 16
    d_mlp: int = 192
    rope_theta: float = 10000.0
    qk_norm: bool = True
    norm_eps: float = 1e-6
    n_ctx: int = 256
    tie_embeddings: bool = False
    layers: tuple[LayerSpec, ...] | None = None
    init_std: float = 0.02
    device_name: str = "cpu"
    gate_bias_init_std: float = 0.0

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_head", "d_mlp", "n_ctx"):
            _check_int(name, getattr(self, name), 1)
        if self.n_heads % self.n_kv_heads:
            raise _bad("n_kv_heads", self.n_kv_heads, f"a divisor of n_heads ({self.n_heads})")
        if self.d_head % 2:
            raise _bad("d_head", self.d_head, "an even integer (RoPE rotates pairs)")
        _check_positive("rope_theta", self.rope_theta)
        _check_positive("norm_eps", self.norm_eps)
        _check_positive("init_std", self.init_std)
        if isinstance(self.gate_bias_init_std, bool) or not isinstance(self.gate_bias_init_std, (int, float)) \
                or not 0 <= self.gate_bias_init_std < math.inf:
            raise _bad("gate_bias_init_std", self.gate_bias_init_std, "a finite number >= 0")
        _check_bool("qk_norm", self.qk_norm)
        _check_bool("tie_embeddings", self.tie_embeddings)
        layers = self.layers
        if layers is None:
            layers = ("full",) * self.n_layers
        _check_layer_list(layers)
        layers = tuple(_compression_from_dict(s) if isinstance(s, dict) else s for s in layers)
        if len(layers) != self.n_layers:
            raise _bad("layers", f"<{len(layers)} entries>", f"exactly n_layers = {self.n_layers} entries")
        for i, spec in enumerate(layers):
            if spec != "full" and not isinstance(spec, CompressionConfig):
                raise _bad(f"layers[{i}]", spec, "'full' or a CompressionConfig")
            if isinstance(spec, CompressionConfig):
                spec.check_head_dim(self.d_head, f"layers[{i}]")
                if spec.n_entries(self.n_ctx) < 1:
                    raise _bad(f"layers[{i}].window", spec.window,
                               f"a window that completes within n_ctx = {self.n_ctx} (with pad {spec.pad}); this layer "
                               "would never produce a compressed entry")
        object.__setattr__(self, "layers", layers)

    # TransformerLens compatibility
    @property
    def n_key_value_heads(self) -> int:
        return self.n_kv_heads

    @property
    def device(self) -> str:
        return self.device_name

    # What TransformerLens's ActivationCache reads (decompose_resid, apply_ln_to_stack, logit_attrs):
    # every block has attention and an MLP, and every norm is an RMSNorm with a cached `hook_scale`.
    attn_only = False
    normalization_type = "RMS"
    positional_embedding_type = "rotary"

    @property
    def strides(self) -> tuple[int, ...]:
        """Distinct strides of the compressed layers, sorted (empty for full attention)."""
        return tuple(sorted({s.stride for s in self.layers if isinstance(s, CompressionConfig)}))

    @property
    def residue_modulus(self) -> int | None:
        """The period of the phase effect (`period_of` the strides); None for an all-full-attention model."""
        return period_of(self.strides)

    def compression(self, layer: int) -> CompressionConfig | None:
        spec = self.layers[layer]
        return spec if isinstance(spec, CompressionConfig) else None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["layers"] = [s if s == "full" else asdict(s) for s in self.layers]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ModelConfig":
        check_known_fields(cls, d)
        d = dict(d)
        if d.get("layers") is not None:
            _check_layer_list(d["layers"])
            for i, spec in enumerate(d["layers"]):
                if spec != "full" and not isinstance(spec, dict):
                    raise _bad(f"layers[{i}]", spec, "'full' or a dict of CompressionConfig fields")
            d["layers"] = tuple(s if s == "full" else _compression_from_dict(s) for s in d["layers"])
        return cls(**d)

    def replace(self, **changes: Any) -> "ModelConfig":
        return dataclasses.replace(self, **changes)


def _check_layer_list(layers: Any) -> None:
    if not isinstance(layers, (list, tuple)):
        raise _bad("layers", layers, "a list with one entry per layer, each 'full' or a CompressionConfig (or its dict)")


def _compression_from_dict(d: dict[str, Any]) -> CompressionConfig:
    check_known_fields(CompressionConfig, d)
    return CompressionConfig(**d)


def uniform_schedule(n_layers: int, spec: LayerSpec) -> tuple[LayerSpec, ...]:
    """The same attention in every layer."""
    return tuple(spec for _ in range(n_layers))


__all__ = ["CompressionConfig", "ModelConfig", "LayerSpec", "uniform_schedule"]
