"""Backends: one interface (tokens -> logits, named units, reads, interventions) for our model,
HuggingFace DeepSeek-V4 and any HuggingFace causal LM, through nnsight (see docs/backends.md).

Example:
    >>> from phaseinterp import HookedCompressedTransformer, preset
    >>> from phaseinterp.backends import Replace, Unit, backend_for
    >>> backend = backend_for(HookedCompressedTransformer(preset("tiny-w4s4"), seed=0))
    >>> [u.name for u in backend.units("gate")]
    ['L0.G0', 'L0.G1', 'L1.G0', 'L1.G1']
"""

import beartype  # noqa: F401  (import before nnsight, see RECIPES.md)

from phaseinterp.backends.base import Backend  # noqa: E402
from phaseinterp.backends.batching import BatchedNNsight  # noqa: E402
from phaseinterp.backends.bridge import add_gate_hooks, bridge_hook_name  # noqa: E402
from phaseinterp.backends.compressed_hf import CompressedHFBackend  # noqa: E402
from phaseinterp.backends.deepseek_v4 import DeepseekV4Backend  # noqa: E402
from phaseinterp.backends.compression import Compression  # noqa: E402
from phaseinterp.backends.edits import CycleGate, Edit, Replace, SetEntries, SetGate  # noqa: E402
from phaseinterp.backends.hf import HFCausalLMBackend  # noqa: E402
from phaseinterp.backends.hooked import HookedBackend, HookedNNsightBackend  # noqa: E402
from phaseinterp.backends.kv_compression import KVCompression, compress_attention, restore_attention  # noqa: E402
from phaseinterp.backends.nsa import NSABackend  # noqa: E402
from phaseinterp.backends.load import backend_for, load_pretrained  # noqa: E402
from phaseinterp.backends.resolve import resolve_model  # noqa: E402
from phaseinterp.backends.smollm2 import load_smollm2, smollm2_backend  # noqa: E402
from phaseinterp.backends.units import BackendConfig, Read  # noqa: E402
from phaseinterp.units import UNIT_KINDS, Unit  # noqa: E402

__all__ = ["Backend", "BackendConfig", "BatchedNNsight", "CompressedHFBackend", "Compression", "CycleGate",
           "DeepseekV4Backend", "Edit", "add_gate_hooks", "bridge_hook_name",
           "HFCausalLMBackend", "HookedBackend", "HookedNNsightBackend", "KVCompression", "NSABackend", "Read", "Replace", "SetEntries",
           "SetGate", "UNIT_KINDS", "Unit", "backend_for", "compress_attention", "load_pretrained", "load_smollm2",
           "resolve_model", "restore_attention", "smollm2_backend"]
