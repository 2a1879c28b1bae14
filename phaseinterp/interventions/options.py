"""The settings of the map entry points (`knockout_map`, `activation_patching`, `gate_attribution`),
one frozen object each, shared by the API and the command line.

`RunOptions` holds what all three take (layers, rows per forward, the progress bar); `MapOptions`
adds what the two bootstrapped maps share (method, bootstrap, change, journal); each entry point
has its own subclass with its own fields and defaults. An entry point takes `options=` and/or the
same names as keywords: keywords override the options object, so `knockout_map(m, b, c, n_boot=100)`
and `knockout_map(m, b, c, options=KnockoutOptions(n_boot=100))` run the same map. The values are
checked by the entry points (after the model is known), in the order they always were."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence, TypeVar, Union

if TYPE_CHECKING:
    from torch import Tensor

#: Default floor of `knockout_map(change="relative")`: the lower bound of the clean accuracy's interval
#: below which a residue's relative change is masked (record lookup's chance is 0.1-0.25).
RELIABLE_FLOOR = 0.25

O = TypeVar("O", bound="RunOptions")


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """What every map entry point takes.

    Attributes:
        layers: layers to scan (default all; compressed layers only where the units need them).
        max_rows: rows per batched computation.
        progress: a progress bar over the units (`phaseinterp.progress`); False: silent.
    """

    layers: Sequence[int] | None = None
    max_rows: int = 2048
    progress: bool = True

    @classmethod
    def build(cls: type[O], options: O | None = None, **overrides: Any) -> O:
        """`options` (default: all defaults) with the given fields replaced; TypeError naming an
        unknown field and the allowed ones, or an options object of another entry point."""
        if options is None:
            options = cls()
        elif not isinstance(options, cls):
            raise TypeError(f"options={type(options).__name__}(...) is invalid here: allowed a {cls.__name__}")
        unknown = sorted(set(overrides) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise TypeError(f"options {unknown} are invalid: allowed {sorted(f.name for f in dataclasses.fields(cls))}")
        return dataclasses.replace(options, **overrides) if overrides else options


@dataclass(frozen=True, kw_only=True)
class MapOptions(RunOptions):
    """What the bootstrapped maps (`knockout_map`, `activation_patching`) share, beyond `RunOptions`.

    Attributes:
        method: "auto", "incremental" (the final-position path) or "hooks" (full forwards).
        change: "absolute" (percentage points, default) or the entry point's other measure.
        n_boot, confidence, seed: the paired logical-example cluster bootstrap; `seed` also drives
            resampling.
        resume: a journal folder (`measure.journal`) that records each finished chunk of units and
            continues a killed run; the map is the same bit for bit.
    """

    method: str = "auto"
    change: str = "absolute"
    n_boot: int = 2000
    confidence: float = 0.95
    seed: int = 0
    resume: str | Path | None = None


@dataclass(frozen=True, kw_only=True)
class KnockoutOptions(MapOptions):
    """`knockout_map`'s settings (see its docstring): the unit `level`, the `replacement` and where
    (`per_residue`, `positions`), the map's `label`, and the `floor` of `change="relative"`."""

    level: str = "kv_head"
    replacement: str = "mean"
    per_residue: bool = False
    positions: Any = "final"
    label: str = ""
    floor: float = RELIABLE_FLOOR


@dataclass(frozen=True, kw_only=True)
class PatchingOptions(MapOptions):
    """`activation_patching`'s settings (see its docstring): the `unit` ("z", "resid", "entries",
    "gates"), its `level` and `positions`, and `rel_min` of the normalized metric."""

    unit: str = "z"
    level: str = "head"
    positions: Any = "final"
    rel_min: float | int = 0.1


@dataclass(frozen=True, kw_only=True)
class AttributionOptions(RunOptions):
    """`gate_attribution`'s settings (see its docstring): the `override` reference (and its
    `offset`), the `mode`, the `target` and whether to `validate` against the exact interventions."""

    override: Union[str, "Tensor", None] = None
    offset: int | None = None
    mode: str = "denoise"
    target: str = "weights"
    validate: bool = True


__all__ = ["AttributionOptions", "KnockoutOptions", "MapOptions", "PatchingOptions", "RELIABLE_FLOOR", "RunOptions"]
