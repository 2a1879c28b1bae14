"""Replacement activations for knockouts: head outputs of a disjoint calibration set."""

from __future__ import annotations

import hashlib
import weakref

from dataclasses import dataclass, field
from typing import Any, Sequence, Union

import numpy as np
import torch
from jaxtyping import Float, Int
from torch import Tensor

from phaseinterp.backends.prompts import units_per_forward
from phaseinterp.interventions.checks import check_at_least_one, check_position
from phaseinterp.interventions.runner import runnable
from phaseinterp.tasks import PhaseBatch

REPLACEMENTS = ("mean", "zero", "resample")
Positions = Union[str, Sequence[int]]
#: `calibration=SELF`: each evaluated row's replacement is the mean over the other logical examples
#: of the evaluated batch (no calibration forward).
SELF = "self"


def check_positions(positions: Positions, seq_len: int) -> str | tuple[int, ...]:
    """"final" (each row's query position), "all", or absolute positions in [0, seq_len)."""
    if isinstance(positions, str):
        if positions not in ("final", "all"):
            raise ValueError(f"positions={positions!r} is invalid: allowed 'final', 'all' or a list of ints")
        return positions
    pos = tuple(int(p) for p in positions)
    if not pos:
        raise ValueError("positions is empty: give 'final', 'all' or at least one position")
    for p in pos:
        check_position(p, seq_len)
    return pos


def site_positions(positions: str | tuple[int, ...], query_pos: Int[Tensor, " batch"], seq_len: int
                   ) -> Int[Tensor, "batch site"]:
    """Absolute positions of every site of every row: [batch, n_sites]."""
    B = len(query_pos)
    if positions == "final":
        return query_pos[:, None]
    if positions == "all":
        return torch.arange(seq_len, device=query_pos.device).expand(B, seq_len)
    return torch.tensor(positions, device=query_pos.device).expand(B, len(positions))


