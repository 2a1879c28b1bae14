"""`HookedBackend`: our `HookedCompressedTransformer` behind the backend interface.

Every intervention and sweep runs on a backend; our model runs behind `HookedBackend`, which
answers the engine's primitives with TransformerLens hooks and in-place parameters
(`backends.tl_hooks`: final logits, batched units, captures, hooks; gate cycling by rolling the
gate parameters; the phase sweep's full forwards) and adds the incremental final-position path
(`backends.incremental.FinalPositionRun`). `HookedNNsightBackend` is the same model through the
generic nnsight engine of `Backend` (as HuggingFace models run): the edits (`Replace`, `SetGate`,
`CycleGate`, ...) and reads of both are nnsight's, and the parity tests compare the two engines.

Sites are the model's TransformerLens hook points (docs/hooks.md), reached as nnsight modules:
heads `blocks.{l}.attn.hook_z` [batch, pos, head, d_head], layers `blocks.{l}.hook_attn_out`,
gates `blocks.{l}.attn.compress_{k,v,kv}.hook_gate` and gate logits `...hook_gate_logits` (scalar
gates get a channel axis of 1), entries `...compress_*.hook_out` (after RMSNorm, before RoPE).

Scores and patterns exist only on the explicit attention path (a HookPoint nnsight observes is
not a TransformerLens hook, so the fused path would skip it): `attention_pattern` switches the
explicit path on for the one layer and forward it reads (`model.set_explicit_attention(True)`
does it for every layer, at the cost of a [pos, key] score matrix per layer) and restores the
previous setting afterwards, also on error. Knockouts
and gate edits do not need it and run on the fused path.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterator, Sequence

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from phaseinterp.backends import tl_hooks
from phaseinterp.backends.base import Backend, Site
from phaseinterp.backends.compression import Compression
from phaseinterp.backends.incremental import FinalPositionRun
from phaseinterp.backends.units import BackendConfig
from phaseinterp.checks import check_at_least_one
from phaseinterp.gates import gate_kind
from phaseinterp.model import HookedCompressedTransformer
from phaseinterp.model.compressor import window_starts
from phaseinterp.model.attention import engine_trace
from phaseinterp.units import Unit


def _hook_site(envoy) -> Site:
    def set_output(value: Tensor) -> None:
        envoy.output = value

    return Site(get=lambda: envoy.output, set=set_output)


def heads_summary(cfg: dict) -> str:
    """"4 heads / 1 KV head" of a stored config (the catalog's phrase)."""
    kv = cfg.get("n_kv_heads")
    return f"{cfg.get('n_heads')} heads / {kv} KV head{'s' if kv != 1 else ''}"


def _layer(layer: Any) -> str:
    if not isinstance(layer, dict):
        return str(layer)
    layout = "" if layer.get("layout", "generic") == "generic" else f" {layer['layout']}"
    return f"W{layer['window']}/S{layer['stride']} {layer['gate']} gate{layout}"


def _runs(items: list[str]) -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []
    for item in items:
        if out and out[-1][0] == item:
            out[-1] = (item, out[-1][1] + 1)
        else:
            out.append((item, 1))
    return out


class HookedNNsightBackend(Backend):
    """`HookedCompressedTransformer` through the generic nnsight engine (see `HookedBackend`).

    Example:
        >>> from phaseinterp import HookedCompressedTransformer, preset
        >>> from phaseinterp.backends import HookedNNsightBackend, Replace, Unit
        >>> backend = HookedNNsightBackend(HookedCompressedTransformer(preset("tiny-w4s4"), seed=0))
        >>> tokens = torch.randint(0, 512, (1, 16))
        >>> with backend.intervene(Replace(Unit("kv_head", 0, 0))):
        ...     knocked = backend(tokens)
        >>> knocked.shape
        torch.Size([1, 16, 512])
    """

    def __init__(self, model: HookedCompressedTransformer) -> None:
        if not isinstance(model, HookedCompressedTransformer):
            raise ValueError(f"model of type {type(model).__name__} is invalid: allowed HookedCompressedTransformer")
        c = model.cfg
        ccs = [c.compression(layer) for layer in range(c.n_layers)]
        cfg = BackendConfig(
            kind="hooked", model_class=type(model).__name__, n_layers=c.n_layers, n_heads=c.n_heads,
            n_kv_heads=c.n_kv_heads, d_head=c.d_head, d_model=c.d_model, vocab_size=c.vocab_size,
            layer_strides=tuple(None if cc is None else cc.stride for cc in ccs),
            gate_windows=tuple(None if cc is None else cc.window for cc in ccs),
            gate_branches=tuple(() if cc is None else (("kv",) if cc.kv == "tied" else ("k", "v")) for cc in ccs),
            n_ctx=c.n_ctx,
        )
        training = model.training
        super().__init__(model, cfg)
        model.train(training)  # no dropout: the caller's flag stays (a trainer's sweep must not flip it)

    def _forward(self, tokens: Tensor) -> Tensor:
        return self.model(tokens)

    def _cc(self, layer: int):
        cc = self.model.cfg.compression(layer)
        if cc is None:
            raise ValueError(f"layer {layer} is full attention: it has no compressor")
        return cc

    def n_entries(self, layer: int, seq_len: int) -> int:
        return self._cc(layer).n_entries(seq_len)

    def gate_valid(self, layer: int, n_entries: int) -> Bool[Tensor, "entry offset"]:
        cc = self._cc(layer)
        starts = window_starts(cc, n_entries)
        return (starts[:, None] + torch.arange(cc.window)) >= 0

    def gate_shape(self, layer: int) -> tuple[int, int]:
        c = self.model.cfg
        return (c.n_kv_heads, c.d_head if gate_kind(self._cc(layer).gate).per_channel else 1)

    def entry_shape(self, layer: int) -> tuple[int, int]:
        self._cc(layer)
        return (self.model.cfg.n_kv_heads, self.model.cfg.d_head)

    def compression(self, layer: int, branch: int = 0) -> Compression:
        cc = self._cc(layer)
        self.check_unit(Unit("gate", layer, branch))
        return Compression(layer, self.cfg.gate_branches[layer][branch], cc, logits="hook")

    def _module(self, layer: int, branch: int):
        return getattr(self.model.blocks[layer].attn, f"compress_{self.cfg.gate_branches[layer][branch]}")

    def _gate_projection(self, layer: int, branch: int) -> Tensor:
        # every map row applied to every token of the compressor's input (the model applies each
        # offset's map to its own window slots only; cycling needs the other maps too)
        comp = self._module(layer, branch)
        if not comp.kind.learned:
            raise ValueError(f"layer {layer}: gate={comp.cc.gate!r} has no gate projections")
        h = getattr(self.nn.blocks[layer].attn, f"compress_{self.cfg.gate_branches[layer][branch]}").input
        logits = torch.einsum("btd,rde->btre", h, comp.W_Z)
        return logits.view(*logits.shape[:3], *self.gate_shape(layer))

    def _gate_bias(self, layer: int, branch: int) -> Tensor | None:
        comp = self._module(layer, branch)
        bias = getattr(comp, "b_Z", None)
        return None if bias is None else bias.view(bias.shape[0], *self.gate_shape(layer))

    def _site(self, site: str, layer: int, branch: int) -> Site:
        block = self.nn.blocks[layer]
        if site == "head":
            return _hook_site(block.attn.hook_z)
        if site == "layer":
            return _hook_site(block.hook_attn_out)
        compressor = getattr(block.attn, f"compress_{self.cfg.gate_branches[layer][branch]}")
        if site == "entry":
            return _hook_site(compressor.hook_out)
        s = _hook_site(compressor.hook_gate_logits if site == "gate_logits" else compressor.hook_gate)
        if not gate_kind(self._cc(layer).gate).per_channel:
            s.to_canon = lambda raw: raw[..., None]
            s.from_canon = lambda canon, raw: canon[..., 0]
        return s

    def attention_pattern(self, tokens: Int[Tensor, "batch pos"], layer: int) -> Float[Tensor, "batch head pos key"]:
        """`blocks.{layer}.attn.hook_pattern` through nnsight (explicit attention for this call only;
        the key axis of compressed layers is documented in docs/hooks.md)."""
        self.check_unit(Unit("layer", layer))
        tokens = self._check_tokens(tokens)
        attn = self.model.blocks[layer].attn
        before = attn.explicit
        store: dict[str, Tensor] = {}
        attn.explicit = True  # this layer only: the others keep their (fused) path
        try:
            with engine_trace(), torch.no_grad(), self.nn.trace(tokens):  # layers other than this one stay fused
                store["pattern"] = self.nn.blocks[layer].attn.hook_pattern.output.detach().clone()
        finally:
            attn.explicit = before
        return store["pattern"]


def _leaf(x: Tensor, hook) -> Tensor:
    return x.detach().requires_grad_(True)


class HookedBackend(tl_hooks.OwnModelSweep, HookedNNsightBackend):
    """Backend for `HookedCompressedTransformer`: the engine's primitives through TransformerLens
    hooks on the model (any of its hook names, `model.hook_dict`), the incremental final-position
    path, gate cycling in place; edits of enclosing `intervene` blocks run through nnsight.

    Example:
        >>> from phaseinterp import HookedCompressedTransformer, preset
        >>> from phaseinterp.backends import HookedBackend, Replace, Unit
        >>> backend = HookedBackend(HookedCompressedTransformer(preset("tiny-w4s4"), seed=0))
        >>> tokens = torch.randint(0, 512, (2, 16))
        >>> zero = {"blocks.0.hook_resid_pre": lambda x: torch.zeros_like(x)}  # any hook of the model
        >>> backend.run_units(tokens, torch.tensor([15, 7]), [{}, zero]).shape
        torch.Size([2, 2, 512])
    """

    engine = "transformer_lens"
    edits_reach_module = True

    # what the trainer may do with our model (asked through its family, `families.hooked`)
    @classmethod
    def wrap(cls, model, stride: int | None = None) -> "HookedBackend":
        if stride is not None:
            raise ValueError(f"stride={stride} is invalid for our model: allowed None (its strides come from its config)")
        return cls(model)

    @classmethod
    def trains_with_mitigations(cls) -> bool:
        return True

    @classmethod
    def trains_compiled(cls) -> bool:
        return True

    @classmethod
    def trains_data_parallel(cls) -> bool:
        return True

    @classmethod
    def unembeds_at(cls) -> bool:
        return True

    @classmethod
    def describe_card(cls, model_config: dict) -> list[str]:
        """E.g. ["2 layers (W4/S4 scalar gate x2)", "d_model 64", "4 heads / 1 KV head"]."""
        layers = [_layer(layer) for layer in model_config.get("layers", [])]
        grouped = ", ".join(f"{kind} x{n}" if n > 1 else kind for kind, n in _runs(layers))
        return [f"{model_config.get('n_layers', len(layers))} layers ({grouped})", f"d_model {model_config.get('d_model')}",
                heads_summary(model_config)]

    def hook_names(self) -> list[str]:
        return list(self.model.hook_dict)

    def check_hook_name(self, name: str) -> None:
        self.model.check_hook_name(name)

    def has_hooks(self) -> bool:
        return bool(self._active) or tl_hooks.has_hooks(self.model)

    def hooks(self, fwd_hooks: Sequence[tuple[str, Callable]] = ()):
        if self._active:
            return super().hooks(fwd_hooks)
        return tl_hooks.hooked(self.model, fwd_hooks)

    def final_logits(self, tokens: Int[Tensor, "batch pos"], query_pos: Int[Tensor, " batch"],
                     fwd_hooks: Sequence[tuple[str, Callable]] = (), *, grad: bool = False
                     ) -> Float[Tensor, "batch vocab"]:
        """As `Backend.final_logits`; with `grad` the graph starts at the embeddings
        (`hook_embed` made a leaf, so it exists with frozen parameters; they get no gradient)."""
        if self._active:
            return super().final_logits(tokens, query_pos, fwd_hooks, grad=grad)
        hooks = [("hook_embed", _leaf), *fwd_hooks] if grad else fwd_hooks
        return tl_hooks.final_logits(self.model, tokens, query_pos, hooks, grad=grad)

    def run_units(self, tokens: Int[Tensor, "batch pos"], query_pos: Int[Tensor, " batch"],
                  units: Sequence[dict[str, Callable[[Tensor], Tensor]]], *, max_rows: int = 2048,
                  base_hooks: Sequence[tuple[str, Callable]] = ()) -> Float[Tensor, "unit batch vocab"]:
        if self._active:
            return super().run_units(tokens, query_pos, units, max_rows=max_rows, base_hooks=base_hooks)
        check_at_least_one("max_rows", max_rows)
        return tl_hooks.run_units(self.model, tokens, query_pos, units, max_rows=max_rows, base_hooks=base_hooks)

    def capture(self, tokens: Int[Tensor, "batch pos"], names: Sequence[str],
                sites: Int[Tensor, "batch site"] | None = None) -> dict[str, Tensor]:
        if self._active:
            return super().capture(tokens, names, sites)
        return tl_hooks.capture(self.model, tokens, names, sites)

    def incremental_ok(self) -> bool:
        return not self.has_hooks()

    def final_position_run(self, tokens: Int[Tensor, "batch pos"], query_pos: Int[Tensor, " batch"]) -> FinalPositionRun:
        if self._active:
            raise ValueError("the final-position path ignores the edits of an enclosing intervene block: "
                             "allowed outside it (or method='hooks')")
        return FinalPositionRun(self.model, tokens, query_pos)

    @contextmanager
    def cycled_gates(self, units: Sequence[Unit], delta: int, *, payload: bool = False) -> Iterator[None]:
        """The gate parameters themselves rolled (`gate_index`, `b_Z`; each chunking's bias rows on
        their own), and with `payload` the payload maps too (`payload_index`): then offset i reads
        every parameter of offset (i - delta) mod W, i.e. the window's slots rolled by -delta.
        Restored on exit, also on error."""
        saved = []
        for u in units:
            comp = self._module(self.check_unit(u).layer, u.index)
            saved.append((comp, comp.gate_index.clone(), comp.payload_index.clone(),
                          comp.b_Z.detach().clone() if hasattr(comp, "b_Z") else None))
        try:
            with torch.no_grad():
                for comp, index, pindex, bias in saved:
                    comp.gate_index.copy_(torch.roll(index, delta))
                    if payload:
                        comp.payload_index.copy_(torch.roll(pindex, delta))
                    if bias is not None:
                        rows = bias.view(comp.cc.chunkings, comp.cc.window, -1)
                        comp.b_Z.copy_(torch.roll(rows, delta, dims=1).view_as(bias))
            yield
        finally:
            with torch.no_grad():
                for comp, index, pindex, bias in saved:
                    comp.gate_index.copy_(index)
                    comp.payload_index.copy_(pindex)
                    if bias is not None:
                        comp.b_Z.copy_(bias)

