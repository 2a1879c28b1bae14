"""`NSABackend`: an `NSATransformer` (Native Sparse Attention) behind the backend interface.

Sites are the model's TransformerLens hook points reached as nnsight modules, as for our own
model: heads `blocks.{l}.attn.hook_z` [batch, pos, head, d_head] (the gate-mixed sum of the three
branches, before `combine_heads`), layers `blocks.{l}.hook_attn_out`. NSA's compressor is an MLP,
not a softmax gate over offsets, so there are no gate units; its entries are read with
`run_with_cache` (`compress_k.hook_out`, docs/nsa.md). Knockout maps, patching of head outputs
and phase sweeps therefore run on NSA with the same calls as on every other model. Phase sweeps
run full forwards (one per distinct prompt) and branch knockout zeroes a branch output
(`blocks.{l}.attn.hook_z_{branch}`) with TransformerLens hooks; results record the model's own
`NSAConfig`.

Example:
    >>> from phaseinterp.model.nsa import NSAConfig, NSATransformer
    >>> backend = NSABackend(NSATransformer(NSAConfig(num_selected=1), seed=0))
    >>> backend.cfg.strides, [u.name for u in backend.units("kv_head")]
    ((8,), ['L0.KV0', 'L0.KV1', 'L1.KV0', 'L1.KV1'])
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
from jaxtyping import Float, Int
from torch import Tensor

from phaseinterp.backends import tl_hooks
from phaseinterp.backends.base import Backend, Site
from phaseinterp.families.hooked.backend import _hook_site, heads_summary
from phaseinterp.progress import progress_bar
from phaseinterp.backends.units import BackendConfig
from phaseinterp.model.nsa.attention import BRANCHES  # NSA's branches, in the order of its gates
from phaseinterp.units import Unit


def _zero_hook(query_pos: Tensor | None):
    def hook(z: Tensor, hook) -> Tensor:
        z = z.clone()
        if query_pos is None:
            z.zero_()
        else:
            z[torch.arange(len(z), device=z.device), query_pos.to(z.device)] = 0.0
        return z

    return hook


class NSABackend(tl_hooks.OwnModelSweep, Backend):
    """Backend for `phaseinterp.model.nsa.NSATransformer` (head and layer units)."""

    @classmethod
    def wrap(cls, model, stride: int | None = None) -> "NSABackend":
        if stride is not None:
            raise ValueError(f"stride={stride} is invalid for an NSA model: allowed None (its stride comes from its config)")
        return cls(model)

    @classmethod
    def trains_data_parallel(cls) -> bool:
        return True  # no mitigations (NSA compresses with an MLP: no gates), no compilation

    @classmethod
    def describe_card(cls, model_config: dict) -> list[str]:
        c = model_config
        return [f"NSA, {c['n_layers']} layers (compress block {c['compress_block']} / stride {c['compress_stride']}, "
                f"{c['num_selected']} selected blocks, window {c['sliding_window']})", f"d_model {c['d_model']}",
                heads_summary(c)]

    def selection_block(self) -> int:
        return self.model.cfg.selection_block

    def __init__(self, model) -> None:
        if not getattr(model, "is_nsa", False):
            raise ValueError(f"model of type {type(model).__name__} is invalid: allowed an NSATransformer")
        c = model.cfg
        cfg = BackendConfig(
            kind="nsa", model_class=type(model).__name__, n_layers=c.n_layers, n_heads=c.n_heads,
            n_kv_heads=c.n_kv_heads, d_head=c.d_head, d_model=c.d_model, vocab_size=c.vocab_size,
            layer_strides=(c.compress_stride,) * c.n_layers, gate_windows=(None,) * c.n_layers,
            gate_branches=((),) * c.n_layers, n_ctx=c.n_ctx)
        training = model.training
        super().__init__(model, cfg)
        model.train(training)  # no dropout: the caller's flag stays (a trainer's sweep must not flip it)

    def incremental_ok(self) -> bool:
        """Knockout and patching at the final position recompute only it (`families.nsa.final`), without hooks."""
        return not self.has_hooks() and not tl_hooks.has_hooks(self.model)

    def final_position_run(self, tokens: Tensor, query_pos: Tensor):
        from phaseinterp.families.nsa.final import NSAFinalRun

        return NSAFinalRun(self.model, tokens, query_pos)

    @torch.no_grad()
    def branch_logits(self, tokens: Int[Tensor, "batch pos"], query_pos: Int[Tensor, " batch"],
                      knockouts: Sequence[tuple[int, str]], *, positions: str = "all", batch_size: int = 128,
                      progress: bool = False) -> tuple[Float[Tensor, "batch vocab"], Float[Tensor, "unit batch vocab"]]:
        """(clean logits, logits with each (layer, branch) output zeroed at every position ("all")
        or at the query position ("final")), full forwards of `batch_size` rows in eval mode;
        `progress`: a bar over the forwards (`phaseinterp.progress`)."""
        for layer, branch in knockouts:
            self.check_unit(Unit("layer", layer))
            if branch not in BRANCHES:
                raise ValueError(f"branch={branch!r} is invalid: allowed one of {list(BRANCHES)}")
        model, training = self.model, self.model.training
        tokens, query_pos = tokens.to(self.device), query_pos.to(self.device)
        rows = torch.arange(len(tokens))
        clean, edited = [], [[] for _ in knockouts]
        model.eval()
        bar = progress_bar(math.ceil(len(tokens) / batch_size) * (1 + len(knockouts)), "branch knockout", progress,
                           unit="forward")
        try:
            for start in range(0, len(tokens), batch_size):
                t, q = tokens[start:start + batch_size], query_pos[start:start + batch_size]
                r = rows[:len(t)]
                clean.append(model(t)[r, q])
                bar.update()
                for i, (layer, branch) in enumerate(knockouts):
                    hook = _zero_hook(None if positions == "all" else q)
                    out = model.run_with_hooks(t, fwd_hooks=[(f"blocks.{layer}.attn.hook_z_{branch}", hook)])
                    edited[i].append(out[r, q])
                    bar.update()
        finally:
            model.train(training)
            bar.close()
        return torch.cat(clean), torch.stack([torch.cat(e) for e in edited])

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
