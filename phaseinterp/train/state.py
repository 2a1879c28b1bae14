"""Training checkpoints: model weights (safetensors, `phaseinterp.load` reads them) plus a sibling
training-state file (optimizer and RNG state) for exact resume.

Layout under a run's `checkpoints/` folder, N = step zero-padded to 6 digits:

    step_N.safetensors   weights + config (a HuggingFace model in the HF checkpoint format, see
                         `phaseinterp.checkpoint`); metadata "extra" holds step, seed, train
                         config, metrics at that step, and the state file's name and sha256
    step_N.state.pt      torch.save({format, step, optimizer, train_config, model_config,
                         world_size, torch_rng}); only the newest `keep_states` are kept

Both files are written atomically (temp file + rename), the state first, so a crash never leaves
a checkpoint that points at a missing or half-written state. Resuming checks the state file's
sha256 against the checkpoint, the step, and that model and train configs match (fields that do
not change the trajectory, `RESUMABLE_FIELDS`, may differ); every failure is a clear error.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import torch

from phaseinterp.checkpoint import read_metadata, save_model
from phaseinterp.families import family_of_config
from phaseinterp.sources import checkpoint_path, latest_checkpoint, list_checkpoints
from phaseinterp.train.config import RESUMABLE_FIELDS, TrainConfig

STATE_FORMAT = "phaseinterp-train-state-v1"


def state_path(checkpoint: str | os.PathLike) -> Path:
    checkpoint = Path(checkpoint)
    return checkpoint.with_name(checkpoint.name.replace(".safetensors", ".state.pt"))


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def _canonical(d: Any) -> Any:
    return json.loads(json.dumps(d))


def save_checkpoint(model, optimizer: torch.optim.Optimizer, step: int, tcfg: TrainConfig, run_dir: str | os.PathLike,
                    world_size: int = 1, metrics: dict[str, Any] | None = None) -> Path:
    """Write step `step`'s weights and training state; prune old state files. Returns the
    checkpoint path."""
    path = checkpoint_path(run_dir, step)
    spath = state_path(path)
    state = {
        "format": STATE_FORMAT, "step": step, "optimizer": optimizer.state_dict(),
        "train_config": json.dumps(tcfg.to_dict()), "model_config": json.dumps(model.cfg.to_dict()),
        "world_size": world_size, "torch_rng": torch.get_rng_state(),
    }
    buf = io.BytesIO()
    torch.save(state, buf)
    data = buf.getvalue()
    _atomic_write(spath, data)
    extra = {
        "step": step, "seed": tcfg.seed, "train_config": tcfg.to_dict(), "metrics": metrics or {},
        "state_file": spath.name, "state_sha256": hashlib.sha256(data).hexdigest(),
    }
    save_model(model, path, extra=extra)
    states = sorted(p for p in path.parent.glob("step_*.state.pt"))
    for old in states[: max(0, len(states) - tcfg.keep_states)]:
        old.unlink()
    return path


def _first_difference(saved: dict, given: dict, ignore: tuple[str, ...] = ()) -> tuple[str, Any, Any] | None:
    for key in sorted(set(saved) | set(given)):
        if key in ignore:
            continue
        a, b = saved.get(key, "<absent>"), given.get(key, "<absent>")
        if isinstance(a, dict) and isinstance(b, dict):
            sub = _first_difference(a, b)
            if sub:
                return (f"{key}.{sub[0]}", sub[1], sub[2])
        elif a != b:
            return (key, a, b)
    return None


def _model_kind(config: dict) -> str:
    """What a stored model config describes: its family and config type (e.g. "hf-causal-lm model
    (HFModelSpec DeepseekV4ForCausalLM)")."""
    family, cfg = family_of_config(config)
    arch = getattr(cfg, "architecture", None)
    return f"{family.name!r} model ({type(cfg).__name__}{f' {arch}' if arch else ''})"


def load_checkpoint_for_resume(path: str | os.PathLike, model, optimizer: torch.optim.Optimizer, tcfg: TrainConfig) -> int:
    """Restore weights, optimizer and RNG state from checkpoint `path` into `model` and
    `optimizer`; return its step.

    Raises:
        FileNotFoundError: the checkpoint or its state file is missing.
        ValueError: a file is corrupt or truncated, the state does not belong to the checkpoint,
            or the model or train config differs from the checkpoint's (the message names the
            first differing field, the saved and the requested value).
    """
    from phaseinterp.checkpoint import load

    path = Path(path)
    meta = read_metadata(path)
    extra = meta["extra"]
    if not {"step", "state_file", "state_sha256", "train_config"} <= set(extra):
        raise ValueError(f"{str(path)!r} is a model checkpoint without training state (not written by the trainer); cannot resume from it")
    saved_kind, this_kind = _model_kind(meta["config"]), _model_kind(model.cfg.to_dict())
    if saved_kind != this_kind:
        raise ValueError(f"cannot resume from {str(path)!r}: it holds a {saved_kind} but this run trains a {this_kind}")
    saved_cfg = family_of_config(meta["config"])[1].to_dict()  # through the config class, like the run's
    diff = _first_difference(_canonical(saved_cfg), _canonical(model.cfg.to_dict()))
    if diff:
        raise ValueError(f"cannot resume from {str(path)!r}: model config field {diff[0]!r} is {diff[1]!r} in the checkpoint "
                         f"but {diff[2]!r} in this run")
    saved = TrainConfig.from_dict(extra["train_config"]).to_dict()  # fields added since get their defaults
    diff = _first_difference(_canonical(saved), _canonical(tcfg.to_dict()), RESUMABLE_FIELDS)
    if diff:
        raise ValueError(f"cannot resume from {str(path)!r}: train config field {diff[0]!r} is {diff[1]!r} in the checkpoint "
                         f"but {diff[2]!r} in this run (only {list(RESUMABLE_FIELDS)} may change on resume)")
    spath = path.with_name(extra["state_file"])
    if not spath.is_file():
        raise FileNotFoundError(f"training state {str(spath)!r} of checkpoint {str(path)!r} is missing (only the newest "
                                f"keep_states={tcfg.keep_states} checkpoints keep their state); cannot resume from it")
    data = spath.read_bytes()
    if hashlib.sha256(data).hexdigest() != extra["state_sha256"]:
        raise ValueError(f"training state {str(spath)!r} is corrupt or belongs to another checkpoint: its sha256 does not "
                         f"match the one recorded in {str(path)!r}")
    try:
        state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any unpickling failure means an unusable file
        raise ValueError(f"training state {str(spath)!r} could not be read: {e}") from e
    if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
        found = state.get("format") if isinstance(state, dict) else None
        raise ValueError(f"{str(spath)!r} is not a phaseinterp training state (format {found!r}, expected {STATE_FORMAT!r})")
    if state["step"] != extra["step"]:
        raise ValueError(f"training state {str(spath)!r} is for step {state['step']}, checkpoint {str(path)!r} for step {extra['step']}")
    loaded = load(path)
    model.load_state_dict(loaded.state_dict())
    try:
        optimizer.load_state_dict(state["optimizer"])
    except (ValueError, KeyError, RuntimeError) as e:
        raise ValueError(f"optimizer state in {str(spath)!r} does not fit this model: {e}") from e
    torch.set_rng_state(state["torch_rng"])
    return int(extra["step"])


__all__ = ["STATE_FORMAT", "checkpoint_path", "latest_checkpoint", "list_checkpoints", "load_checkpoint_for_resume",
           "save_checkpoint", "state_path"]
