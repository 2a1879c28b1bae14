"""Final-position knockout and patching through a model's own decoding cache (DeepSeek-V4 CSA/HCA).

An edit at the final (query) position t of a row changes nothing at positions < t. Models whose
cache is sequential state (DeepSeek-V4: sliding-window keys, compressor buffers of unfinished
windows, running compressed entries, the indexer's own compressor and entries; `hc_mult` residual
streams) cannot be cut back to a position, but they can decode: one prefill of positions < t
leaves exactly the state position t reads. `DecodeFinalRun` prefills each group of rows sharing t
once, then, for a chunk of units, tiles that state along the batch (one copy per unit, so units
never see each other; the base state is never touched) and decodes position t for every unit at
once through the model's own forward, the unit's heads replaced at its layer by a hook on the
module whose input holds the heads (`head_module(layer)`). The window that closes at t, the
indexer's choice among the prefix's entries and everything else at t are recomputed by the model
itself, so the result equals a full forward with the same edit (tests: 1e-4 on tiny random
configs). A unit costs one position through every layer (the model is called whole).
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Sequence

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from phaseinterp.backends.incremental import final_run_inputs
from phaseinterp.backends.prompts import units_per_forward
from phaseinterp.checks import check_at_least_one
from phaseinterp.units import check_layers


def decode_fallback(model: Any) -> str | None:
    """Why the decode path does not apply to a HF model (a sentence), or None when it does: it calls
    the model's own forward with its own cache, so its decoder layers must be transformers' own."""
    layers = getattr(getattr(model, "model", None), "layers", None)
    if layers is None:
        return "the model is not laid out as model.model.layers"
    foreign = sorted({f"{type(m).__module__}.{type(m).__name__}" for layer in layers
                      for m in (layer, getattr(layer, "self_attn", layer))
                      if not type(m).__module__.startswith("transformers.")})
    if foreign:
        return (f"the decoder layers hold modules that are not transformers' own ({', '.join(foreign[:2])}; e.g. a "
                "TransformerLens bridge's components), whose decoding from a cache the path cannot rely on")
    return None


def tile_cache(cache: Any, n: int) -> Any:
    """A copy of a HF cache whose every batch-major tensor (in its layers' attributes, dicts and
    lists included) is repeated `n` times along the batch, unit-major; the original is untouched."""
    if cache is None:
        return None

    def tile(x: Any) -> Any:
        if isinstance(x, Tensor):
            return x.repeat(n, *([1] * (x.dim() - 1))) if x.dim() else x.clone()
        if isinstance(x, dict):
            return {k: tile(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return type(x)(tile(v) for v in x)
        return copy.copy(x)

    out = copy.copy(cache)
    out.layers = []
    for layer in cache.layers:
        new = copy.copy(layer)
        new.__dict__.update({k: tile(v) for k, v in vars(layer).items()})
        out.layers.append(new)
    return out


class DecodeFinalRun:
    """The prefix of every row, prefilled once per query position, so that position t can be
    decoded after edits of the head outputs there, for many units at once (the interface of
    `backends.incremental.FinalPositionRun`: `logits`, `base_z`, `run_z`).

    Args:
        backend: a HF backend without active edits.
        tokens: [batch, pos] token ids. query_pos: [batch] the scored position of each row.
        head_module: layer -> the module whose input is that layer's head outputs, [.., H * d].

    Example:
        >>> from phaseinterp.backends import DeepseekV4Backend
        >>> from phaseinterp.backends.tiny import tiny_deepseek_v4
        >>> v4 = DeepseekV4Backend(tiny_deepseek_v4())
        >>> run = v4.final_position_run(tokens, torch.full((len(tokens),), tokens.shape[1] - 1))
        >>> run.run_z([1], torch.ones(1, 4, dtype=torch.bool), torch.zeros(1, len(tokens), 4, 64)).shape
        torch.Size([1, 8, 512])
    """

    def __init__(self, backend: Any, tokens: Int[Tensor, "batch pos"], query_pos: Int[Tensor, " batch"],
                 head_module: Callable[[int], torch.nn.Module]) -> None:
        self.model, cfg = backend.model, backend.cfg
        self.n_heads, self.d_head, self.n_layers = cfg.n_heads, cfg.d_head, cfg.n_layers
        self.head_module = head_module
        tokens, query_pos = final_run_inputs(backend, tokens, query_pos)
        self.tokens, self.query_pos = tokens, query_pos
        self.groups = []
        logits, z = None, [None] * self.n_layers
        with torch.no_grad():
            for t in torch.unique(query_pos).tolist():
                rows = (query_pos == t).nonzero()[:, 0]
                cache = None
                if t > 0:
                    cache = self._call(tokens[rows, :t], None, torch.arange(t, device=tokens.device)).cache
                self.groups.append((int(t), rows, cache))
                kept: dict[int, Tensor] = {}
                out = self._decode(int(t), rows, cache, 1, keep=kept)
                if logits is None:
                    logits = out.new_empty(len(query_pos), out.shape[-1])
                logits[rows] = out
                for m in range(self.n_layers):
                    if z[m] is None:
                        z[m] = kept[m].new_empty(len(query_pos), *kept[m].shape[1:])
                    z[m][rows] = kept[m]
        self.logits, self._z = logits, z

    def _call(self, ids: Tensor, cache: Any, positions: Tensor) -> Any:
        return self.model(input_ids=ids, cache=cache, use_cache=True, position_ids=positions[None].expand(len(ids), -1))

    def _decode(self, t: int, rows: Tensor, cache: Any, n_units: int, keep: dict | None = None,
                edits: dict[int, Callable] | None = None) -> Tensor:
        """Logits at t for `n_units` copies of the group's rows (unit-major), from a tiled cache."""
        ids = self.tokens[rows, t:t + 1].repeat(n_units, 1)
        handles = []

        def reader(m: int):
            def hook(module, args):
                keep[m] = args[0][:, -1].detach().reshape(len(ids), self.n_heads, self.d_head)
            return hook

        try:
            for m in range(self.n_layers) if keep is not None else ():
                handles.append(self.head_module(m).register_forward_pre_hook(reader(m)))
            for m, edit in (edits or {}).items():
                handles.append(self.head_module(m).register_forward_pre_hook(edit))
            out = self._call(ids, tile_cache(cache, n_units), torch.tensor([t], device=ids.device))
        finally:
            for h in handles:
                h.remove()
        return out.logits[:, -1]

    def base_z(self, layer: int) -> Float[Tensor, "batch head d_head"]:
        """Base head outputs of `layer` at each row's query position."""
        return self._z[layer]

    def base_resid(self, layer: int) -> Tensor:
        raise ValueError("residual-stream patching is not available on this backend (no hook_resid_pre site): "
                         "allowed unit='z'")

    def run_resid(self, layers: Sequence[int], values: Tensor, *, max_rows: int = 8192) -> Tensor:
        self.base_resid(0)

    def run_z(self, layers: Sequence[int], masks: Bool[Tensor, "unit head"],
              values: Float[Tensor, "unit batch head d_head"], *, max_rows: int = 8192
              ) -> Float[Tensor, "unit batch vocab"]:
        """Logits at the query positions when unit u sets the heads `masks[u]` of layer `layers[u]`
        at t to `values[u]` (the other heads keep what the model computes); at most `max_rows`
        decoded rows per model call."""
        layers = list(layers)
        if len(layers) != values.shape[0] or masks.shape != (len(layers), self.n_heads):
            raise ValueError(f"{len(layers)} layers for {values.shape[0]} units of values and masks of shape "
                             f"{tuple(masks.shape)} (allowed: one layer, one [{self.n_heads}] head mask per unit)")
        check_layers(layers, self.n_layers)
        check_at_least_one("max_rows", max_rows)
        values = values.to(self.logits.device, self.logits.dtype)
        masks = masks.to(self.logits.device)
        out = self.logits.new_empty(len(layers), len(self.query_pos), self.logits.shape[-1])
        with torch.no_grad():
            for t, rows, cache in self.groups:
                b = len(rows)
                per = units_per_forward(b, max_rows)
                for s in range(0, len(layers), per):
                    chunk = list(range(s, min(s + per, len(layers))))
                    edits = {m: self._edit(m, chunk, layers, masks, values[:, rows], b) for m in {layers[u] for u in chunk}}
                    res = self._decode(t, rows, cache, len(chunk), edits=edits).view(len(chunk), b, -1)
                    out[s:s + len(chunk), rows] = res
        return out

    def _edit(self, m: int, chunk: list[int], layers: list[int], masks: Tensor, values: Tensor, b: int):
        """A pre-hook on layer m's head module: the chunk's units edited at m get their heads replaced."""
        sel = [i for i, u in enumerate(chunk) if layers[u] == m]
        keep = torch.zeros(len(chunk), 1, self.n_heads, 1, dtype=torch.bool, device=masks.device)
        repl = values.new_zeros(len(chunk), b, self.n_heads, self.d_head)
        for i in sel:
            keep[i, 0, :, 0] = masks[chunk[i]]
            repl[i] = values[chunk[i]]

        def hook(module, args):
            x = args[0]
            z = x[:, -1].reshape(len(chunk), b, self.n_heads, self.d_head)
            z = torch.where(keep, repl, z).reshape(x[:, -1].shape)
            return (torch.cat([x[:, :-1], z[:, None]], 1), *args[1:])
        return hook
