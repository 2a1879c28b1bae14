"""Which blocks NSA's selection branch re-reads, by the needle's residue.

At each row's query position, `blocks.{l}.attn.select.hook_indices` holds the k blocks (of S
tokens, `selection_block`) each KV head chose from the compressed scores. Grouped by the target
key's residue r = key_pos mod R, this gives:

- `key_block` / `value_block` [kv_head, residue]: how often the block holding the target key /
  its value was chosen (they differ when the record straddles a block boundary: key at phase S - 1);
- `either` [kv_head, residue]: how often at least one of them was;
- `by_offset` [kv_head, residue, offset]: how often the block `offset` blocks after the key's block
  was chosen, offsets -`span` .. +`span` (each row counts once per chosen block);
- `by_block` [kv_head, residue, block]: how often each absolute block was chosen.

Example:
    >>> from phaseinterp.model.nsa import NSAConfig, NSATransformer
    >>> nsa = NSATransformer(NSAConfig(vocab_size=512, compress_block=4, compress_stride=4, num_selected=1), seed=0)
    >>> f = selection_frequency(nsa, batch, layer=1)
    >>> f["key_block"].shape, f["k"]
    ((2, 4), 1)
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from jaxtyping import Int
from torch import Tensor

from phaseinterp.families.resolve import resolve_model
from phaseinterp.tasks import PhaseBatch


def _by_residue(x: np.ndarray, residue: np.ndarray, modulus: int) -> np.ndarray:
    """Mean of x [row, ...] per residue -> [..., residue] (nan where a residue has no rows)."""
    n = np.bincount(residue, minlength=modulus).astype(np.float64)
    sums = np.stack([x[residue == r].sum(0) for r in range(modulus)], axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return sums / n


@torch.no_grad()
def chosen_blocks(model, tokens: Int[Tensor, "batch pos"], query_pos: Int[Tensor, " batch"], layer: int,
                  batch_size: int = 256) -> Int[Tensor, "batch kv_head k"]:
    """Block indices chosen at each row's query position (-1: no pick), one forward per chunk."""
    name = f"blocks.{layer}.attn.select.hook_indices"
    model.check_hook_name(name)
    out = []
    for start in range(0, len(tokens), batch_size):
        t, q = tokens[start:start + batch_size], query_pos[start:start + batch_size]
        _, cache = model.run_with_cache(t, names_filter=[name])
        out.append(cache[name][torch.arange(len(t)), q.to(t.device)].cpu())
    return torch.cat(out)


def selection_frequency(model, batch: PhaseBatch, *, layer: int, span: int = 4, batch_size: int = 256) -> dict[str, Any]:
    """Selection frequencies by residue at the query positions (see the module docstring).

    Raises:
        ValueError: a model without a selection branch hook, or a layer out of range.
    """
    backend = resolve_model(model, require=True)
    B, R = backend.selection_block(), batch.modulus
    if B is None:
        raise ValueError(f"model {backend.describe()} is invalid: allowed an NSATransformer (a model whose backend "
                         "has a block-selection branch)")
    n_layers = backend.cfg.n_layers
    if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < n_layers:
        raise ValueError(f"layer={layer!r} is invalid: allowed 0..{n_layers - 1}")
    model = backend.module()
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        idx = chosen_blocks(model, batch.tokens.to(device), batch.query_pos.to(device), layer, batch_size).numpy()
    finally:
        model.train(was_training)
    key_block = (batch.key_pos.numpy() // B)[:, None, None]
    value_block = (batch.value_pos.numpy() // B)[:, None, None]
    res = batch.residue.numpy()
    n_blocks = -(-batch.tokens.shape[1] // B)
    is_key, is_value = (idx == key_block).any(-1), (idx == value_block).any(-1)   # [row, kv_head]
    offsets = np.arange(-span, span + 1)
    rel = np.where(idx >= 0, idx - key_block, 10**6)                               # [row, kv_head, k]
    by_offset = (rel[..., None] == offsets).sum(2).astype(np.float64)              # [row, kv_head, offset]
    by_block = (idx[..., None] == np.arange(n_blocks)).sum(2).astype(np.float64)   # [row, kv_head, block]
    return {
        "layer": layer, "k": int(idx.shape[-1]), "selection_block": B, "modulus": R,
        "n_rows": np.bincount(res, minlength=R).tolist(),
        "key_block": _by_residue(is_key.astype(np.float64), res, R),
        "value_block": _by_residue(is_value.astype(np.float64), res, R),
        "either": _by_residue((is_key | is_value).astype(np.float64), res, R),
        "offsets": offsets.tolist(), "by_offset": np.moveaxis(_by_residue(by_offset, res, R), -1, 1),
        "by_block": np.moveaxis(_by_residue(by_block, res, R), -1, 1),
    }


__all__ = ["chosen_blocks", "selection_frequency"]
