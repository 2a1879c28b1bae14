"""Backends: one interface (tokens -> logits, named units, reads, interventions) for our model,
HuggingFace DeepSeek-V4 and any HuggingFace causal LM, through nnsight (see docs/backends.md).

The engine lives here (`base`, `edits`, `batching`, `compression`, the final-position paths); each
model family's Backend class lives in its family's folder (`phaseinterp/families/NAME/backend.py`)
and is exported here by name, imported on first use (so that importing a family's backend, which
imports this engine, never waits on this package).

Example:
    >>> from phaseinterp import HookedCompressedTransformer, preset
    >>> from phaseinterp.backends import Replace, Unit, backend_for
    >>> backend = backend_for(HookedCompressedTransformer(preset("tiny-w4s4"), seed=0))
    >>> [u.name for u in backend.units("gate")]
    ['L0.G0', 'L0.G1', 'L1.G0', 'L1.G1']
"""

import importlib

import beartype  # noqa: F401  (import before nnsight, see RECIPES.md)

from phaseinterp.backends.base import Backend  # noqa: E402
from phaseinterp.backends.batching import BatchedNNsight  # noqa: E402
from phaseinterp.backends.compression import Compression  # noqa: E402
from phaseinterp.backends.edits import CycleGate, Edit, Replace, SetEntries, SetGate  # noqa: E402
from phaseinterp.backends.kv_compression import KVCompression, compress_attention, restore_attention  # noqa: E402
from phaseinterp.backends.presses import SelectionPress, apply_attention, press_attention, restore_presses  # noqa: E402
from phaseinterp.backends.units import BackendConfig, Read  # noqa: E402
from phaseinterp.units import UNIT_KINDS, Unit  # noqa: E402

#: name -> the module defining it, imported on first use (the families' Backend classes and what
#: builds on them)
_LAZY = {
    "add_gate_hooks": "phaseinterp.families.bridges.backend",
    "bridge_hook_name": "phaseinterp.families.bridges.backend",
    "CompressedHFBackend": "phaseinterp.families.compressed_hf.backend",
    "DeepseekV4Backend": "phaseinterp.families.deepseek_v4.backend",
    "HFCausalLMBackend": "phaseinterp.families.hf.backend",
    "HookedBackend": "phaseinterp.families.hooked.backend",
    "HookedNNsightBackend": "phaseinterp.families.hooked.backend",
    "NSABackend": "phaseinterp.families.nsa.backend",
    "backend_for": "phaseinterp.families.resolve",
    "resolve_model": "phaseinterp.families.resolve",
    "load_pretrained": "phaseinterp.backends.load",
    "load_smollm2": "phaseinterp.backends.smollm2",
    "compress_gemma3": "phaseinterp.families.gemma3.attention",
    "load_gemma3_270m": "phaseinterp.families.gemma3.load",
    "smollm2_backend": "phaseinterp.backends.smollm2",
}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'phaseinterp.backends' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = ["Backend", "apply_attention", "BackendConfig", "BatchedNNsight", "CompressedHFBackend", "Compression", "CycleGate",
           "DeepseekV4Backend", "Edit", "add_gate_hooks", "bridge_hook_name",
           "HFCausalLMBackend", "HookedBackend", "HookedNNsightBackend", "KVCompression", "NSABackend", "Read", "Replace", "SetEntries",
           "SetGate", "UNIT_KINDS", "Unit", "backend_for", "compress_attention", "compress_gemma3", "load_gemma3_270m",
           "load_pretrained", "load_smollm2", "press_attention",
           "resolve_model", "restore_attention", "restore_presses", "SelectionPress", "smollm2_backend"]
