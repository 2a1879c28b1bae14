"""Gate cycling of one zoo run: every delta 1..S-1, all compressed layers together and each alone,
gates only (the paper's) and gates with payload maps; plus how alike the run's payload maps are
across offsets, the evidence for why gates-only cycling can fail."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import torch

BRANCHES = ("compress_k", "compress_v", "compress_kv")


def _compressors(model) -> list[tuple[int, str, Any]]:
    out = []
    for layer, block in enumerate(model.blocks):
        for name in BRANCHES:
            if hasattr(block.attn, name):
                out.append((layer, name.removeprefix("compress_"), getattr(block.attn, name)))
    return out


def payload_similarity(model, tokens: torch.Tensor) -> list[dict[str, Any]]:
    """Per compressed layer and branch: mean cosine between the payloads C_i h and C_j h of the same
    layer input h (the layer's `ln1` output on `tokens`), over offset pairs i != j, over
    neighbours j = i + 1, and per lag j = i + lag mod W (lag 1..W-1: after a gates-only cycle by
    delta = lag the token the gate of offset i - delta used to pick is read through C_i, not the
    C_{i - delta} that role was trained with). 1.0: one map in effect (cycling the payload maps changes nothing);
    near 0: the maps write unrelated vectors, so a gate moved to offset i reads C_i, not the map
    its token was trained through."""
    names = [f"blocks.{layer}.ln1.hook_normalized" for layer in sorted({c[0] for c in _compressors(model)})]
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens, names_filter=names)
        out = []
        for layer, branch, comp in _compressors(model):
            h = cache[f"blocks.{layer}.ln1.hook_normalized"].reshape(-1, model.cfg.d_model)
            maps = comp.W_C[:int(comp.payload_index.max()) + 1]  # chunking 0's maps
            if maps.shape[0] == 1:
                out.append({"layer": layer, "branch": branch, "maps": 1, "cos_pairs": 1.0, "cos_neighbours": 1.0,
                            "cos_by_lag": [1.0] * (comp.cc.window - 1)})
                continue
            p = torch.nn.functional.normalize(torch.einsum("nd,wde->wne", h, maps), dim=-1)  # [map, token, out]
            cos = torch.einsum("ine,jne->ij", p, p) / p.shape[1]
            W = cos.shape[0]
            off = ~torch.eye(W, dtype=torch.bool)
            by_lag = [float(torch.stack([cos[i, (i + lag) % W] for i in range(W)]).mean()) for lag in range(1, W)]
            out.append({"layer": layer, "branch": branch, "maps": W, "cos_pairs": float(cos[off].mean()),
                        "cos_neighbours": by_lag[0], "cos_by_lag": by_lag})
    return out


def _record(results) -> dict[str, Any]:
    base = results[0].baseline
    summary = base.summary()
    return {"baseline": [float(a) for a in base.accuracy], "baseline_gap_pp": float(base.gap_pp),
            "baseline_gap_ci_pp": [float(x) for x in summary["gap_interval_pp"]],
            "baseline_p_phase": float(summary["p_value"]),
            "deltas": [{"delta": r.delta, "r2": r.r2, "r2_all": r.r2_all,
                        "boundary_predicted": [float(a) for a in r.boundary_predicted],
                        "boundary_actual": [float(a) for a in r.boundary_actual],
                        "cycled": [float(a) for a in r.cycled.accuracy]} for r in results]}


def cycle_run(path, *, n_all: int, n_layer: int, n_boot: int, task_seed: int, protocol: str) -> dict[str, Any]:
    """Cycling results of the checkpoint at `path` on its card's matched task (residues mod the zoo
    table's R): scope "all" at `n_all` logical examples per residue, each compressed layer alone
    ("layer 0", ...) at `n_layer`; each scope in both variants."""
    import phaseinterp
    from phaseinterp.interventions import gate_cycling
    from phaseinterp.tasks import RecordLookup
    from phaseinterp.train.evaluate import rows_for
    from phaseinterp.train.rule import table_period

    model = phaseinterp.load(path).eval()
    card = json.loads(path.with_suffix(".json").read_text())
    R = table_period(model.cfg.residue_modulus)
    task = RecordLookup(**{**rows_for(card["data"]["eval_task"], R), "protocol": protocol})
    layers = sorted({c[0] for c in _compressors(model)})
    scopes = [("all", None, n_all)] + [(f"layer {layer}", [layer], n_layer) for layer in layers]
    out: dict[str, Any] = {"modulus": R, "stride": None, "scopes": {}}
    for scope, sel, n in scopes:
        batch = task.sample(n, R, seed=task_seed)
        out["scopes"][scope] = {"n_per_residue": n, "layers": sel or layers}
        for payload in (False, True):
            res = gate_cycling(model, batch, layers=sel, n_boot=n_boot, seed=task_seed, payload=payload, progress=False)
            out["stride"] = res[0].stride
            out["scopes"][scope]["with payload" if payload else "gates only"] = _record(res)
        if scope == "all":
            out["payload_similarity"] = payload_similarity(model, batch.tokens[:32])
    return out


def best_moves(baseline: list[float], cycled: list[float], delta: int, stride: int) -> bool:
    """Does the cycled curve's best non-boundary residue sit where the prediction puts it (the
    baseline's best residue moved by delta), phase mod S? False when either curve is flat outside
    the boundary (no best residue to move, or none kept)."""
    b, c = np.asarray(baseline), np.asarray(cycled)
    R = len(b)
    inner = np.arange(R) % stride != stride - 1
    pred = b[(np.arange(R) - delta) % R]
    if np.ptp(pred[inner]) == 0 or np.ptp(c[inner]) == 0:
        return False
    want = {int(r) % stride for r in np.flatnonzero(inner & (pred == pred[inner].max()))}
    got = {int(r) % stride for r in np.flatnonzero(inner & (c == c[inner].max()))}
    return bool(want & got)
