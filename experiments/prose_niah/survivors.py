"""Which needle tokens the evict rule keeps at each residue, and the survivor gap.

Evict under W8/S8 keeps one token of each window, the positions K mod 8 (K = 7 for `evict`, 0 for `evict0`).
With the value's first token at residue r, the needle's kept tokens are those at offsets k from it with
(r + k) = K mod 8: at four of the eight residues one of the value's four digit tokens survives, at the other
four only tokens of the key phrase or the full stop do. An evict unit's survivor gap is its accuracy at the
residues where a value token survives minus its accuracy at the others, per example (one prompt rendered at
every residue), with a cluster-bootstrap interval over examples.

    python -m experiments.prose_niah.run survivors --model smollm2   # the needle's tokens by residue (tokenizer only)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

N_BOOT = 10000


def surviving(kept: int, stride: int, value_len: int, modulus: int) -> list[int]:
    """The residues (of the value's first token) where one of its `value_len` tokens sits at a kept position
    (kept mod stride).

    Example:
        >>> surviving(7, 8, 4, 8), surviving(0, 8, 4, 8)
        ([4, 5, 6, 7], [0, 5, 6, 7])
    """
    return [r for r in range(modulus) if any((r + k - kept) % stride == 0 for k in range(value_len))]


def kept_offset(compression: dict[str, Any]) -> int:
    """The position an evict unit keeps in each window, mod its stride."""
    offset = compression["window"] - 1 if compression.get("offset") is None else compression["offset"]
    return offset % compression["stride"]


def survivor_gap(unit: dict[str, Any], value_len: int, *, n_boot: int = N_BOOT, seed: int = 0
                 ) -> tuple[float, float, float]:
    """(gap, lo, hi) in percentage points: accuracy where a value token survives minus accuracy elsewhere, the
    mean over examples of each example's difference, and the 95% percentile interval of resampled examples.

    Example:
        >>> curve = {"modulus": 8, "correct": [r >= 4 for r in range(8)] * 2, "residue": list(range(8)) * 2,
        ...          "example_id": [0] * 8 + [1] * 8}
        >>> survivor_gap({"curve": curve, "compression": {"window": 8, "stride": 8, "offset": None}}, 4)
        (100.0, 100.0, 100.0)
    """
    c = unit["curve"]
    correct, residue, example = (np.asarray(c[k]) for k in ("correct", "residue", "example_id"))
    inside = np.isin(residue, surviving(kept_offset(unit["compression"]), unit["compression"]["stride"], value_len,
                                        c["modulus"]))
    ids = np.unique(example)
    diff = np.array([correct[(example == e) & inside].mean() - correct[(example == e) & ~inside].mean() for e in ids])
    draws = np.random.default_rng(seed).integers(0, len(diff), size=(n_boot, len(diff)))
    lo, hi = np.percentile(diff[draws].mean(axis=1), [2.5, 97.5])
    return round(100 * float(diff.mean()), 2), round(100 * float(lo), 2), round(100 * float(hi), 2)


def gap_above_zero(value_len: int):
    """A prediction's check (`predictions.Check`): the unit's survivor gap interval lies above 0."""
    def check(acc: np.ndarray, said: str, unit: dict[str, Any]) -> bool:
        return survivor_gap(unit, value_len)[1] > 0

    return check


def survivors_path(results: Path, model: str) -> Path:
    return results / model / "survivors-W8S8.json"


def read_survivors(results: Path, model: str) -> dict[str, Any] | None:
    path = survivors_path(results, model)
    return json.loads(path.read_text()) if path.exists() else None
