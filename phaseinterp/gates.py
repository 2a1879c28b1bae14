"""The registry of gate kinds: how a compressor turns the tokens of a window into the weights that
fold them into one entry. Adding a kind is one `register_gate` call (here, or in user code); the
config, the compressor, the interventions and the backends ask the registry, not the name.

    scalar   one logit per window offset and KV head, softmax over the offsets (the paper's gate)
    vector   one logit per offset and channel (DeepSeek-V4's compressor)
    uniform  no gate parameters: every valid token weighs 1/W

Example:
    >>> gate_kind("vector").shape(n_kv_heads=2, d_head=16), gate_kind("uniform").learned
    ((2, 16), False)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from phaseinterp.registry import Registry


def softmax(logits: Any, dim: int) -> Any:
    """Normalize gate logits over the window offsets (-inf marks slots before position 0)."""
    return logits.softmax(dim=dim)


@dataclass(frozen=True)
class GateKind:
    """One gate kind.

    Attributes:
        name: the value of `CompressionConfig.gate`.
        learned: True when the gate has parameters (`W_Z`, optional `b_Z`) and logits; False for a
            fixed average (then interventions that edit or attribute gate logits skip it).
        per_channel: one weight per channel (`d_head`) instead of one per KV head.
        normalize: logits [batch, entry, offset, ...] -> weights, over `dim` (the offset axis).
    """

    name: str
    learned: bool = True
    per_channel: bool = False
    normalize: Callable[[Any, int], Any] = softmax

    def shape(self, n_kv_heads: int, d_head: int) -> tuple[int, ...]:
        """Trailing shape of the gate per offset: (kv_head, d_head) per channel, else (kv_head,)."""
        return (n_kv_heads, d_head) if self.per_channel else (n_kv_heads,)

    def logit_width(self, n_kv_heads: int, d_head: int) -> int | None:
        """Output width of `W_Z` (None without gate parameters)."""
        if not self.learned:
            return None
        return n_kv_heads * d_head if self.per_channel else n_kv_heads


_REGISTRY: Registry[GateKind] = Registry(GateKind, noun="gate kind", arg="kind", field="gate")
GATE_KINDS: dict[str, GateKind] = _REGISTRY.entries

register_gate = _REGISTRY.register  # add a GateKind (a name already taken raises ValueError); returns it
gate_kind = _REGISTRY.get  # the GateKind of that name; ValueError listing the registered names otherwise


register_gate(GateKind("scalar"))
register_gate(GateKind("vector", per_channel=True))
register_gate(GateKind("uniform", learned=False))

__all__ = ["GATE_KINDS", "GateKind", "gate_kind", "register_gate", "softmax"]
