"""Checkpoint cards (JSON) and shipping a run into `assets/checkpoints/`.

A card records what is needed to trust and reuse a checkpoint: model and train configs, seed,
steps, the data mixture with its token ranges and the matched evaluation task, wall time, final
training metrics, the phase curve on matched prompts, and the software versions.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from phaseinterp.checkpoint import read_metadata, save_model
from phaseinterp.config import ModelConfig
from phaseinterp.train.config import TrainConfig
from phaseinterp.train.evaluate import phase_curve, rows_for
from phaseinterp.measure.provenance import versions
from phaseinterp.train.loop import TrainResult
from phaseinterp.train.state import list_checkpoints

CARD_FORMAT = "phaseinterp-card-v1"


def make_card(result: TrainResult, model_cfg: ModelConfig, tcfg: TrainConfig, *, name: str, eval_examples: int = 512,
              modulus: int | None = None, world_size: int = 1) -> dict[str, Any]:
    """The card of a finished run (evaluates the phase curve of `result.model` by residue mod
    `modulus`; default `rule.period` of the model's strides, 8 for full attention and HF models).
    Where the training rows cannot place the needle at every residue, the evaluation rows are
    lengthened to the shortest multiple of 8 that can (recorded in `phase_curve.task`)."""
    from phaseinterp.train.rule import period

    mix = tcfg.mixture
    if modulus is None:
        modulus = period(getattr(model_cfg, "residue_modulus", None))
    rows = {"seq_len": rows_for(mix.eval_task_kwargs(), modulus)["seq_len"]}
    final = {}
    log = Path(result.run_dir) / "metrics.jsonl"
    if log.is_file():
        lines = [json.loads(x) for x in log.read_text().splitlines() if x.strip()]
        final = lines[-1] if lines else {}
    curve = phase_curve(result.model, mix, modulus=modulus, n_per_residue=eval_examples, **rows)
    return {
        "format": CARD_FORMAT,
        "name": name,
        "model_config": model_cfg.to_dict(),
        "n_parameters": sum(p.numel() for p in result.model.parameters()),
        "seed": tcfg.seed,
        "steps": result.step,
        "train_config": tcfg.to_dict(),
        "data": {"mixture": mix.to_dict(), "token_ranges": mix.token_ranges(),
                 "tokens_seen": result.step * tcfg.batch_size * mix.seq_len,
                 "eval_task": mix.eval_task_kwargs()},
        "wall_time_s": round(final.get("elapsed_s", result.wall_time_s), 1),
        "cpu_time_s": round(final["cpu_s"], 1) if "cpu_s" in final else None,
        "hardware": {"device": str(next(result.model.parameters()).device), "torch_threads": _threads(),
                     "world_size": world_size},
        "final_metrics": {k: final[k] for k in ("step", "loss", "lookup_loss", "lm_loss", "acc", "lookup_acc") if k in final},
        "phase_curve": curve,
        "versions": versions(),
    }


def _threads() -> int:
    import torch

    return torch.get_num_threads()


def write_card(card: dict[str, Any], path: str | os.PathLike) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(card, indent=2) + "\n")
    os.replace(tmp, path)
    return path


def ship(run_dir: str | os.PathLike, dest: str | os.PathLike, name: str, *, intermediate: bool = False) -> list[Path]:
    """Copy a finished run into `dest`: NAME.safetensors (final weights), NAME.json (the run's
    card.json), NAME.metrics.jsonl, and with `intermediate` every earlier checkpoint as
    NAME/step_N.safetensors (weights only; optimizer state is never shipped). Returns the paths."""
    run_dir, dest = Path(run_dir), Path(dest)
    ckpts = list_checkpoints(run_dir)
    card = run_dir / "card.json"
    if not ckpts or not card.is_file():
        raise ValueError(f"run_dir={str(run_dir)!r} has no finished run to ship (needs checkpoints/ and card.json)")
    dest.mkdir(parents=True, exist_ok=True)
    out = [dest / f"{name}.safetensors", dest / f"{name}.json", dest / f"{name}.metrics.jsonl"]
    _copy_weights(ckpts[-1][1], out[0])
    shutil.copyfile(card, out[1])
    shutil.copyfile(run_dir / "metrics.jsonl", out[2])
    if intermediate:
        for _step, path in ckpts[:-1]:
            out.append(_copy_weights(path, dest / name / path.name))
    return out


def _copy_weights(src: Path, dst: Path) -> Path:
    """Re-save a checkpoint's weights with its step, seed and metrics (no resume pointers)."""
    from phaseinterp.checkpoint import load

    extra = read_metadata(src)["extra"]
    keep = {k: extra[k] for k in ("step", "seed", "metrics") if k in extra}
    save_model(load(src), dst, extra=keep)
    os.chmod(dst, 0o644)
    return dst


__all__ = ["CARD_FORMAT", "make_card", "ship", "write_card"]
