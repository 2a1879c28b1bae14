"""`NSABackend`: an `NSATransformer` (Native Sparse Attention) behind the backend interface.

Sites are the model's TransformerLens hook points reached as nnsight modules, as for our own
model: heads `blocks.{l}.attn.hook_z` [batch, pos, head, d_head] (the gate-mixed sum of the three
branches, before `combine_heads`), layers `blocks.{l}.hook_attn_out`. NSA's compressor is an MLP,
not a softmax gate over offsets, so there are no gate units; its entries are read with
`run_with_cache` (`compress_k.hook_out`, docs/nsa.md). Knockout maps, patching of head outputs
and phase sweeps therefore run on NSA with the same calls as on every other model.

Example:
    >>> from phaseinterp.model.nsa import NSAConfig, NSATransformer
    >>> backend = NSABackend(NSATransformer(NSAConfig(num_selected=1), seed=0))
    >>> backend.cfg.strides, [u.name for u in backend.units("kv_head")]
    ((8,), ['L0.KV0', 'L0.KV1', 'L1.KV0', 'L1.KV1'])
"""

from __future__ import annotations

from torch import Tensor

from phaseinterp.backends.base import Backend, Site
from phaseinterp.backends.hooked import _hook_site
from phaseinterp.backends.units import BackendConfig


class NSABackend(Backend):
    """Backend for `phaseinterp.model.nsa.NSATransformer` (head and layer units)."""

    def __init__(self, model) -> None:
        if not getattr(model, "is_nsa", False):
            raise ValueError(f"model of type {type(model).__name__} is invalid: allowed an NSATransformer")
        c = model.cfg
        cfg = BackendConfig(
            kind="nsa", model_class=type(model).__name__, n_layers=c.n_layers, n_heads=c.n_heads,
            n_kv_heads=c.n_kv_heads, d_head=c.d_head, d_model=c.d_model, vocab_size=c.vocab_size,
            layer_strides=(c.compress_stride,) * c.n_layers, gate_windows=(None,) * c.n_layers,
            gate_branches=((),) * c.n_layers, n_ctx=c.n_ctx)
        super().__init__(model, cfg)

    def _forward(self, tokens: Tensor) -> Tensor:
        return self.model(tokens)

    def _site(self, site: str, layer: int, branch: int) -> Site:
        block = self.nn.blocks[layer]
        if site == "head":
            return _hook_site(block.attn.hook_z)
        if site == "layer":
            return _hook_site(block.hook_attn_out)
        raise ValueError(f"site={site!r} is invalid for an NSA model: allowed 'head' or 'layer' (NSA compresses "
                         "with an MLP: no gate units; read entries with run_with_cache)")


__all__ = ["NSABackend"]
