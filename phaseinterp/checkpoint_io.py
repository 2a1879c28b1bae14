"""The checkpoint file: safetensors with the config JSON in the metadata, written atomically, and
read back as metadata and as tensors checked against the state dict a config builds.

Builds no model and knows no model kind (`phaseinterp.checkpoint.load` asks the family registry),
so that model classes save themselves through it, naming their own format, without an import
cycle. Formats: see `phaseinterp.checkpoint`.

Verified on load: names and shapes against the config, a SHA-256 digest of the config and every
tensor written at save time (an edited config, or weights swapped under a config, are caught;
a file written before digests existed loads with a warning that it could not be verified; every
shipped checkpoint has one), and finite weights (unless the caller opts in).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import warnings
from pathlib import Path

import torch

from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file

#: The format of our own `HookedCompressedTransformer` (other families name theirs when they save).
FORMAT = "phaseinterp-checkpoint-v1"


def save_model(model, path: str | os.PathLike, extra: dict | None = None, *, fmt: str = FORMAT, module=None,
               metadata: dict | None = None) -> Path:
    """Write `model`'s weights and config to `path` in format `fmt`; a temp file is renamed into
    place, so `path` never holds a half-written checkpoint. The tensors are `module`'s state dict
    (default: the model's; copied, so tied weights save fine); `model.cfg.to_dict()` is the config;
    `metadata` (strings) and `extra` (JSON-serializable) land in the metadata."""
    from phaseinterp import __version__

    path = Path(path)
    tensors = {k: v.detach().cpu().clone().contiguous() for k, v in (model if module is None else module).state_dict().items()}
    header = {
        "format": fmt,
        "config": json.dumps(model.cfg.to_dict()),
        **(metadata or {}),
        "phaseinterp_version": __version__,
        "extra": json.dumps(extra or {}),
    }
    return _write_atomically(tensors, header, path)


def digest(config_json: str, tensors: dict) -> str:
    """SHA-256 of the config JSON and every tensor (name, dtype, shape, bytes), in name order."""
    h = hashlib.sha256(config_json.encode())
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _write_atomically(tensors: dict, metadata: dict, path: Path) -> Path:
    """safetensors file written to a temporary name, then renamed: a crash never leaves half a file.
    Temporary files that an interrupted earlier save of the same path left behind are removed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in path.parent.glob(f".{path.name}.*.tmp"):
        stale.unlink(missing_ok=True)
    metadata = {**metadata, "digest": digest(metadata["config"], tensors)}
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
    """The checkpoint's metadata (header only), with "config" and "extra" decoded; its format is
    checked against the registered families by `phaseinterp.checkpoint.read_metadata`."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {str(path)!r}")
    try:
        with safe_open(str(path), "pt") as f:
            meta = dict(f.metadata() or {})
    except (SafetensorError, OSError, ValueError) as e:
        raise ValueError(f"{str(path)!r} is not a readable safetensors checkpoint (truncated or corrupt?): {e}") from e
    if not str(meta.get("format", "")).startswith("phaseinterp-"):
        raise ValueError(f"{str(path)!r} is not a phaseinterp checkpoint: format={meta.get('format')!r}, expected a "
                         "'phaseinterp-...' format")
    if "config" not in meta:
        raise ValueError(f"{str(path)!r} has no config in its metadata: not a checkpoint phaseinterp wrote")
    for key, default in (("config", None), ("extra", "{}")):
        try:
            meta[key] = json.loads(meta.get(key, default))
        except json.JSONDecodeError as e:
            raise ValueError(f"{str(path)!r}: metadata {key!r} is not JSON ({e}): the file was edited or damaged") from None
    return meta


def read_tensors(path: str | os.PathLike, expected: dict, device: str, *, allow_nonfinite: bool = False,
                 meta: dict | None = None) -> dict:
    """The checkpoint's tensors, checked against the state dict its config builds (names, shapes),
    against the digest written at save time, and for non-finite values (unless `allow_nonfinite`)."""
    try:
        tensors = load_file(str(path), device=device)
    except (SafetensorError, OSError, ValueError) as e:
        raise ValueError(f"{str(path)!r}: could not read tensors (truncated or corrupt?): {e}") from e
    missing, unexpected = sorted(set(expected) - set(tensors)), sorted(set(tensors) - set(expected))
    if missing or unexpected:
        raise ValueError(f"{str(path)!r} does not match its config: missing {missing[:5]}, unexpected {unexpected[:5]}")
    for name, t in tensors.items():
        if t.shape != expected[name].shape:
            raise ValueError(f"{str(path)!r}: {name} has shape {tuple(t.shape)}, config expects {tuple(expected[name].shape)}")
    meta = read_metadata(path) if meta is None else meta
    saved = meta.get("digest")
    if saved is None:
        warnings.warn(f"{str(path)!r} has no digest (written before checkpoints recorded one): its config and "
                      "weights could not be checked against each other; re-save it with model.save(path)", stacklevel=3)
    elif saved != digest(json.dumps(meta["config"]), tensors):
        raise ValueError(f"{str(path)!r}: its config or weights changed after saving (digest mismatch): re-save it with "
                         "model.save(path), or restore the original file")
    if not allow_nonfinite:
        bad = [n for n, t in tensors.items() if t.is_floating_point() and not bool(torch.isfinite(t).all())]
        if bad:
            raise ValueError(f"{str(path)!r}: non-finite weights (nan or inf) in {bad[:5]}: allowed only with "
                             "allow_nonfinite=True (e.g. to inspect a diverged run)")
    return tensors
