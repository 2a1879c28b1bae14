"""Units: the one name for what an experiment reads, knocks out or patches, on every model.

    Unit("layer", 3)        "L3"      all query heads (the attention output) of layer 3
    Unit("kv_head", 3, 0)   "L3.KV0"  every query head that reads KV head 0 of layer 3
    Unit("head", 3, 5)      "L3.H5"   query head 5 of layer 3
    Unit("gate", 3, 0)      "L3.G0"   compressor branch 0 of layer 3 (key or tied K/V branch;
                                      branch 1 is the value branch of separate-K/V layers)

A unit's `name` is the row label of the maps (`SpecializationMap.row_labels`), of the result files
and of the backends' messages; `Unit.parse` reads it back, in any case, and also reads the older
spellings "L3.kv0", "L3.h5" and "L3.gate0". Interventions pick their units with `head_units(cfg,
level)`; a unit knows the query heads it covers on a given config (`unit.heads(cfg)`), so the same
`Unit` serves our model, every backend and the CLI.

This module imports nothing heavy (torch only inside `Unit.mask`): the CLI reads `LEVELS` from it
while printing help.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    from jaxtyping import Bool
    from torch import Tensor

UNIT_KINDS = ("layer", "kv_head", "head", "gate")
#: The unit kinds that cover query heads, as interventions name them (`knockout_map(level=...)`).
LEVELS = ("kv_head", "head", "layer")
#: Prefix of each kind's part of a name; the maps label their axes with the same letters.
PREFIX = {"layer": "L", "kv_head": "KV", "head": "H", "gate": "G"}
_KIND_OF = {"KV": "kv_head", "H": "head", "G": "gate", "GATE": "gate"}
_NAME = re.compile(r"^L(\d+)(?:\.(KV|H|GATE|G)(\d+))?$", re.IGNORECASE)


@dataclass(frozen=True, order=True)
class Unit:
    """One named unit. `index` is the KV head, query head or gate branch; None for a layer.

    Example:
        >>> Unit("kv_head", 2, 0).name, Unit.parse("L2.h3"), Unit.parse("l2.gate1").name
        ('L2.KV0', Unit(kind='head', layer=2, index=3), 'L2.G1')
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
        """The unit's label: "L3", "L3.KV0", "L3.H5", "L3.G0"."""
        return f"L{self.layer}" if self.kind == "layer" else f"L{self.layer}.{PREFIX[self.kind]}{self.index}"

    @classmethod
    def parse(cls, name: str) -> Unit:
        """The unit called `name` (inverse of `Unit.name`; any case, and the older "L3.kv0",
        "L3.h5", "L3.gate0" too)."""
        m = _NAME.match(name) if isinstance(name, str) else None
        if not m:
            raise ValueError(f"unit name {name!r} is invalid: allowed 'L<layer>', 'L<layer>.KV<k>', 'L<layer>.H<h>' "
                             "or 'L<layer>.G<b>' (any case; 'L<layer>.gate<b>' too)")
        layer, prefix, index = m.groups()
        if prefix is None:
            return cls("layer", int(layer))
        return cls(_KIND_OF[prefix.upper()], int(layer), int(index))

    def check(self, cfg: Any) -> Unit:
        """Return the unit if a model of config `cfg` (`n_layers`, `n_heads`, `n_kv_heads`) has its
        layer and its head or KV head, else raise ValueError with the allowed range (gate branches
        are checked by the backend, which knows them: `Backend.check_unit`)."""
        if not 0 <= self.layer < cfg.n_layers:
            raise ValueError(f"{self.name}: layer={self.layer} is out of range: allowed 0..{cfg.n_layers - 1}")
        limit = {"kv_head": cfg.n_kv_heads, "head": cfg.n_heads}.get(self.kind)
        if limit is not None and not self.index < limit:
            raise ValueError(f"{self.name}: {self.kind} index={self.index} is out of range: allowed 0..{limit - 1}")
        return self

    def heads(self, cfg: Any) -> tuple[int, ...]:
        """The query heads the unit covers on a model of config `cfg`: head h reads KV head
        h // (n_heads // n_kv_heads); a layer covers all its heads; a gate has none (ValueError).

        Example:
            >>> from phaseinterp import preset
            >>> cfg = preset("tiny-w4s4")  # 4 query heads, 1 KV head
            >>> Unit("kv_head", 1, 0).heads(cfg), Unit("head", 1, 2).heads(cfg)
            ((0, 1, 2, 3), (2,))
        """
        if self.kind == "gate":
            raise ValueError(f"{self.name}: a gate unit has no query heads")
        self.check(cfg)
        if self.kind == "head":
            return (self.index,)
        if self.kind == "kv_head":
            g = cfg.n_heads // cfg.n_kv_heads
            return tuple(range(self.index * g, (self.index + 1) * g))
        return tuple(range(cfg.n_heads))

    def mask(self, cfg: Any, device: Any = None) -> Bool[Tensor, " head"]:
        """`heads(cfg)` as a boolean mask over the layer's query heads, [n_heads]."""
        import torch

        m = torch.zeros(cfg.n_heads, dtype=torch.bool, device=device)
        m[list(self.heads(cfg))] = True
        return m

    def __str__(self) -> str:
        return self.name


def check_level(level: str) -> str:
    """`level` if it is one of `LEVELS`, else ValueError."""
    if level not in LEVELS:
        raise ValueError(f"level={level!r} is invalid: allowed one of {list(LEVELS)}")
    return level


def check_layers(layers: Sequence[int] | None, n_layers: int) -> list[int]:
    """`layers` as a list of ints in [0, n_layers) (None: all layers)."""
    out = list(range(n_layers)) if layers is None else [int(x) for x in layers]
    for layer in out:
        if not 0 <= layer < n_layers:
            raise ValueError(f"layer={layer} is invalid: allowed 0..{n_layers - 1}")
    return out


def level_size(cfg: Any, level: str) -> int:
    """Units per layer: n_kv_heads, n_heads or 1."""
    return {"kv_head": cfg.n_kv_heads, "head": cfg.n_heads, "layer": 1}[check_level(level)]


def head_units(cfg: Any, level: str = "kv_head", layers: Sequence[int] | None = None) -> list[Unit]:
    """All units of `level` ("kv_head", "head" or "layer") in `layers` (default every layer),
    layer-major: the rows of a map at that level, in order.

    Example:
        >>> from phaseinterp import preset
        >>> cfg = preset("tiny-w4s4")
        >>> [u.name for u in head_units(cfg, "kv_head")], [u.heads(cfg) for u in head_units(cfg, "kv_head")]
        (['L0.KV0', 'L1.KV0'], [(0, 1, 2, 3), (0, 1, 2, 3)])
    """
    check_level(level)
    return [Unit(level, layer) if level == "layer" else Unit(level, layer, i)
            for layer in check_layers(layers, cfg.n_layers) for i in range(level_size(cfg, level))]


__all__ = ["LEVELS", "PREFIX", "UNIT_KINDS", "Unit", "check_layers", "check_level", "head_units", "level_size"]
