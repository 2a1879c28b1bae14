"""Load a GGUF file (the real models the registry packages ship) as a HF model and tokenizer, once.

transformers reads a GGUF file with `gguf`'s reader, which parses every metadata field in Python,
the tokenizer's vocabulary included, once for the tokenizer, once for the config and once for the weights;
`load_gguf` parses it once for all three (`one_parse`; docs/backends.md has the measured first-load times,
from `benchmarks/gguf_load.py`). The first load also writes the converted model (float32 safetensors,
the dequantized values as transformers made them, unchanged) and tokenizer to a cache folder, and later
loads read that folder (7.4 s and 0.6 s there; Gemma's includes the hash check of its assembled file).
The folder is keyed by the GGUF file's name, size and modification time (a reinstalled package gets a
new entry) and written atomically (a temporary folder, renamed).

Cache location: `$PHASEINTERP_CACHE` when set (`off` disables the cache), else
`$XDG_CACHE_HOME/phaseinterp` or `~/.cache/phaseinterp`. Gemma 3 270M takes 1.1 GB there, SmolLM2 0.5 GB;
delete the folder to reclaim it. A cache that cannot be written is reported and skipped, never fatal.
Each load from the cache marks its entry used; writing a new entry removes the entries no load has used for
`STALE_DAYS` days (an older install's conversion, for example), and says which.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import shutil
import threading
import time
import uuid
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

CACHE_ENV = "PHASEINTERP_CACHE"
STALE_DAYS = 30


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


#: held while `one_parse` swaps `gguf.GGUFReader` (process-wide)
_SWAP = threading.RLock()


@contextlib.contextmanager
def one_parse() -> Iterator[None]:
    """Inside, every `gguf.GGUFReader` of one file is the first one made: transformers makes a reader (parsing
    every metadata field, the vocabulary included, in Python) for the tokenizer, again for the config and
    again for the weights, and most of a first load's time went to those three parses (Gemma 3 270M: 113 of
    171 s profiled). The readers only read the file, so one serves all three. The swap is process-wide, so one
    thread at a time holds it: a load in a second thread waits (two overlapping swaps could leave the
    first one's reader installed after both ended)."""
    import gguf

    with _SWAP:
        make = gguf.GGUFReader
        made: dict[tuple[str, str], Any] = {}

        def reader(path: Any, mode: str = "r") -> Any:
            key = (os.path.realpath(path), mode)
            if key not in made:
                made[key] = make(path, mode)
            return made[key]

        gguf.GGUFReader = reader
        try:
            yield
        finally:
            gguf.GGUFReader = make



def _complete(folder: Path | None, what: str) -> bool:
    return folder is not None and (folder / f"{what}.done").is_file()


def _save(folder: Path, what: str, write: Callable[[Path], None]) -> None:
    """Run `write(tmp)` into a temporary sibling folder, then move its files into `folder`, the `what.done` marker
    last (a killed writer never leaves an entry that reads as complete). A cache that cannot be written warns and
    is skipped."""
    tmp = folder.parent / f".{folder.name}.{what}.{uuid.uuid4().hex[:8]}"
    try:
        tmp.mkdir(parents=True)
        write(tmp)
        marker = tmp / f"{what}.done"
        marker.write_text("complete\n")
        folder.mkdir(parents=True, exist_ok=True)
        for item in [*(i for i in tmp.iterdir() if i != marker), marker]:
            os.replace(item, folder / item.name)
        tmp.rmdir()
    except OSError as err:
        shutil.rmtree(tmp, ignore_errors=True)
        warnings.warn(f"could not cache the converted GGUF model in {folder} ({err}); set {CACHE_ENV}=off to "
                      "stop trying, or point it at a writable folder", stacklevel=4)


def _last_used(entry: Path) -> float:
    """When a load last read or wrote `entry` (its newest `.done` marker's modification time; 0: none)."""
    return max((m.stat().st_mtime for m in entry.glob("*.done")), default=0.0)


def prune(root: Path, keep: Path, now: float, stale_days: float = STALE_DAYS) -> list[Path]:
    """Remove the cache entries under `root` (but `keep`) unused for `stale_days` days, and the temporary
    folders of writers killed as long ago; returns what was removed."""
    stale = [entry for entry in (root.iterdir() if root.is_dir() else ()) if entry.is_dir() and entry != keep
             and now - (_last_used(entry) or entry.stat().st_mtime) > stale_days * 86400]
    for entry in stale:
        shutil.rmtree(entry, ignore_errors=True)
    return stale


def _converted(path: Path, what: str, load: Callable[..., Any], write: Callable[[Any, Path], None]) -> Any:
    """`load(folder)` from the cache when it holds `what` (marking it used), else `load(gguf folder,
    gguf_file=name)`, then cached with `write(obj, folder)` after stale entries are pruned."""
    folder = cache_dir(path)
    cached = _complete(folder, what)
    with _quiet():
        obj = load(str(folder)) if cached else load(str(path.parent), gguf_file=path.name)
    if folder is not None and cached:
        with contextlib.suppress(OSError):  # a read-only cache still serves loads
            os.utime(folder / f"{what}.done")
    elif folder is not None:
        gone = prune(folder.parent, folder, time.time())
        if gone:
            warnings.warn(f"removed {len(gone)} GGUF cache entr{'y' if len(gone) == 1 else 'ies'} unused for "
                          f"{STALE_DAYS} days: {', '.join(g.name for g in gone)}", stacklevel=3)
        _save(folder, what, functools.partial(write, obj))
    return obj


def _write_model(model: Any, folder: Path) -> None:
    """Config and float32 safetensors (`save_pretrained` refuses a model loaded from GGUF)."""
    from safetensors.torch import save_model

    model.config.save_pretrained(str(folder))
    save_model(model, str(folder / "model.safetensors"), metadata={"format": "pt"})


def load_gguf_tokenizer(path: Path) -> Any:
    """The tokenizer of a GGUF file, from the cache when it holds it (written there on first use)."""
    from transformers import AutoTokenizer

    return _converted(path, "tokenizer", functools.partial(AutoTokenizer.from_pretrained, local_files_only=True),
                      lambda tokenizer, folder: tokenizer.save_pretrained(str(folder)))


def load_gguf(path: Path, dtype: torch.dtype = torch.float32, **kwargs: Any) -> tuple[Any, Any]:
    """(model, tokenizer) of a GGUF file (`load_gguf_model`, `load_gguf_tokenizer`), its metadata parsed once
    when they are converted (`one_parse`)."""
    with one_parse():
        tokenizer = load_gguf_tokenizer(path)
        return load_gguf_model(path, dtype, **kwargs), tokenizer


def load_gguf_model(path: Path, dtype: torch.dtype = torch.float32, **kwargs: Any) -> Any:
    """The HF causal LM of a GGUF file (float32 values as transformers dequantizes them, then cast to `dtype`),
    from the cache when it holds it (written there on first use). `kwargs` go to `from_pretrained`."""
    from transformers import AutoModelForCausalLM

    load = functools.partial(AutoModelForCausalLM.from_pretrained, dtype=torch.float32, local_files_only=True, **kwargs)
    return _converted(path, "model", load, _write_model).to(dtype)
