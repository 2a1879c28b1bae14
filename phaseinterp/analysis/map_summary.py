"""A specialization map in one row per unit: what the knockout verb and the report tabulate."""

from __future__ import annotations

from typing import Any

import numpy as np


def unit_summary(smap) -> list[dict[str, Any]]:
    """Per unit: mean, min and max change over residues, their range and the worst residue."""
    out = []
    for label, row in zip(smap.row_labels(), smap.as_2d()):
        ok = np.isfinite(row)
        if not ok.any():
            out.append({"unit": label, "mean": None})
            continue
        out.append({"unit": label, "mean": float(row[ok].mean()), "min": float(row[ok].min()),
                    "max": float(row[ok].max()), "range": float(row[ok].max() - row[ok].min()),
                    "worst_residue": int(np.asarray(smap.coords[smap.dims[-1]])[ok][row[ok].argmin()])})
    return out


__all__ = ["unit_summary"]
