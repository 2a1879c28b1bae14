"""Named units of a model (layer, KV head, query head, compressor gate) and a backend's shape card.

A `Unit` names one thing an experiment can read or knock out, the same way on every backend:

    Unit("layer", 3)        "L3"        the attention output of layer 3
    Unit("kv_head", 3, 0)   "L3.kv0"    every query head that reads KV head 0 of layer 3
    Unit("head", 3, 5)      "L3.h5"     query head 5 of layer 3
    Unit("gate", 3, 0)      "L3.gate0"  compressor branch 0 of layer 3 (key or tied K/V branch;
                                        branch 1 is the value branch of separate-K/V layers)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol, Union

from jaxtyping import Bool
from torch import Tensor

from phaseinterp.backends.compression import Compression
from phaseinterp.config import period_of

UNIT_KINDS = ("layer", "kv_head", "head", "gate")
_PREFIX = {"kv_head": "kv", "head": "h", "gate": "gate"}
_NAME = re.compile(r"^L(\d+)(?:\.(kv|h|gate)(\d+))?$")

#: Positions to read or edit: one int, shared ints, or per row a tensor [batch] / [batch, n_sites].
Positions = Union[int, tuple[int, ...], Tensor]


@dataclass(frozen=True, order=True)
class Unit:
    """One named unit. `index` is the KV head, query head or gate branch; None for a layer.

    Example:
        >>> Unit("kv_head", 2, 0).name, Unit.parse("L2.h3")
        ('L2.kv0', Unit(kind='head', layer=2, index=3))
    """

    kind: str
    layer: int
    index: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in UNIT_KINDS:
            raise ValueError(f"unit kind={self.kind!r} is invalid: allowed {list(UNIT_KINDS)}")
        if isinstance(self.layer, bool) or not isinstance(self.layer, int) or self.layer < 0:
            raise ValueError(f"unit layer={self.layer!r} is invalid: allowed an integer >= 0")
        if self.kind == "layer":
            if self.index is not None:
                raise ValueError(f"unit index={self.index!r} is invalid for a layer unit: allowed None")
        elif isinstance(self.index, bool) or not isinstance(self.index, int) or self.index < 0:
            raise ValueError(f"unit index={self.index!r} is invalid for a {self.kind} unit: allowed an integer >= 0")

    @property
    def name(self) -> str:
        """Short name: "L3", "L3.kv0", "L3.h5", "L3.gate0"."""
        return f"L{self.layer}" if self.kind == "layer" else f"L{self.layer}.{_PREFIX[self.kind]}{self.index}"

    @classmethod
    def parse(cls, name: str) -> Unit:
        """The unit called `name` (inverse of `Unit.name`)."""
        m = _NAME.match(name)
        if not m:
            raise ValueError(f"unit name {name!r} is invalid: allowed 'L<layer>', 'L<layer>.kv<k>', "
                             "'L<layer>.h<h>' or 'L<layer>.gate<b>'")
        layer, prefix, index = m.groups()
        if prefix is None:
            return cls("layer", int(layer))
        kind = {v: k for k, v in _PREFIX.items()}[prefix]
        return cls(kind, int(layer), int(index))

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class BackendConfig:
    """What a backend's model looks like, in the terms every experiment uses.

    `phase_sweep` reads `strides` (default period S) and records this card as the model config.

    Attributes:
        kind: "hooked" (our model), "nsa" (`NSATransformer`), "deepseek_v4" (HF DeepseekV4ForCausalLM) or "hf" (any causal LM).
        model_class: the wrapped model's class name.
        n_layers, n_heads, n_kv_heads, d_head, d_model, vocab_size: the usual sizes (per layer the
            same). Query head h reads KV head h // (n_heads // n_kv_heads).
        layer_strides: per layer, the compression stride S, or None (full / sliding attention).
        gate_windows: per layer, the compressor window W (None where there is no compressor).
        gate_branches: per layer, the names of its compressor branches ("kv", or "k" and "v").
        user_stride: a stride given by the user (models without compressors: the period to test).
        n_ctx: the longest input the model takes (None: not known).

    Example:
        >>> backend.cfg.strides, backend.cfg.residue_modulus  # the tiny W4/S4; DeepSeek-V4: ((4, 128), 128)
        ((4,), 4)
    """

    kind: str
    model_class: str
    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_head: int
    d_model: int
    vocab_size: int
    layer_strides: tuple[int | None, ...]
    gate_windows: tuple[int | None, ...]
    gate_branches: tuple[tuple[str, ...], ...]
    user_stride: int | None = None
    n_ctx: int | None = None

    @property
    def strides(self) -> tuple[int, ...]:
        """Distinct strides of the compressed layers (or the user's stride), sorted."""
        found = {s for s in self.layer_strides if s is not None}
        if self.user_stride is not None:
            found.add(self.user_stride)
        return tuple(sorted(found))

    @property
    def residue_modulus(self) -> int | None:
        """The period of the phase effect (`period_of` the strides); None when there are none."""
        return period_of(self.strides)

    @property
    def n_key_value_heads(self) -> int:  # TransformerLens spelling
        return self.n_kv_heads

    @property
    def group(self) -> int:
        """Query heads per KV head."""
        return self.n_heads // self.n_kv_heads


@dataclass(frozen=True, eq=False)
class Read:
    """One activation to read: site ("head", "layer", "gate" or "entry"), layer, branch and, for
    head and layer sites, the positions to keep: None (all), shared ints, or per row a tensor
    [batch] / [batch, n_sites] (then the read is [batch, n_sites, ...])."""

    site: str
    layer: int
    branch: int = 0
    positions: Positions | None = None


class UnitSpace(Protocol):
    """What an edit needs to know about the model it edits (every `Backend` is one): its shape
    card and the shapes of its units."""

    cfg: BackendConfig

    def check_unit(self, unit: Unit) -> Unit: ...
    def heads_of(self, unit: Unit) -> list[int]: ...
    def n_entries(self, layer: int, seq_len: int) -> int: ...
    def gate_valid(self, layer: int, n_entries: int) -> Bool[Tensor, "entry offset"]: ...
    def gate_shape(self, layer: int) -> tuple[int, int]: ...
    def entry_shape(self, layer: int) -> tuple[int, int]: ...
    def compression(self, layer: int, branch: int = 0) -> Compression: ...
    def _gate_bias(self, layer: int, branch: int) -> Tensor | None: ...
