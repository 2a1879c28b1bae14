"""What an intervention acts on: a layer's query heads, grouped by KV head, one by one, or all."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
from jaxtyping import Bool
from torch import Tensor

from phaseinterp.interventions.checks import check_layers

LEVELS = ("kv_head", "head", "layer")


@dataclass(frozen=True)
class HeadUnit:
    """The query heads `heads` of layer `layer`; `index` is the unit's position on its axis
    (KV head, query head, or 0 for the whole layer) and `label` names it as the maps' rows do:
    "L1.KV0", "L0.H3" or "L1" (`SpecializationMap.row_labels`)."""

    layer: int
    index: int
    heads: tuple[int, ...]
    level: str

    @property
    def label(self) -> str:
        return {"kv_head": f"L{self.layer}.KV{self.index}", "head": f"L{self.layer}.H{self.index}"}.get(self.level, f"L{self.layer}")

    def mask(self, n_heads: int, device=None) -> Bool[Tensor, " head"]:
        m = torch.zeros(n_heads, dtype=torch.bool, device=device)
        m[list(self.heads)] = True
        return m


def check_level(level: str) -> str:
    if level not in LEVELS:
        raise ValueError(f"level={level!r} is invalid: allowed one of {list(LEVELS)}")
    return level


def level_size(cfg, level: str) -> int:
    """Units per layer: n_kv_heads, n_heads or 1."""
    return {"kv_head": cfg.n_kv_heads, "head": cfg.n_heads, "layer": 1}[check_level(level)]


def head_units(cfg, level: str = "kv_head", layers: Sequence[int] | None = None) -> list[HeadUnit]:
    """All units of `level` in `layers` (default every layer), layer-major.

    With level "kv_head", unit (l, h) holds the query heads h*g .. h*g + g - 1 (g = n_heads /
    n_kv_heads): the heads that read KV head h.

    Example:
        >>> from phaseinterp import preset
        >>> [u.heads for u in head_units(preset("tiny-w4s4"), "kv_head")]
        [(0, 1, 2, 3), (0, 1, 2, 3)]
    """
    check_level(level)
    layers = check_layers(layers, cfg.n_layers)
    g = cfg.n_heads // cfg.n_kv_heads
    units = []
    for layer in layers:
        if level == "kv_head":
            units += [HeadUnit(layer, h, tuple(range(h * g, (h + 1) * g)), level) for h in range(cfg.n_kv_heads)]
        elif level == "head":
            units += [HeadUnit(layer, h, (h,), level) for h in range(cfg.n_heads)]
        else:
            units.append(HeadUnit(layer, 0, tuple(range(cfg.n_heads)), level))
    return units
