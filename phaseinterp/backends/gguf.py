"""Load a GGUF file (the real models the registry packages ship) as a HF model and tokenizer, once.

transformers reads a GGUF file with `gguf`'s reader, which parses every metadata field in Python,
the tokenizer's vocabulary included, and a model load parses the file twice (config, then weights):
Gemma 3 270M's 262,144-token vocabulary makes that about a minute on one CPU core, SmolLM2's ~20 s.
So the first load also writes the converted model (float32 safetensors, the dequantized values as
transformers made them, unchanged) and tokenizer to a cache folder, and later loads read that folder in
about a second. The folder is keyed by the GGUF file's name, size and modification time (a reinstalled
package gets a new entry) and written atomically (a temporary folder, renamed).

Cache location: `$PHASEINTERP_CACHE` when set (`off` disables the cache), else
`$XDG_CACHE_HOME/phaseinterp` or `~/.cache/phaseinterp`. Gemma 3 270M takes 1.1 GB there, SmolLM2 0.5 GB;
delete the folder to reclaim it. A cache that cannot be written is reported and skipped, never fatal.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import shutil
import uuid
import warnings
from pathlib import Path
from typing import Any, Iterator

import torch

CACHE_ENV = "PHASEINTERP_CACHE"


def cache_root() -> Path | None:
    """Where converted GGUF models are kept (None: the cache is off)."""
    env = os.environ.get(CACHE_ENV)
    if env is not None:
        return None if env.strip().lower() in ("off", "0", "") else Path(env).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "phaseinterp"


def cache_dir(path: Path) -> Path | None:
    """The cache folder of one GGUF file (None: the cache is off)."""
    root = cache_root()
    if root is None:
        return None
    st = path.stat()
    tag = hashlib.sha256(f"{path.name}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:12]
    return root / "gguf" / f"{path.stem}-{tag}"


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence the GGUF conversion's notices and its own tqdm bars, for the load only."""
    from transformers import modeling_gguf_pytorch_utils as gguf_utils
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    bar = gguf_utils.tqdm
    gguf_utils.tqdm = functools.partial(bar, disable=True)
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        hf_logging.enable_progress_bar()
        gguf_utils.tqdm = bar


def _complete(folder: Path | None, what: str) -> bool:
    return folder is not None and (folder / f"{what}.done").is_file()


def _save(folder: Path, what: str, obj: Any) -> None:
    """Write a tokenizer or model into `folder` atomically: a temporary sibling folder, then renamed.
    A cache that cannot be written warns and is skipped."""
    tmp = folder.parent / f".{folder.name}.{what}.{uuid.uuid4().hex[:8]}"
    try:
        tmp.mkdir(parents=True)
        if what == "model":  # save_pretrained refuses a model loaded from GGUF: its config and tensors are plain
            from safetensors.torch import save_model

            obj.config.save_pretrained(str(tmp))
            save_model(obj, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        else:
            obj.save_pretrained(str(tmp))
        marker = tmp / f"{what}.done"
        marker.write_text("complete\n")
        folder.mkdir(parents=True, exist_ok=True)
        for item in [*(i for i in tmp.iterdir() if i != marker), marker]:  # the marker last: never a partial entry
            os.replace(item, folder / item.name)
        tmp.rmdir()
    except OSError as err:
        shutil.rmtree(tmp, ignore_errors=True)
        warnings.warn(f"could not cache the converted GGUF model in {folder} ({err}); set {CACHE_ENV}=off to "
                      "stop trying, or point it at a writable folder", stacklevel=3)


def load_gguf_tokenizer(path: Path) -> Any:
    """The tokenizer of a GGUF file, from the cache when it holds it (written there on first use)."""
    from transformers import AutoTokenizer

    folder = cache_dir(path)
    if _complete(folder, "tokenizer"):
        with _quiet():
            return AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    with _quiet():
        tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name, local_files_only=True)
    if folder is not None:
        _save(folder, "tokenizer", tokenizer)
    return tokenizer


def load_gguf_model(path: Path, dtype: torch.dtype = torch.float32, **kwargs: Any) -> Any:
    """The HF causal LM of a GGUF file (float32 values as transformers dequantizes them, then cast to `dtype`),
    from the cache when it holds it (written there on first use). `kwargs` go to `from_pretrained`."""
    from transformers import AutoModelForCausalLM

    folder = cache_dir(path)
    if _complete(folder, "model"):
        with _quiet():
            return AutoModelForCausalLM.from_pretrained(str(folder), dtype=dtype, local_files_only=True, **kwargs)
    with _quiet():
        model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32,
                                                     local_files_only=True, **kwargs)
    if folder is not None:
        _save(folder, "model", model)
    return model.to(dtype)
