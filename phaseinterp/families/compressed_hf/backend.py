"""`CompressedHFBackend`: a HF Llama-family model with training-free KV compression
(`kv_compression.compress_attention`) behind the backend interface.

Head and layer units are the HF backend's (the input of `self_attn.o_proj`, the attention
output). Compressed layers add gate units (branch 0: `compress_k`, 1: `compress_v`; canonical
[batch, entry, offset, kv_head, 1], the pool weights a) and entry units ([batch, entry, kv_head,
d_head], `compress_*.hook_out`), read and edited through nnsight on the wrapper's hook points:
`SetGate(Unit("gate", l, 0), "uniform")` turns a `score` or `evict` layer into `mean` for keys.
The card (`cfg`) is taken when the backend is built: build a new one after compressing again.
"""

from __future__ import annotations

import torch
from jaxtyping import Bool
from torch import Tensor

from phaseinterp.backends.base import Site
from phaseinterp.families.hf.backend import HFCausalLMBackend, _get
from phaseinterp.backends.kv_compression import compressed_layers
from phaseinterp.backends.units import BackendConfig


def _hook_site(envoy, scalar_gate: bool = False) -> Site:
    def set_output(value: Tensor) -> None:
        envoy.output = value

    site = Site(get=lambda: envoy.output, set=set_output)
    if scalar_gate:  # our gates are per KV head: canonical layout adds channel = 1
        site.to_canon = lambda raw: raw[..., None]
        site.from_canon = lambda canon, raw: canon[..., 0]
    return site


class CompressedHFBackend(HFCausalLMBackend):
    """HF causal LM backend with gate and entry units at the layers `compress_attention` wrapped.

    Args:
        model: a Llama-family HF causal LM, compressed or not (uncompressed: a plain HF backend).
        stride: the period to test when no layer is compressed (else the layers' strides are used).
    """

    def __init__(self, model: torch.nn.Module, stride: int | None = None, **kwargs) -> None:
        super().__init__(model, stride=stride, **kwargs)
        self.wrapped = compressed_layers(model)
        n = self.cfg.n_layers
        specs = [self.wrapped[l].spec if l in self.wrapped else None for l in range(n)]
        c = self.cfg
        self.cfg = BackendConfig(
            kind="hf", model_class=c.model_class, n_layers=n, n_heads=c.n_heads, n_kv_heads=c.n_kv_heads,
            d_head=c.d_head, d_model=c.d_model, vocab_size=c.vocab_size,
            layer_strides=tuple(None if s is None else s.stride for s in specs),
            gate_windows=tuple(None if s is None else s.window for s in specs),
            gate_branches=tuple(() if s is None else ("k", "v") for s in specs),
            user_stride=stride if not self.wrapped else None, n_ctx=c.n_ctx,
        )

    def _spec(self, layer: int):
        if layer not in self.wrapped:
            raise ValueError(f"layer {layer} is not compressed: compressed layers {sorted(self.wrapped)}")
        return self.wrapped[layer].spec

    def n_entries(self, layer: int, seq_len: int) -> int:
        return self._spec(layer).n_entries(seq_len)

    def gate_valid(self, layer: int, n_entries: int) -> Bool[Tensor, "entry offset"]:
        return torch.ones(n_entries, self._spec(layer).window, dtype=torch.bool)  # windows start at >= 0

    def gate_shape(self, layer: int) -> tuple[int, int]:
        self._spec(layer)
        return (self.cfg.n_kv_heads, 1)

    def entry_shape(self, layer: int) -> tuple[int, int]:
        self._spec(layer)
        return (self.cfg.n_kv_heads, self.cfg.d_head)

    def _site(self, site: str, layer: int, branch: int) -> Site:
        if site in ("head", "layer"):
            return super()._site(site, layer, branch)
        self._spec(layer)
        attn = _get(_get(self.nn, self.layers_path)[layer], self.attn_name)
        comp = getattr(attn, f"compress_{self.cfg.gate_branches[layer][branch]}")
        return _hook_site(comp.hook_gate, scalar_gate=True) if site == "gate" else _hook_site(comp.hook_out)
