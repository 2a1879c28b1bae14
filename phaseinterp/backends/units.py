"""A backend's shape card (`BackendConfig`), its reads (`Read`) and what an edit asks of it
(`UnitSpace`). The units themselves are `phaseinterp.units.Unit` ("L3", "L3.KV0", "L3.H5",
"L3.G0"), the same type every intervention, map and the CLI use; re-exported here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Union

from jaxtyping import Bool
from torch import Tensor

from phaseinterp.backends.compression import Compression
from phaseinterp.config import period_of
from phaseinterp.units import Unit

#: Positions to read or edit: one int, shared ints, or per row a tensor [batch] / [batch, n_sites].
Positions = Union[int, tuple[int, ...], Tensor]


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
