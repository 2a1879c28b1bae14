"""Branch knockout on Native Sparse Attention: zero one branch's output (compressed, selected or
sliding) in one layer and measure the accuracy change per residue.

A branch's output is its per-head attention result before the gate mixes it
(`blocks.{l}.attn.hook_z_{branch}`, docs/nsa.md); zeroing it removes the branch from that layer
exactly (the gate multiplies zero). Positions: "all" (default: the branch is gone from the layer)
or "final" (only at each row's query position, like the KV-head knockout protocol). A knockout
that changes no logit warns, naming it (e.g. a branch whose gate is closed).
"""

from __future__ import annotations

from typing import Sequence

from jaxtyping import Float, Int
from torch import Tensor

from phaseinterp.interventions.checks import check_at_least_one
from phaseinterp.interventions.runner import runnable, unchanged_units, warn_unchanged
from phaseinterp.interventions.stats import accuracy_change, pooled_change
from phaseinterp.measure import PhaseCurve, model_period
from phaseinterp.measure.provenance import model_config, versions
from phaseinterp.measure.specialization import SpecializationMap
from phaseinterp.model.nsa.attention import BRANCHES  # NSA's branches, in the order of its gates
from phaseinterp.tasks import PhaseBatch
from phaseinterp.units import check_layers

POSITIONS = ("all", "final")


def branch_logits(model, tokens: Int[Tensor, "batch pos"], query_pos: Int[Tensor, " batch"],
                  knockouts: Sequence[tuple[int, str]], *, positions: str = "all",
                  batch_size: int = 128) -> tuple[Float[Tensor, "batch vocab"], Float[Tensor, "unit batch vocab"]]:
    """(clean logits, logits with each (layer, branch) zeroed) at the query positions
    (`NSABackend.branch_logits`)."""
    return runnable(model).branch_logits(tokens, query_pos, knockouts, positions=positions, batch_size=batch_size)


def branch_knockout(model, batch: PhaseBatch, *, layers: Sequence[int] | None = None,
                    branches: Sequence[str] = BRANCHES, positions: str = "all", n_boot: int = 1000,
                    confidence: float = 0.95, seed: int = 0, batch_size: int = 128, label: str = "",
                    progress: bool = True) -> SpecializationMap:
    """Absolute accuracy change (pp) per (layer, branch, residue) when a branch output is zeroed.

    Args:
        model: an `NSATransformer` or its `NSABackend` (the `hook_z_compress|select|sliding` hook points).
        batch: the evaluated prompts (`RecordLookup(...).sample(...)`).
        layers: layers to knock out in (default all); branches: any of `BRANCHES`.
        positions: "all" (the branch removed from the layer) or "final" (query position only).
        n_boot, confidence, seed: paired logical-example cluster bootstrap of the change.
        batch_size: rows per forward.
        progress: a progress bar over the forwards (default; `phaseinterp.progress`); False: silent.

    Returns:
        SpecializationMap, dims ("layer", "branch", "residue"), values in pp, bootstrap `lo`/`hi`
        and p-values `p` (`significant_fdr`: BH across the map), extras `acc_knockout`, the clean curve.

    Warns:
        UserWarning: naming the knockouts that changed no logit.

    Example:
        >>> from phaseinterp.model.nsa import NSAConfig, NSATransformer
        >>> nsa = NSATransformer(NSAConfig(vocab_size=512, num_selected=1), seed=0)
        >>> m = branch_knockout(nsa, batch, n_boot=50)
        >>> m.dims, m.shape
        (('layer', 'branch', 'residue'), (2, 3, 4))
    """
    model = runnable(model)
    layer_ids = check_layers(layers, model.cfg.n_layers)
    branches = list(branches)
    for b in branches:
        if b not in BRANCHES:
            raise ValueError(f"branch={b!r} is invalid: allowed one of {list(BRANCHES)}")
    if positions not in POSITIONS:
        raise ValueError(f"positions={positions!r} is invalid: allowed one of {list(POSITIONS)}")
    check_at_least_one("n_boot", n_boot)
    check_at_least_one("batch_size", batch_size)
    device = model.device
    knockouts = [(layer, b) for layer in layer_ids for b in branches]
    clean_logits, ko_logits = model.branch_logits(batch.tokens.to(device), batch.query_pos.to(device), knockouts,
                                                  positions=positions, batch_size=batch_size, progress=progress)
    warn_unchanged([f"L{layer}.{b}" for layer, b in (knockouts[i] for i in unchanged_units(ko_logits, clean_logits))],
                   f"branch knockout (zero, positions={positions})")
    answers = batch.answers.to(device)
    clean = (clean_logits.argmax(-1)[:, None] == answers).any(-1).cpu().numpy()
    ko = (ko_logits.argmax(-1)[..., None] == answers).any(-1).cpu().numpy()
    res, R = batch.residue.cpu().numpy(), batch.modulus
    # the knockout maps' cells: the change in pp, its paired cluster-bootstrap interval and p-value
    change, lo, hi, _, acc_ko, p = accuracy_change(clean, ko, res, batch.example_id.cpu().numpy(), R,
                                                   change="absolute", n_boot=n_boot, confidence=confidence, seed=seed)
    shape = (len(layer_ids), len(branches), R)
    pooled = pooled_change(clean, ko, batch.example_id.cpu().numpy(), n_boot=n_boot, confidence=confidence, seed=seed,
                           shape=shape[:-1])
    S = model_period(model)
    curve = PhaseCurve.from_correct(clean, batch, period=S if S and R % S == 0 else None, n_boot=n_boot, n_perm=200,
                                    confidence=confidence, seed=seed, label=f"{label} clean".strip())
    return SpecializationMap(
        values=change.reshape(shape), dims=("layer", "branch", "residue"),
        coords={"layer": layer_ids, "branch": branches, "residue": list(range(R))},
        lo=lo.reshape(shape), hi=hi.reshape(shape), p=p.reshape(shape),
        extras={"acc_knockout": acc_ko.reshape(shape), **pooled},
        clean=curve.to_dict(), direction=-1, clip=100.0, quantity="absolute accuracy change (pp)",
        meta={"label": label, "intervention": {"kind": "branch_knockout", "replacement": "zero", "positions": positions},
              "model": model_config(model), "task": batch.meta, "seed": seed, "n_boot": n_boot,
              "confidence": confidence, "versions": versions()})


__all__ = ["BRANCHES", "POSITIONS", "branch_knockout", "branch_logits"]
