"""Checkpoints: safetensors with the config JSON in the metadata, written atomically."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

FORMAT = "phaseinterp-checkpoint-v1"


def save_model(model, path: str | os.PathLike, extra: dict | None = None) -> Path:
    """Write `model`'s weights and config to `path`; a temp file is renamed into place, so `path`
    never holds a half-written checkpoint. `extra` (JSON-serializable) lands in the metadata."""
    from phaseinterp import __version__

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    metadata = {
        "format": FORMAT,
        "config": json.dumps(model.cfg.to_dict()),
        "phaseinterp_version": __version__,
        "extra": json.dumps(extra or {}),
    }
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        save_file(tensors, tmp, metadata=metadata)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; a checkpoint is an ordinary file
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path


def read_metadata(path: str | os.PathLike) -> dict:
    """The checkpoint's metadata (header only), with "config" and "extra" decoded."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {str(path)!r}")
    try:
        with safe_open(str(path), "pt") as f:
            meta = dict(f.metadata() or {})
    except (SafetensorError, OSError, ValueError) as e:
        raise ValueError(f"{str(path)!r} is not a readable safetensors checkpoint (truncated or corrupt?): {e}") from e
    if meta.get("format") != FORMAT:
        raise ValueError(f"{str(path)!r} is not a phaseinterp checkpoint: format={meta.get('format')!r}, expected {FORMAT!r}")
    meta["config"] = json.loads(meta["config"])
    meta["extra"] = json.loads(meta.get("extra", "{}"))
    return meta


def load(path: str | os.PathLike, device: str = "cpu"):
    """Load a model written by `model.save(path)`; raises on missing, truncated or mismatched files.

    Example:
        >>> model = phaseinterp.load("assets/checkpoints/w4s4.safetensors")  # doctest: +SKIP
    """
    from safetensors.torch import load_file

    from phaseinterp.config import ModelConfig
    from phaseinterp.model import HookedCompressedTransformer

    meta = read_metadata(path)
    model = HookedCompressedTransformer(ModelConfig.from_dict(meta["config"]))
    try:
        tensors = load_file(str(path), device=device)
    except (SafetensorError, OSError, ValueError) as e:
        raise ValueError(f"{str(path)!r}: could not read tensors (truncated or corrupt?): {e}") from e
    expected = model.state_dict()
    missing, unexpected = sorted(set(expected) - set(tensors)), sorted(set(tensors) - set(expected))
    if missing or unexpected:
        raise ValueError(f"{str(path)!r} does not match its config: missing {missing[:5]}, unexpected {unexpected[:5]}")
    for name, t in tensors.items():
        if t.shape != expected[name].shape:
            raise ValueError(f"{str(path)!r}: {name} has shape {tuple(t.shape)}, config expects {tuple(expected[name].shape)}")
    model.load_state_dict(tensors)
    return model.to(device).eval()
