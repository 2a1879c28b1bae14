"""Gate cycling: gate parameters rolled over offsets (payload maps unchanged), and the predicted
shift of the phase curve A_delta(r) ~ A_0((r - delta) mod R), scored by R^2 without the boundary phase.

Two variants: gates only (`payload=False`, the paper's: Z_i and b_i roll, C_i stays), and gates
with payload maps (`payload=True`: C_i rolls with them, so offset i reads every parameter of offset
(i - delta) mod W). The second is exact bookkeeping: each entry equals the uncycled compressor's
entry of the same window with its slots rolled by -delta (slot i holding position start + (i +
delta) mod W); only the entry's RoPE position, its visibility and its window stay.

The backend does the cycling (`backend.cycled_gates`): behind `HookedBackend` our model's
parameters themselves are rolled (`gate_index`, `b_Z`); a generic backend (HF DeepSeek-V4) gives
each branch a `CycleGate` edit, which rebuilds the gate logits from each token's gate
projections with the rolled maps and bias: the same gates."""

from __future__ import annotations

import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np
import pandas as pd
from jaxtyping import Float

from phaseinterp.interventions.overrides import BRANCH_NAMES, block_backend, compressors
from phaseinterp.measure import PhaseCurve, evaluate_correct
from phaseinterp.measure.provenance import jsonable, model_config, versions
from phaseinterp.interventions.runner import runnable
from phaseinterp.model.compressor import map_index
from phaseinterp.progress import progress_bar
from phaseinterp.tasks import PhaseBatch
from phaseinterp.units import Unit


def _rollable(comp, payload: bool = False) -> tuple[bool, bool, bool]:
    """(gate maps differ by offset, has an offset bias, payload maps differ by offset and roll too),
    from the layer's config (a backend's `Compression`)."""
    differ = lambda maps: bool((map_index(comp.cc, maps) != map_index(comp.cc, maps)[0]).any())  # noqa: E731
    rolled_payload = payload and differ(comp.cc.payload)
    if not comp.kind.learned:
        return False, False, rolled_payload
    return differ(comp.cc.gate_maps), comp.cc.offset_bias, rolled_payload


@contextmanager
def cycled_gates(model, delta: int, *, layers: Sequence[int] | None = None,
                 branches: Sequence[str] | None = None, payload: bool = False) -> Iterator[None]:
    """Temporarily cycle gate parameters by `delta` offsets: Z'_i = Z_{(i - delta) mod W} and
    b'_i = b_{(i - delta) mod W}; payload maps C_i unchanged, or with `payload=True` rolled with
    them, C'_i = C_{(i - delta) mod W} (`backend.cycled_gates`). On our
    model (`HookedBackend`) the compressor's `gate_index` buffer (which map each offset uses) and
    `b_Z` are rolled in place and restored on exit, also on error; on a generic backend (HF
    DeepSeek-V4: CSA and HCA layers) the block runs inside `backend.intervene(CycleGate(...), ...)`
    and nothing changes in place.

    With shared gate maps only the bias rolls (a shared map is the same at every offset); with
    deepseek-csa's two half maps, the half each offset uses rolls with it. With `payload=True` a
    layer with per-offset payload maps always changes (uniform gates included: only C_i rolls).

    Raises:
        ValueError: delta = 0 mod W in a selected layer, nothing to roll at all (uniform gates,
            or shared maps without bias, and no payload maps rolled), or `payload=True` on a
            backend that edits gate logits only (HF DeepSeek-V4). Warns when only some selected
            branches change.

    Example:
        >>> from phaseinterp.measure import phase_sweep
        >>> with cycled_gates(model, 1):
        ...     curve = phase_sweep(model, batch, progress=False)
        >>> curve.modulus
        4
    """
    backend = block_backend(model)
    comps = compressors(backend, layers, branches)
    delta = int(delta)
    skipped = []
    for layer, branch, comp in comps:
        W = comp.cc.window
        if delta % W == 0:
            raise ValueError(f"delta={delta} is invalid for layer {layer} (W={W}): allowed delta != 0 mod W")
        if not any(_rollable(comp, payload)):
            skipped.append(f"{layer}.{branch}")
    if len(skipped) == len(comps):
        raise ValueError(f"gate cycling changes nothing in {skipped} (payload={payload}): uniform gates, or shared gate "
                         "maps without an offset bias, have no offset-specific gate parameters"
                         + ("" if payload else "; payload=True also rolls per-offset payload maps"))
    if skipped:
        warnings.warn(f"gate cycling changes nothing in {skipped} (no offset-specific gate parameters)",
                      UserWarning, stacklevel=3)
    units = [Unit("gate", layer, _branch_index(backend, layer, branch))
             for layer, branch, comp in comps if any(_rollable(comp, payload))]
    with backend.cycled_gates(units, delta, payload=payload):
        yield