@dataclass(frozen=True)
class Calibration:
    """Head outputs `z` of a calibration batch at the knockout sites, for every layer.

    Attributes:
        z: [row, layer, site, head, d_head] (site: the final position, or the chosen positions).
        residue: residue of each calibration row. modulus: R.
        positions: "final", "all" or the absolute positions the sites stand for.
        meta: the calibration batch's task metadata (split, seed, config).
        example_id: set when the calibration rows *are* the evaluated rows (`calibration="self"`):
            then "mean" gives each row the mean over the other logical examples
            (`mean_over_other_examples`), never its own activations.
    """

    z: Float[Tensor, "row layer site head d_head"]
    residue: Int[Tensor, " row"]
    modulus: int
    positions: Any
    meta: dict[str, Any] = field(default_factory=dict)
    example_id: Int[Tensor, " row"] | None = None

    def mean(self) -> Float[Tensor, "layer site head d_head"]:
        return self.z.mean(0)

    def mean_by_residue(self) -> Float[Tensor, "modulus layer site head d_head"]:
        """Mean per calibration residue; raises if a residue has no calibration row."""
        counts = torch.bincount(self.residue, minlength=self.modulus)
        if (counts == 0).any():
            missing = (counts == 0).nonzero()[:, 0].tolist()
            raise ValueError(f"calibration has no rows at residues {missing}; per-residue replacement needs all "
                             f"residues 0..{self.modulus - 1}")
        sums = torch.zeros(self.modulus, *self.z.shape[1:], dtype=self.z.dtype, device=self.z.device)
        sums.index_add_(0, self.residue.to(self.z.device), self.z)
        return sums / counts.to(self.z.device).view(-1, *[1] * (self.z.ndim - 1))

    def replacement(self, kind: str, layer: int, residue: Int[Tensor, " batch"], *, per_residue: bool = False,
                    seed: int = 0) -> Float[Tensor, "batch site head d_head"]:
        """Replacement z of `layer` for rows with the given residues.

        kind "mean": calibration mean (per residue with `per_residue`); "zero": zeros;
        "resample": the activation of a random calibration row (of the same residue with
        `per_residue`), drawn with `seed`, the same draw for every layer and unit.
        """
        if kind not in REPLACEMENTS:
            raise ValueError(f"replacement={kind!r} is invalid: allowed one of {list(REPLACEMENTS)}")
        if not 0 <= layer < self.z.shape[1]:
            raise ValueError(f"layer={layer} is invalid: allowed 0..{self.z.shape[1] - 1}")
        B = len(residue)
        if kind == "zero":
            return self.z.new_zeros(B, *self.z.shape[2:])
        if per_residue and int(residue.max()) >= self.modulus:
            raise ValueError(f"residue {int(residue.max())} out of range for calibration modulus {self.modulus}")
        if kind == "mean":
            if self.example_id is not None:  # rows are the evaluated rows: `residue` is theirs
                return self.mean_over_other_examples(layer, per_residue=per_residue)
            if per_residue:
                return self.mean_by_residue()[residue.to(self.z.device), layer]
            return self.mean()[layer].expand(B, *self.z.shape[2:])
        return self.z[self.resample_index(residue, per_residue, seed).to(self.z.device), layer]

    def mean_over_other_examples(self, layer: int, *, per_residue: bool = False) -> Float[Tensor, "row site head d_head"]:
        """Per row: the mean of `layer`'s z over the rows of every *other* logical example
        (`example_id`; within the row's residue with `per_residue`). A logical example is one
        key->value mapping rendered at every residue, so no row's replacement holds its own
        records. Computed in float32, returned in the calibration's dtype.

        Raises:
            ValueError: if a row has no other example to average (fewer than two examples, or, with
                `per_residue`, a residue with one example).
        """
        if self.example_id is None:
            raise ValueError("mean_over_other_examples needs the rows' example_id (a calibration='self' calibration)")
        if not 0 <= layer < self.z.shape[1]:
            raise ValueError(f"layer={layer} is invalid: allowed 0..{self.z.shape[1] - 1}")
        z = self.z[:, layer].float()
        ex = torch.unique(self.example_id.to(z.device), return_inverse=True)[1]
        key = self.residue.to(z.device) if per_residue else torch.zeros_like(ex)
        n_key = int(key.max()) + 1
        cell = ex * n_key + key  # (example, residue group) of each row
        flat = z.reshape(len(z), -1)
        group_sum = torch.zeros(n_key, flat.shape[1], device=z.device).index_add_(0, key, flat)
        cell_sum = torch.zeros(int(cell.max()) + 1, flat.shape[1], device=z.device).index_add_(0, cell, flat)
        others = torch.bincount(key, minlength=n_key)[key] - torch.bincount(cell)[cell]
        if (others == 0).any():
            where = f" at residue {int(key[others == 0][0])}" if per_residue else ""
            raise ValueError(f"calibration='self' needs at least two logical examples{where} in the evaluated batch "
                             f"(found {int(ex.max()) + 1}): sample more per residue or pass a calibration batch")
        out = (group_sum[key] - cell_sum[cell]) / others[:, None]
        return out.reshape(z.shape).to(self.z.dtype)

    def resample_index(self, residue: Int[Tensor, " batch"], per_residue: bool, seed: int) -> Int[Tensor, " batch"]:
        rng = np.random.default_rng(seed)
        res = residue.cpu().numpy()
        if not per_residue:
            return torch.from_numpy(rng.integers(len(self.residue), size=len(res)))
        cal = self.residue.cpu().numpy()
        out = np.empty(len(res), dtype=np.int64)
        for r in np.unique(res):
            pool = np.flatnonzero(cal == r)
            if not len(pool):
                raise ValueError(f"calibration has no rows at residue {int(r)}; per-residue resampling needs them")
            rows = np.flatnonzero(res == r)
            out[rows] = rng.choice(pool, size=len(rows))
        return torch.from_numpy(out)


