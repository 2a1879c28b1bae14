"""A compressed layer's gates as the gate interventions see them, the same on every backend.

`backend.compression(layer, branch)` describes one compressor branch: its `CompressionConfig`
(window W, stride S, gate kind, layout: which window slots lie before position 0 and which gate
map each offset uses) and where its gate logits live:

    "hook"        a site of their own (our model's `hook_gate_logits`): edits there run before
                  the model's own softmax.
    "projection"  only inside the model's forward (HF DeepSeek-V4): the backend rebuilds them from
                  the gate projection's output and the offset bias (`slot_logits`, bit for bit
                  what the HF compressor computes) and writes the softmax of the edited logits
                  into the gate weights.

`slot_logits` is also how gate cycling works on a backend: it rebuilds the logits with every
offset using the gate map and bias of offset (i - delta) mod W (`edits.CycleGate`).

Example:
    >>> from phaseinterp.backends import DeepseekV4Backend
    >>> from phaseinterp.backends.tiny import tiny_deepseek_v4
    >>> comp = DeepseekV4Backend(tiny_deepseek_v4()).compression(1)  # HF DeepSeek-V4, a CSA layer
    >>> comp.cc.window, comp.cc.stride, comp.cc.gate, comp.logits
    (8, 4, 'vector', 'projection')
    >>> backend.compression(0, 1).branch, backend.compression(0, 1).logits  # our W4/S4: the value branch
    ('v', 'hook')
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from jaxtyping import Float
from torch import Tensor

from phaseinterp.config import CompressionConfig
from phaseinterp.gates import GateKind, gate_kind
from phaseinterp.model.compressor import map_index, n_maps, slot_positions

LOGIT_PLACES = ("hook", "projection")


@dataclass(frozen=True)
class Compression:
    """One compressor branch of one layer.

    Attributes:
        layer: the layer.
        branch: "kv" (tied), "k" or "v", as in `BackendConfig.gate_branches`.
        cc: the layer's `CompressionConfig` (for HF DeepSeek-V4 the equivalent of our
            "deepseek-csa" / "hca" layouts, `convert.compression_config_from_hf`).
        logits: where the gate logits live, "hook" or "projection" (module docstring).

    `cc` and `kind` are the attributes our `Compressor` module has too, so code that reads a
    layer's geometry takes either.
    """

    layer: int
    branch: str
    cc: CompressionConfig
    logits: str

    def __post_init__(self) -> None:
        if self.logits not in LOGIT_PLACES:
            raise ValueError(f"logits={self.logits!r} is invalid: allowed one of {list(LOGIT_PLACES)}")

    @property
    def kind(self) -> GateKind:
        return gate_kind(self.cc.gate)


def slot_logits(projection: Float[Tensor, "batch pos row kv_head channel"], cc: CompressionConfig,
                bias: Float[Tensor, "bias_row kv_head channel"] | None, n_entries: int, delta: int = 0
                ) -> Float[Tensor, "batch entry offset kv_head channel"]:
    """Gate logits of every window slot from per-token gate projections, -inf before position 0.

    Args:
        projection: each token's gate logits (without bias) under every gate-map row:
            row `c * n_maps + m` is map m of chunking c (`Compressor.W_Z`'s rows; HF CSA: row 0
            the `a` half of `gate_proj`, row 1 the `b` half).
        cc: the layer's config (window, stride, layout, chunkings, gate maps).
        bias: the offset bias, row `c * W + i` for offset i of chunking c (None: no bias).
        n_entries: complete windows.
        delta: cycle the gate parameters: offset i uses the map and bias of offset
            (i - delta) mod W (0: the model's own logits).
    """
    W, k = cc.window, cc.chunkings
    dev = projection.device
    src = (torch.arange(W, device=dev) - delta) % W
    chunk = torch.arange(n_entries, device=dev) % k  # entry j belongs to chunking j mod k
    rows = chunk[:, None] * n_maps(cc, cc.gate_maps) + map_index(cc, cc.gate_maps).to(dev)[src][None]
    pos = slot_positions(cc, n_entries, dev)
    logits = projection[:, pos.clamp(min=0), rows]  # [batch, entry, offset, kv_head, channel]
    if bias is not None:
        logits = logits + bias[chunk[:, None] * W + src[None]].to(dev)
    return logits.masked_fill((pos < 0)[None, :, :, None, None], float("-inf"))


__all__ = ["Compression", "LOGIT_PLACES", "slot_logits"]