def _branch_index(backend, layer: int, branch: str) -> int:
    """Index of a branch ("key", "value", "kv") among the backend's branches of `layer`."""
    return [BRANCH_NAMES[f"compress_{b}"] for b in backend.cfg.gate_branches[layer]].index(branch)


@dataclass(frozen=True, repr=False)
class CyclingResult:
    """Phase curve after gate cycling by `delta`, against the prediction A_0((r - delta) mod R).

    Attributes:
        delta: the shift. stride: S of the cycled layers; boundary residues have r mod S = S - 1.
        baseline, cycled: PhaseCurves before and after.
        predicted: A_0((r - delta) mod R) per residue.
        r2: 1 - SS_res / SS_tot over the non-boundary residues (nan if the cycled curve is flat).
        r2_all: the same including the boundary residues.
        boundary: boundary residues; boundary_predicted / boundary_actual: accuracies there.
        meta: model config, layers, branches, versions.
        payload: whether the payload maps were rolled with the gates.
    """

    delta: int
    stride: int
    baseline: PhaseCurve
    cycled: PhaseCurve
    predicted: np.ndarray
    r2: float
    r2_all: float
    boundary: list[int]
    boundary_predicted: list[float]
    boundary_actual: list[float]
    meta: dict[str, Any] = field(default_factory=dict)
    payload: bool = False

    def to_pandas(self) -> pd.DataFrame:
        r = np.arange(self.baseline.modulus)
        return pd.DataFrame({"delta": self.delta, "residue": r, "phase": r % self.stride,
                             "baseline": self.baseline.accuracy, "cycled": self.cycled.accuracy,
                             "predicted": self.predicted, "boundary": np.isin(r, self.boundary)})

    def summary(self) -> dict[str, Any]:
        return {"delta": self.delta, "payload": self.payload, "stride": self.stride, "r2": self.r2, "r2_all": self.r2_all,
                "boundary": self.boundary, "boundary_predicted": self.boundary_predicted,
                "boundary_actual": self.boundary_actual, "baseline_gap_pp": self.baseline.gap_pp,
                "cycled_gap_pp": self.cycled.gap_pp, "baseline_worst_residue": self.baseline.worst_residue,
                "cycled_worst_residue": self.cycled.worst_residue}

    def to_dict(self) -> dict[str, Any]:
        return jsonable({**self.summary(), "predicted": self.predicted, "baseline": self.baseline.to_dict(),
                         "cycled": self.cycled.to_dict(), "meta": self.meta})

    def __repr__(self) -> str:
        return (f"CyclingResult(delta={self.delta}{', payload' if self.payload else ''}, R^2={self.r2:.3f} excluding boundary {self.boundary}, "
                f"boundary predicted {np.round(self.boundary_predicted, 3).tolist()} vs actual "
                f"{np.round(self.boundary_actual, 3).tolist()})")


def r_squared(actual: Float[np.ndarray, " n"], predicted: Float[np.ndarray, " n"]) -> float:
    """1 - sum (y - yhat)^2 / sum (y - mean y)^2 over finite pairs; nan if y is constant."""
    ok = np.isfinite(actual) & np.isfinite(predicted)
    y, p = actual[ok], predicted[ok]
    tot = float(((y - y.mean()) ** 2).sum()) if len(y) else 0.0
    return 1.0 - float(((y - p) ** 2).sum()) / tot if tot > 0 else float("nan")


