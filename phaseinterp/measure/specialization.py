"""`SpecializationMap`: a labeled array of intervention effects (e.g. layer x KV head x residue)
with its provenance, significance (uncorrected intervals, BH-FDR over the map's cells), ranking,
coverage, tables, JSON round trip and a heatmap."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd
from jaxtyping import Bool, Float, Shaped

from phaseinterp.measure.outputs import atomic_path, write_atomic
from phaseinterp.measure.provenance import dumps, jsonable, versions
from phaseinterp.measure.pvalues import bh_adjust, check_q, min_n_boot
from phaseinterp.units import PREFIX, Unit

BY = ("important", "abs", "neg", "pos")
#: Which cells figures, summaries and `coverage` call significant: "fdr", Benjamini-Hochberg at
#: level q across the map's estimable cells (needs `p`); "uncorrected", each cell's interval excludes 0.
SIGNIFICANCE = ("fdr", "uncorrected")
#: The extras of `SpecializationMap.pooled`: each unit's change over all rows (every residue at once),
#: its interval and p-value, shaped like the map without its last axis.
POOLED = ("pooled", "pooled_lo", "pooled_hi", "pooled_p")


def _from_json_array(x: Any) -> np.ndarray:
    a = np.array(x, dtype=object)
    return np.where(a == None, np.nan, a).astype(np.float64)  # noqa: E711


@dataclass(repr=False)
class SpecializationMap:
    """Effects of an intervention on labeled units, e.g. `values[layer, kv_head, residue]`.

    Attributes:
        values: the effect per cell (float array, nan where undefined).
        dims: axis names, e.g. ("layer", "kv_head", "residue"); the last is drawn on x.
        coords: labels of each axis, e.g. {"layer": [0, 1], "kv_head": [0, 1], "residue": [0, 1, 2, 3]}.
        lo, hi: optional interval bounds of the same shape (bootstrap).
        p: optional two-sided bootstrap p-values of "no effect" of the same shape, from the
            replicates that give `lo`/`hi` (nan where a cell cannot be estimated or is masked);
            None for maps without them (files written before they existed, hand-built maps).
        extras: further arrays with the same leading axes (e.g. accuracy after knockout).
        clean: the clean phase curve as a dict (`PhaseCurve.to_dict()`), when there is one.
        quantity: what a value means, e.g. "relative accuracy change (%)".
        direction: -1 if more negative means the unit matters more (knockout), +1 if larger does
            (patching restores), 0 if both signs matter (attribution).
        clip: heatmap color range +-clip (100 for % maps); None = largest |value|.
        meta: model config, seeds, intervention settings, task, library versions.

    Example:
        >>> m = SpecializationMap(np.array([[[-100.0, 0.0], [0.0, -80.0]]]), ("layer", "kv_head", "residue"),
        ...                       {"layer": [0], "kv_head": [0, 1], "residue": [0, 1]}, direction=-1)
        >>> m.coverage(threshold=50)
        {'L0.KV0': [0], 'L0.KV1': [1]}
        >>> m.top(1)[["unit", "residue", "value"]].values.tolist()
        [['L0.KV0', 0, -100.0]]
    """

    values: np.ndarray
    dims: tuple[str, ...]
    coords: dict[str, list]
    lo: np.ndarray | None = None
    hi: np.ndarray | None = None
    extras: dict[str, np.ndarray] = field(default_factory=dict)
    clean: dict[str, Any] | None = None
    quantity: str = ""
    direction: int = -1
    clip: float | int | None = 100.0
    meta: dict[str, Any] = field(default_factory=dict)
    p: np.ndarray | None = None  # last, so that positional (values, dims, coords, lo, hi, extras) calls keep working

    def __post_init__(self) -> None:
        self.values = np.asarray(self.values, dtype=np.float64)
        self.dims = tuple(self.dims)
        if self.values.ndim != len(self.dims):
            raise ValueError(f"values has {self.values.ndim} axes but dims={self.dims} names {len(self.dims)}")
        if set(self.coords) != set(self.dims):
            raise ValueError(f"coords keys {sorted(self.coords)} must equal dims {list(self.dims)}")
        self.coords = {d: list(self.coords[d]) for d in self.dims}
        for d, n in zip(self.dims, self.values.shape):
            if len(self.coords[d]) != n:
                raise ValueError(f"coords[{d!r}] has {len(self.coords[d])} labels for an axis of length {n}")
        for name in ("lo", "hi", "p"):
            a = getattr(self, name)
            if a is not None:
                a = np.asarray(a, dtype=np.float64)
                if a.shape != self.values.shape:
                    raise ValueError(f"{name} has shape {a.shape}, values {self.values.shape}")
                setattr(self, name, a)
        self.extras = {k: np.asarray(v, dtype=np.float64) for k, v in self.extras.items()}
        if self.direction not in (-1, 0, 1):
            raise ValueError(f"direction={self.direction} is invalid: allowed -1, 0 or 1")

    # ---- access ---------------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return self.values.shape

    def index(self, dim: str, label: Any) -> int:
        """Position of `label` on axis `dim`."""
        if dim not in self.coords:
            raise ValueError(f"dim={dim!r} is invalid: allowed {list(self.dims)}")
        try:
            return self.coords[dim].index(label)
        except ValueError:
            raise ValueError(f"{dim}={label!r} is invalid: allowed {self.coords[dim]}") from None

    def sel(self, **labels: Any) -> Float[np.ndarray, "..."]:
        """Values at the given labels, e.g. `m.sel(layer=0, kv_head=1)` -> values over residue."""
        idx = tuple(self.index(d, labels[d]) if d in labels else slice(None) for d in self.dims)
        unknown = set(labels) - set(self.dims)
        if unknown:
            raise ValueError(f"unknown dims {sorted(unknown)}: allowed {list(self.dims)}")
        return self.values[idx]

    def row_labels(self) -> list[str]:
        """One label per row of the 2-D view (all axes but the last) that says what it is:
        "L1.KV0" (layer 1, KV head 0), "L0.H3" (query head 3), "L1" (a whole layer), "L1.k.KV0.o2"
        (branch k, offset 2), "L1.key" (a residual-stream site); other axes read "dim=value"."""
        rows = [[]]
        for d in self.dims[:-1]:
            rows = [r + [_unit_part(d, c)] for r in rows for c in self.coords[d]]
        return [".".join(p for p in r if p) for r in rows]

    def units(self) -> list[Unit]:
        """The `Unit` of each row, for maps over (layer, kv_head | head | heads, ...): their names
        are `row_labels()`; ValueError for maps whose rows are not units (branches, offsets, sites).

        Example:
            >>> m = SpecializationMap(np.zeros((2, 1, 4)), ("layer", "kv_head", "residue"),
            ...                       {"layer": [0, 1], "kv_head": [0], "residue": [0, 1, 2, 3]})
            >>> [u.name for u in m.units()] == m.row_labels() == ["L0.KV0", "L1.KV0"]
            True
        """
        rows = self.dims[:-1]
        if rows not in (("layer",), ("layer", "kv_head"), ("layer", "head"), ("layer", "heads")):
            raise ValueError(f"rows over {list(rows)} are not units: allowed maps over ['layer'] and "
                             "['layer', 'kv_head' | 'head' | 'heads']")
        if len(rows) == 1 or rows[1] == "heads":
            return [Unit("layer", int(l)) for l in self.coords["layer"] for _ in self.coords.get("heads", [None])]
        return [Unit(rows[1], int(l), int(i)) for l in self.coords["layer"] for i in self.coords[rows[1]]]

    def as_2d(self, values: Shaped[np.ndarray, "..."] | None = None) -> Shaped[np.ndarray, "row col"]:
        """Rows = all axes but the last flattened (in `row_labels` order), columns = the last axis."""
        v = self.values if values is None else values
        return v.reshape(-1, self.values.shape[-1])

    def _importance(self, by: str) -> np.ndarray:
        if by not in BY:
            raise ValueError(f"by={by!r} is invalid: allowed one of {list(BY)}")
        if by == "important":
            by = {-1: "neg", 1: "pos", 0: "abs"}[self.direction]
        return {"abs": np.abs(self.values), "neg": -self.values, "pos": self.values}[by]

    @property
    def significant(self) -> Bool[np.ndarray, "..."] | None:
        """Cells whose interval excludes 0 (None without intervals); a cell without an interval
        (nan bounds) is not significant."""
        if self.lo is None or self.hi is None:
            return None
        with np.errstate(invalid="ignore"):
            return (self.hi < 0) | (self.lo > 0)

    @property
    def fdr_family(self) -> Bool[np.ndarray, "..."] | None:
        """The cells BH corrects over (None without p-values): every estimable cell, i.e. a finite
        value and p-value and not masked; nan and masked cells are out of the family."""
        if self.p is None:
            return None
        return np.isfinite(self.p) & np.isfinite(self.values) & ~self.masked

    @property
    def p_fdr(self) -> Float[np.ndarray, "..."] | None:
        """Benjamini-Hochberg adjusted p-values over `fdr_family` (nan outside it; None without p)."""
        family = self.fdr_family
        return None if family is None else bh_adjust(self.p, family)

    def significant_fdr(self, q: float = 0.05) -> Bool[np.ndarray, "..."] | None:
        """Cells significant with the false discovery rate controlled at `q` across the map
        (Benjamini-Hochberg over `fdr_family`: adjusted p <= q); None without p-values. Cells out
        of the family are never significant. `significant` stays the uncorrected call.

        Example:
            >>> m = SpecializationMap(np.array([[-9.0, -8.0, -1.0, 0.0]]), ("layer", "residue"),
            ...                       {"layer": [0], "residue": [0, 1, 2, 3]}, p=np.array([[0.01, 0.04, 0.03, 0.2]]))
            >>> m.significant_fdr(0.05).tolist()  # adjusted: 0.04, 0.053, 0.053, 0.2
            [[True, False, False, False]]
        """
        check_q(q)
        adjusted = self.p_fdr
        if adjusted is None:
            return None
        with np.errstate(invalid="ignore"):
            return adjusted <= q

    def pooled(self, q: float = 0.05) -> pd.DataFrame:
        """One row per unit (`row_labels` order): its change over all residues at once (`value`, in the
        map's quantity; a normalized patching map's in pp, the accuracy change its extras test), the
        interval (`lo`, `hi`) and p-value of the same paired cluster bootstrap, `p_fdr` (Benjamini-Hochberg
        across units) and `significant_fdr` (p_fdr <= q). It asks whether a unit matters at all, with one
        test per unit: a unit that lowers accuracy a little at every residue can pass here and fail BH over
        the map's cells.

        Raises:
            ValueError: the map has no pooled test (written before it existed, or built by hand).

        Example:
            >>> from phaseinterp.interventions import knockout_map
            >>> m = knockout_map(model, batch, calib, n_boot=200, progress=False)
            >>> list(m.pooled().columns)  # m.pooled().sort_values("p"): the units that matter, residues pooled
            ['unit', 'value', 'lo', 'hi', 'p', 'p_fdr', 'significant_fdr']
        """
        check_q(q)
        missing = [k for k in POOLED if k not in self.extras]
        if missing:
            raise ValueError(f"this map has no pooled test (extras lack {missing}): allowed maps that knockout_map, "
                             "activation_patching or branch_knockout built with it; run the map again")
        value, lo, hi, p = (self.extras[k].reshape(-1) for k in POOLED)
        adjusted = bh_adjust(p)
        with np.errstate(invalid="ignore"):
            df = pd.DataFrame({"unit": self.row_labels(), "value": value, "lo": lo, "hi": hi, "p": p, "p_fdr": adjusted,
                               "significant_fdr": adjusted <= q})
        df.attrs["quantity"] = "absolute accuracy change (pp)" if "change_pp" in self.extras else self.quantity
        return df

    def significance(self, which: str = "fdr", q: float = 0.05) -> tuple[Bool[np.ndarray, "..."] | None, str]:
        """The cells a figure or summary calls significant, and the name of that rule:
        which="fdr" -> `significant_fdr(q)`, "BH-FDR q=0.05"; "uncorrected" -> `significant`,
        "uncorrected 95% interval" (the map's `meta["confidence"]`). A map without p-values asked
        for "fdr" answers with its uncorrected cells and says so in the name; (None, "") without
        intervals."""
        if which not in SIGNIFICANCE:
            raise ValueError(f"which={which!r} is invalid: allowed one of {list(SIGNIFICANCE)}")
        check_q(q)
        if self.significant is None:
            return None, ""
        uncorrected = f"uncorrected {float(self.meta.get('confidence', 0.95)):.0%} interval"
        if which == "uncorrected":
            return self.significant, uncorrected
        if self.p is None:
            return self.significant, f"{uncorrected} (no p-values in this map for BH-FDR)"
        return self.significant_fdr(q), f"BH-FDR q={q:g}"

    def significance_summary(self, which: str = "fdr", q: float = 0.05) -> dict[str, Any]:
        """What summary.json says about significance: the rule used, the cell counts under both rules
        (None where the map lacks intervals or p-values), and a note when the bootstrap is too small for
        BH to pass a lone effect (its p-value floor, 2 / (n_boot + 1), is above q / cells), and the
        cells with a value but no interval (`not_estimable`: one example at their residue)."""
        sig, fdr = self.significant, self.significant_fdr(q)
        cells = int((np.isfinite(self.values) if fdr is None else self.fdr_family).sum())
        out = {"which": which, "q": q, "rule": self.significance(which, q)[1], "cells": cells,
               "uncorrected": None if sig is None else int(sig.sum()), "fdr": None if fdr is None else int(fdr.sum())}
        n_boot, need = self.meta.get("n_boot"), min_n_boot(max(cells, 1), q)
        if which == "fdr" and fdr is not None and n_boot is not None and n_boot < need:
            out["note"] = (f"with --n-boot {n_boot} the smallest bootstrap p-value is 2/(n_boot+1) = {2 / (n_boot + 1):.3g}, "
                           f"above q/cells = {q / max(cells, 1):.3g}: a lone effect cannot pass BH-FDR (several strong ones "
                           f"can); --n-boot {need} or more lets one")
        if self.p is not None:
            lone = np.isfinite(self.values) & ~np.isfinite(self.p) & ~self.masked
            out["not_estimable"] = int(lone.sum())
            if lone.any():
                out["note_estimable"] = (f"{int(lone.sum())} cells have a value but no interval or p-value: their residue's rows "
                                         "come from one example, whose redraws cannot show variability (--n-per-residue 2 or more)")
        return out

    def _significant_cells(self, significant: bool | str, q: float) -> Bool[np.ndarray, "..."] | None:
        """`coverage`'s filter: False -> none; True or "uncorrected" -> the interval excludes 0 (no
        filter for a map without intervals, as before); "fdr" -> BH at q, which needs p-values."""
        if not isinstance(significant, str):  # the former bool flag: True = the interval excludes 0
            return self.significant if significant else None
        if significant == "uncorrected":
            return self.significant
        if significant == "fdr":
            if self.p is None:
                raise ValueError("significant='fdr' needs the map's p-values and this map has none (built or saved "
                                 "before they existed): recompute it, or use significant='uncorrected'")
            return self.significant_fdr(q)
        raise ValueError(f"significant={significant!r} is invalid: allowed False, True (= 'uncorrected'), "
                         "'uncorrected' or 'fdr'")

    @property
    def masked(self) -> Bool[np.ndarray, "..."]:
        """Cells left out on purpose (nan with a reason in `meta["masked"]`), e.g. relative changes
        where the clean accuracy is not reliably above chance."""
        m = self.extras.get("masked")
        return np.zeros(self.shape, dtype=bool) if m is None else np.asarray(m, dtype=bool)

    # ---- summaries ------------------------------------------------------------------------------
    def top(self, k: int = 10, by: str = "important") -> pd.DataFrame:
        """The k cells that matter most: by="important" follows `direction` (most negative for
        knockout maps), or "abs", "neg", "pos". NaN cells are never chosen."""
        if k < 1:
            raise ValueError(f"k={k} out of range: must be >= 1")
        score = np.nan_to_num(self._importance(by), nan=-np.inf).reshape(-1)
        order = np.argsort(-score, kind="stable")
        order = [i for i in order if np.isfinite(score[i])][:k]
        return self.to_pandas().iloc[order].reset_index(drop=True)

    def coverage(self, threshold: float | int = 50.0, *, dim: str | None = None, significant: bool | str = False,
                 q: float = 0.05) -> dict[str, list]:
        """Per row unit (e.g. "L1.KV0"), the labels of `dim` (default the last axis, the
        residue) where the unit matters: value <= -threshold (direction -1), >= threshold (+1),
        or |value| >= threshold (0). `significant` also asks the cell to be significant:
        "fdr" (BH across the map's cells at level `q`, needs p-values), "uncorrected" or True
        (its interval excludes 0), False (no test)."""
        sig = self._significant_cells(significant, q)
        if self.direction == -1:
            hit = self.values <= -threshold
        elif self.direction == 1:
            hit = self.values >= threshold
        else:
            hit = np.abs(self.values) >= threshold
        if sig is not None:
            hit &= sig
        dim = self.dims[-1] if dim is None else dim
        if dim not in self.dims:
            raise ValueError(f"dim={dim!r} is invalid: allowed {list(self.dims)}")
        view = self
        if dim != self.dims[-1]:  # rows = the other axes, in order; `dim` becomes the last axis
            axis = self.dims.index(dim)
            hit = np.moveaxis(hit, axis, -1)
            view = SpecializationMap(np.moveaxis(self.values, axis, -1), tuple(d for d in self.dims if d != dim) + (dim,),
                                     self.coords)
        labels = self.coords[dim]
        return {row: [labels[j] for j in np.flatnonzero(h)] for row, h in zip(view.row_labels(), view.as_2d(hit))}

    def uncovered(self, threshold: float | int = 50.0, *, significant: bool | str = False, q: float = 0.05) -> list:
        """Labels of the last axis (residues) that no unit covers at `threshold` (see `coverage`)."""
        cov = self.coverage(threshold, significant=significant, q=q)
        hit = {r for rs in cov.values() for r in rs}
        return [r for r in self.coords[self.dims[-1]] if r not in hit]

    def to_pandas(self, q: float = 0.05) -> pd.DataFrame:
        """Long table: one row per cell with a column per axis, `unit` (row label), `value`,
        `lo`/`hi` and `significant` (the interval excludes 0, uncorrected) when present, `p`,
        `p_fdr` (BH-adjusted) and `significant_fdr` (p_fdr <= q) when the map has p-values, and one
        column per extra array of the same shape (e.g. `masked`)."""
        grids = np.meshgrid(*[np.arange(n) for n in self.shape], indexing="ij")
        df = pd.DataFrame({d: np.asarray(self.coords[d], dtype=object)[g.reshape(-1)] for d, g in zip(self.dims, grids)})
        rows = np.repeat(self.row_labels(), self.shape[-1])
        df.insert(0, "unit", rows)
        df["value"] = self.values.reshape(-1)
        if self.lo is not None:
            df["lo"], df["hi"] = self.lo.reshape(-1), self.hi.reshape(-1)
            df["significant"] = self.significant.reshape(-1)
        if self.p is not None:
            df["p"], df["p_fdr"] = self.p.reshape(-1), self.p_fdr.reshape(-1)
            df["significant_fdr"] = self.significant_fdr(q).reshape(-1)
        for k, v in self.extras.items():
            if v.shape == self.shape:
                df[k] = v.reshape(-1)
        for d in self.dims:
            if all(isinstance(c, (int, np.integer)) for c in self.coords[d]):
                df[d] = df[d].astype(np.int64)
        return df

    # ---- serialization --------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict (nan -> None)."""
        return jsonable({"kind": "SpecializationMap", "dims": list(self.dims), "coords": self.coords,
                         "values": self.values, "lo": self.lo, "hi": self.hi, "p": self.p, "extras": self.extras,
                         "clean": self.clean, "quantity": self.quantity, "direction": self.direction,
                         "clip": self.clip, "meta": {**self.meta, "versions": self.meta.get("versions", versions())}})

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SpecializationMap:
        if d.get("kind") != "SpecializationMap":
            raise ValueError(f"not a SpecializationMap dict (kind={d.get('kind')!r})")
        return cls(values=_from_json_array(d["values"]), dims=tuple(d["dims"]), coords=d["coords"],
                   lo=None if d["lo"] is None else _from_json_array(d["lo"]),
                   hi=None if d["hi"] is None else _from_json_array(d["hi"]),
                   p=None if d.get("p") is None else _from_json_array(d["p"]),  # files before p-values: None
                   extras={k: _from_json_array(v) for k, v in d["extras"].items()}, clean=d["clean"],
                   quantity=d["quantity"], direction=d["direction"], clip=d["clip"], meta=d["meta"])

    def save(self, path: str | Path) -> Path:
        """Write JSON (`.json`) or the long table (`.csv`); returns the path.

        Example:
            >>> from phaseinterp.interventions import knockout_map
            >>> m = knockout_map(model, batch, calib, n_boot=100)
            >>> m.save("out/knockout.json")
            PosixPath('out/knockout.json')
            >>> np.array_equal(SpecializationMap.load("out/knockout.json").values, m.values, equal_nan=True)
            True
        """
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.suffix == ".csv":
            with atomic_path(path) as tmp:
                self.to_pandas().to_csv(tmp, index=False)
        elif path.suffix == ".json":
            write_atomic(path, dumps(self.to_dict()))
        else:
            raise ValueError(f"path suffix {path.suffix!r} is invalid: allowed '.json' or '.csv'")
        return path

    @classmethod
    def load(cls, path: str | Path) -> SpecializationMap:
        """Read a map written by `save(... .json)`."""
        return cls.from_dict(json.loads(Path(path).read_text()))

    # ---- display (figures: `phaseinterp.plot.map_figure`) ------------------------------------------
    def __repr__(self) -> str:
        what = self.meta.get("intervention", {}).get("kind", "") if isinstance(self.meta.get("intervention"), dict) else ""
        shape = " x ".join(f"{d}[{n}]" for d, n in zip(self.dims, self.shape))
        finite = self.values[np.isfinite(self.values)]
        rng = f", range [{finite.min():.3g}, {finite.max():.3g}]" if finite.size else ""
        return f"SpecializationMap({what + ': ' if what else ''}{shape}, {self.quantity or 'value'}{rng}{self._sig_counts()})"

    def __str__(self) -> str:
        """`print(smap)`: the repr, then where each unit matters (`coverage(50)`, significant cells only:
        BH-FDR when the map has p-values, else intervals that exclude 0) with its mean change there, e.g.
        `L1.KV0: -97 pp at residues 1, 2, 5, 6 (significant at BH-FDR q=0.05)`. Maps in points or percent
        only (an attribution map's logit differences have no such threshold)."""
        unit = next((u for tag, u in (("(pp)", " pp"), ("(%)", "%")) if self.quantity.endswith(tag)), None)
        if unit is None:
            return repr(self)
        which: bool | str = "fdr" if self.p is not None else "uncorrected" if self.significant is not None else False
        why = {"fdr": "significant at BH-FDR q=0.05", "uncorrected": "intervals exclude 0", False: "no test"}[which]
        threshold, axis = 50, self.dims[-1]
        rows, labels = dict(zip(self.row_labels(), self.as_2d())), list(self.coords[axis])
        lines = [repr(self)]
        for label, hit in self.coverage(threshold, significant=which).items():
            if hit:
                mean = float(np.mean([rows[label][labels.index(c)] for c in hit]))
                lines.append(f"  {label}: {mean:+.0f}{unit} at {axis}s {', '.join(map(str, hit))} ({why})")
        if len(lines) == 1:
            lines.append(f"  no unit reaches {threshold}{unit} at any {axis} ({why})")
        return "\n".join(lines + self._pooled_lines())

    def _pooled_lines(self, q: float = 0.05) -> list[str]:
        """`__str__`'s lines for the units significant with residues pooled (`pooled`), if the map has them."""
        if any(k not in self.extras for k in POOLED):
            return []
        df = self.pooled(q)
        family = f"BH-FDR q={q:g} over {int(np.isfinite(df['p']).sum())} units"
        hits = df[df["significant_fdr"]].sort_values("p")
        if hits.empty:
            return [f"  pooled over {self.dims[-1]}s: no unit significant ({family})"]
        unit = " pp" if df.attrs["quantity"].endswith("(pp)") else "%"
        return [f"  pooled over {self.dims[-1]}s ({family}):"] + [
            f"    {r.unit}: {r.value:+.0f}{unit} [{r.lo:+.0f}, {r.hi:+.0f}], p = {r.p:.2g}" for r in hits.itertuples()]

    def _sig_counts(self, q: float = 0.05) -> str:
        """", significant: 7 of 128 uncorrected, 3 at BH-FDR q=0.05" (what repr and Jupyter show)."""
        if self.significant is None:
            return ""
        n = int(np.isfinite(self.values).sum() if self.p is None else self.fdr_family.sum())
        out = f", significant: {int(self.significant.sum())} of {n} uncorrected"
        return out + ("" if self.p is None else f", {int(self.significant_fdr(q).sum())} at BH-FDR q={q:g}")

    def _repr_html_(self) -> str:
        """Jupyter: the heatmap (offline; plotly imported only here), then this repr."""
        from phaseinterp.plot.display import map_html  # the one upward import: tests/test_architecture.py

        return map_html(self)


_PREFIX = {**{k: PREFIX[k] for k in ("layer", "kv_head", "head")}, "offset": "o"}  # units: `Unit.name`


def _unit_part(dim: str, label: Any) -> str:
    if dim == "heads":  # the whole layer: its label is "all"
        return ""
    if dim in _PREFIX:
        return f"{_PREFIX[dim]}{label}"
    return str(label) if dim in ("branch", "position") else f"{dim}={label}"


def stack_maps(maps: Sequence[SpecializationMap], dim: str, labels: Sequence[Any]) -> SpecializationMap:
    """Stack maps with equal axes along a new leading axis `dim` (e.g. one map per checkpoint)."""
    if not maps or len(maps) != len(labels):
        raise ValueError(f"need one label per map: got {len(maps)} maps and {len(labels)} labels")
    first = maps[0]
    for m in maps[1:]:
        if m.dims != first.dims or m.coords != first.coords:
            raise ValueError("maps to stack must have the same dims and coords")
    stack = lambda xs: None if any(x is None for x in xs) else np.stack(xs)  # noqa: E731
    return SpecializationMap(np.stack([m.values for m in maps]), (dim, *first.dims), {dim: list(labels), **first.coords},
                             stack([m.lo for m in maps]), stack([m.hi for m in maps]), quantity=first.quantity,
                             direction=first.direction, clip=first.clip, meta={"stacked": [m.meta for m in maps]},
                             p=stack([m.p for m in maps]))  # one BH family: every stacked map's cells