def calibrate(model, batch: PhaseBatch, positions: Positions = "final", *, max_rows: int | None = None
              ) -> Calibration:
    """Record every layer's head outputs `z` on a calibration batch at the knockout sites.

    Sites: "final" = each calibration row's query position (`batch.query_pos`, the last
    prompt token in RecordLookup), "all", or absolute positions. Only the sites are kept; our
    model's forward stops after the last layer's `hook_z`. Use a batch disjoint from the
    evaluated one (`split="calibration"`).

    Args:
        model: our model, a backend, or a raw HF model (see `measure.sweep.resolve_model`).
        batch, positions: the calibration prompts and the sites.
        max_rows: rows per forward (default: all rows in one forward); long prompts also go at most
            `backends.prompts.FORWARD_TOKENS` tokens (at least one row) per forward, bounding its activations.

    Example:
        >>> from phaseinterp.tasks import RecordLookup
        >>> cal = calibrate(model, RecordLookup(vocab_size=512, n_records=8, n_demos=2).sample(2, 4, split="calibration"))
        >>> cal.mean().shape  # [layer, site, head, d_head]
        torch.Size([2, 1, 4, 16])
    """
    model = runnable(model)
    if max_rows is not None:
        check_at_least_one("max_rows", max_rows)
    T = batch.tokens.shape[1]
    pos = check_positions(positions, T)
    dev = model.device
    sites = site_positions(pos, batch.query_pos.to(dev), T)
    names = [f"blocks.{l}.attn.hook_z" for l in range(model.cfg.n_layers)]
    step = units_per_forward(1, len(batch) if max_rows is None else max_rows, T)  # rows per forward, tokens bounded too
    chunks = []
    for start in range(0, len(batch), step):
        rows = slice(start, start + step)
        acts = model.capture(batch.tokens[rows], names, sites[rows])
        chunks.append(torch.stack([acts[n] for n in names], 1))
    meta = {k: batch.meta[k] for k in ("task", "split", "seed", "config", "protocol") if k in batch.meta}
    return Calibration(torch.cat(chunks), batch.residue.to(dev), batch.modulus, pos, {**meta, "rows": len(batch)})


def check_calibration(calib: Calibration, model) -> None:
    """ValueError unless `calib` has the model's layers, heads and head size."""
    cfg = model.cfg
    want = (int(cfg.n_layers), int(cfg.n_heads), int(cfg.d_head))
    got = (calib.z.shape[1], calib.z.shape[3], calib.z.shape[4])
    if got != want:
        raise ValueError(f"calibration z of shape {tuple(calib.z.shape)} (layers, heads, d_head = {got}) is invalid "
                         f"for this model: allowed layers, heads, d_head = {want}")


#: Calibrations remembered per wrapped module (weakly: dropped with the model), newest last; a
#: backend built anew for each call (`runnable(model)`) finds its model's calibrations.
_CALIBRATIONS: "weakref.WeakKeyDictionary[Any, dict[tuple, Calibration]]" = weakref.WeakKeyDictionary()
_PER_MODEL = 4


def _weights_key(backend) -> tuple:
    """Changes whenever a parameter is replaced or edited in place through autograd-visible ops
    (optimizer steps, `load_state_dict`, `copy_` under no_grad); edits through `.data` are not seen."""
    return tuple((p.data_ptr(), p._version) for p in backend.model.parameters())


def calibrate_cached(model, batch: PhaseBatch, positions: Positions = "final", *, max_rows: int | None = None
                     ) -> Calibration:
    """`calibrate`, remembered for the same model weights, calibration tokens and sites: maps
    that share a calibration batch (another level, method, replacement or layer subset) skip its
    forward pass. The cache holds the last 4 calibrations per model and forgets a model's
    entries when its weights change; `clear_calibrations()` empties it."""
    model = runnable(model)
    if model.has_hooks():  # hooks may change what a forward computes: never reuse
        return calibrate(model, batch, positions, max_rows=max_rows)
    weights = (type(model).__name__, _weights_key(model))
    key = (hashlib.sha1(batch.tokens.cpu().numpy().tobytes()).hexdigest(), tuple(batch.tokens.shape),
           hashlib.sha1(batch.query_pos.cpu().numpy().tobytes()).hexdigest(),
           hashlib.sha1(batch.residue.cpu().numpy().tobytes()).hexdigest(), batch.modulus,
           check_positions(positions, batch.tokens.shape[1]), weights)
    per_model = _CALIBRATIONS.setdefault(model.model, {})
    if key not in per_model:
        for stale in [k for k in per_model if k[-1] != key[-1]]:
            del per_model[stale]
        per_model[key] = calibrate(model, batch, positions, max_rows=max_rows)
        while len(per_model) > _PER_MODEL:
            del per_model[next(iter(per_model))]
    return per_model[key]


def clear_calibrations() -> None:
    """Forget every cached calibration (`calibrate_cached`)."""
    _CALIBRATIONS.clear()