def gate_cycling(model, batch: PhaseBatch, deltas: Sequence[int] | None = None, *,
                 layers: Sequence[int] | None = None, branches: Sequence[str] | None = None,
                 batch_size: int = 32, n_boot: int = 2000, seed: int = 0, progress: bool = True,
                 payload: bool = False, resume: str | Path | None = None) -> list[CyclingResult]:
    """Cycle the gates by each delta and compare the phase curve with A_0((r - delta) mod R).

    Args:
        model: a HookedCompressedTransformer with trainable (non-uniform) gates, or a backend with
            gates (`HookedBackend`, `DeepseekV4Backend`; a raw HF DeepSeek-V4 model is wrapped).
        batch: record-lookup prompts over residues 0..R-1 (R a multiple of S).
        deltas: shifts (default 1..S-1).
        layers, branches: which compression branches to cycle (default all).
        batch_size, n_boot, seed: see `phase_sweep`.
        progress: one progress bar over the sweeps, the baseline then one per delta (default;
            `phaseinterp.progress`); False: silent.
        payload: roll the payload maps with the gates (`cycled_gates`).
        resume: a journal folder: the baseline and each delta's sweep record their finished
            minibatches in a subfolder (`evaluate_correct(resume=)`; the cycled layers, branches,
            variant and delta are part of each journal's fingerprint), so a killed run continues bit
            for bit; each result's `meta["resumed"]` = minibatches taken from the journal (baseline, cycled).

    Returns:
        One CyclingResult per delta; `r2` excludes the boundary phase S - 1, whose predicted and
        actual accuracies are reported separately.

    Example:
        >>> [r.delta for r in gate_cycling(model, batch, deltas=[1, 2])]
        [1, 2]
    """
    model = runnable(model)
    comps = compressors(model, layers, branches)
    strides = sorted({c.cc.stride for _, _, c in comps})
    if len(strides) != 1:
        raise ValueError(f"cycled layers have strides {strides}; cycle layers of one stride at a time (layers=...)")
    S, R = strides[0], batch.modulus
    if R % S:
        raise ValueError(f"batch modulus R={R} is invalid: allowed a multiple of the stride S={S}")
    deltas = list(range(1, S)) if deltas is None else [int(d) for d in deltas]
    if not deltas:
        raise ValueError("deltas is empty")
    curve = lambda correct, lab: PhaseCurve.from_correct(correct, batch, period=S, n_boot=n_boot, n_perm=200,  # noqa: E731
                                                         seed=seed, label=lab)
    def journal(name: str, what: dict):
        if resume is None:
            return None
        from phaseinterp.measure.journal import Journal, batch_fingerprint, model_fingerprint

        return Journal(Path(resume) / name, "sweep", {
            "model": model_fingerprint(model), "batch": batch_fingerprint(batch),
            "settings": {"batch_size": batch_size, "device": model.device.type, "logits": model.sweep_info(), **what}})

    units = {"layers": sorted({l for l, _, _ in comps}), "branches": sorted({b for _, b, _ in comps})}
    tag = "L" + "-".join(str(l) for l in units["layers"]) + "." + "-".join(units["branches"]) + (".payload" if payload else "")
    bar = progress_bar(1 + len(deltas), "gate cycling", progress, unit="sweep")
    base_journal = journal(f"{tag}.baseline", {"cycled": None})
    base = curve(evaluate_correct(model, batch, batch_size=batch_size, progress=False, resume=base_journal), "baseline")
    bar.update()
    r = np.arange(R)
    boundary = [int(x) for x in r[r % S == S - 1]]
    out = []
    for delta in deltas:
        cyc_journal = journal(f"{tag}.delta{delta}", {"cycled": {**units, "delta": delta, "payload": bool(payload)}})
        with cycled_gates(model, delta, layers=layers, branches=branches, payload=payload):
            cyc = curve(evaluate_correct(model, batch, batch_size=batch_size, progress=False, resume=cyc_journal),
                        f"delta={delta}")
        bar.update()
        pred = base.accuracy[(r - delta) % R]
        inner = r % S != S - 1
        out.append(CyclingResult(
            delta=delta, stride=S, baseline=base, cycled=cyc, predicted=pred,
            r2=r_squared(cyc.accuracy[inner], pred[inner]), r2_all=r_squared(cyc.accuracy, pred),
            boundary=boundary, boundary_predicted=pred[~inner].tolist(), boundary_actual=cyc.accuracy[~inner].tolist(),
            payload=bool(payload), meta={"layers": units["layers"], "branches": units["branches"],
                  "model": model_config(model), "task": batch.meta, "seed": seed, "versions": versions(),
                  **({} if resume is None else {"resumed": {"baseline": base_journal.taken, "cycled": cyc_journal.taken,
                                                            "of": -(-len(batch) // batch_size)}})}))
    bar.close()
    return out

