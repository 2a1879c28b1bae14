"""Sweeping a shipped checkpoint on its card's matched task: the phase curve every results table
is built from.

`sweep_checkpoint(path, card, ...)` runs the sweep of `phaseinterp sweep` on `path` with the card's
evaluation task (`task_from_card`: `RecordLookup` with the training vocabulary split, sequence
length, records and demonstrations, unless the card names another registered task), statistics at the model's period P (the lcm of its strides; full attention:
`FULL_PERIOD`, the question being whether it shows a period at all); `architecture(model_config)`
names a card's model in a table.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from phaseinterp.checkpoint import load
from phaseinterp.measure import phase_sweep
from phaseinterp.sources import check_card
from phaseinterp.tasks import task_from_card

MODULUS = 8
FULL_PERIOD = 4


def sweep_checkpoint(path: Path, card: dict[str, Any], *, n_per_residue: int, task_seed: int, protocol: str,
                     n_boot: int, n_perm: int, batch_size: int = 64, modulus: int = MODULUS, model=None):
    """PhaseCurve of one shipped checkpoint on its card's matched task, residues mod `modulus`;
    a card whose model config disagrees with the checkpoint's raises (it would mislabel results).
    `model`: the checkpoint already loaded (`checkpoint.load(path)`), to sweep it again without reloading."""
    check_card(card, path)
    model = (load(path) if model is None else model).eval()
    task_kwargs = {**card["data"]["eval_task"], "protocol": protocol}
    task = task_from_card(task_kwargs)  # the matched record lookup, unless the card names another task
    batch = task.sample(n_per_residue, modulus, seed=task_seed)
    period = model.cfg.residue_modulus or FULL_PERIOD
    curve = phase_sweep(model, batch, batch_size=batch_size, period=period, progress=False, label=card["name"],
                        n_boot=n_boot, n_perm=n_perm, seed=task_seed,
                        config={"checkpoint": str(path), "task": task_kwargs, "card_seed": card["seed"]})
    return curve, task_kwargs


def architecture(model_config: dict[str, Any]) -> str:
    """Short description of a card's model: compressors, or the HF architecture and layer schedule."""
    from phaseinterp.families.hf_causal_lm import HFModelSpec

    if HFModelSpec.is_spec_dict(model_config):
        return HFModelSpec.from_dict(model_config).describe()
    compressed = [c for c in model_config["layers"] if c != "full"]
    return "full attention" if not compressed else ", ".join(sorted({
        f"W{c['window']}/S{c['stride']} {c['gate']}" + (" tied" if c["kv"] == "tied" else "") for c in compressed}))


__all__ = ["FULL_PERIOD", "MODULUS", "architecture", "sweep_checkpoint"]
