"""Gate overrides through hooks: uniform, one-hot on an offset, or a user tensor, on gate weights
(`hook_gate`) or gate logits (`hook_gate_logits`), for chosen layers, branches and KV heads.

The hooks run on a backend (`backend.hooks`: TransformerLens hooks on our model behind
`HookedBackend`, edits of each traced forward on HF DeepSeek-V4); `compressors` describes its
gates (the backend's `Compression` descriptions: `.cc` and `.kind`, as our `Compressor` modules)."""

from __future__ import annotations

import warnings
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Sequence

import torch
from jaxtyping import Float
from torch import Tensor

from phaseinterp.interventions.runner import runnable
from phaseinterp.model.compressor import slot_positions

BRANCH_NAMES = {"compress_k": "key", "compress_v": "value", "compress_kv": "kv"}
OVERRIDES = ("uniform", "one_hot", "tensor")
TARGETS = ("weights", "logits")


def compressors(model, layers: Sequence[int] | None = None, branches: Sequence[str] | None = None
                ) -> list[tuple[int, str, Any]]:
    """(layer, branch, description) of every compression branch, filtered by layer and branch name
    ("key", "value", "kv"): the backend's `Compression` descriptions (`backend.compression(layer,
    branch)`; `.cc` and `.kind`, as our `Compressor` modules). Raises ValueError for unknown
    layers or branches, or when none match."""
    model = runnable(model)
    allowed = set(BRANCH_NAMES.values())
    if branches is not None:
        bad = [b for b in branches if b not in allowed]
        if bad:
            raise ValueError(f"branches {bad} are invalid: allowed {sorted(allowed)}")
    n = model.cfg.n_layers
    if layers is not None:
        for layer in layers:
            if not 0 <= int(layer) < n:
                raise ValueError(f"layer={layer} is invalid: allowed 0..{n - 1}")
    wanted = None if layers is None else {int(x) for x in layers}
    out = []
    for layer in range(n):
        if wanted is not None and layer not in wanted:
            continue
        for index, attr in enumerate(model.compressor_names(layer)):
            name = BRANCH_NAMES[attr]
            if branches is None or name in branches:
                out.append((layer, name, model.compression(layer, index)))
    if not out:
        compressed = [l for l in range(n) if model.compressor_names(l)]
        raise ValueError(f"no compression branch matches layers={layers}, branches={branches} "
                         f"(compressed layers: {compressed})")
    return out


def block_backend(model):
    """The backend of a context manager that changes every call inside its block (`gate_override`,
    `cycled_gates`): a backend, or a model whose backend edits the module itself (our model:
    hooks, parameters); a raw model whose backend's edits would live only in a throwaway backend
    raises ValueError."""
    backend = runnable(model)
    if backend is not model and not backend.edits_reach_module:
        raise ValueError(f"model of type {type(model).__name__} is invalid: allowed a HookedCompressedTransformer or a "
                         "backend with gates (wrap it once, backend = phaseinterp.backends.backend_for(model), and "
                         "run the block's calls on the backend)")
    return backend


def _valid_slots(comp, n_entries: int, device) -> Tensor:
    """[entry, offset] True where the slot lies at a position >= 0 (deepseek-csa entry 0 has not)."""
    return slot_positions(comp.cc, n_entries, device) >= 0


def override_values(comp, act: Float[Tensor, "batch entry offset *channels"], kind: str, *,
                    target: str = "weights", offset: int | None = None, tensor: Float[Tensor, "..."] | None = None,
                    kv_heads: Sequence[int] | None = None) -> Float[Tensor, "batch entry offset *channels"]:
    """The gate activation `act` ([batch, entry, offset, kv_head(, d_head)], weights or logits)
    after an override, for the selected KV heads (others unchanged).

    kind "uniform": weights 1/W over valid slots (logits: the mean of the valid logits, so the
    softmax is uniform with the smallest change); "one_hot": all weight on `offset` (logits:
    0 there, -inf elsewhere; entries where that slot is invalid are left alone); "tensor":
    `tensor` broadcast to the activation's shape (e.g. [offset] or [offset, kv_head]), with the
    slots before position 0 kept masked (weight 0, renormalized over the valid slots; logit -inf).
    `comp`: a backend's `Compression` or our `Compressor` (its `.cc` gives W and the slots).
    """
    if kind not in OVERRIDES:
        raise ValueError(f"override={kind!r} is invalid: allowed one of {list(OVERRIDES)}")
    if target not in TARGETS:
        raise ValueError(f"target={target!r} is invalid: allowed one of {list(TARGETS)}")
    W = comp.cc.window
    valid = _valid_slots(comp, act.shape[1], act.device)
    vmask = valid.view(1, *valid.shape, *[1] * (act.ndim - 3)).expand_as(act)
    if kind == "uniform":
        if target == "weights":
            new = vmask.to(act.dtype) / vmask.sum(2, keepdim=True).clamp(min=1)
        else:
            mean = torch.where(vmask, act, torch.zeros_like(act)).sum(2, keepdim=True) / vmask.sum(2, keepdim=True).clamp(min=1)
            new = torch.where(vmask, mean.expand_as(act), act)
    elif kind == "one_hot":
        if offset is None or not 0 <= int(offset) < W:
            raise ValueError(f"offset={offset} is invalid: allowed 0..{W - 1}")
        hot = torch.zeros(W, dtype=torch.bool, device=act.device)
        hot[int(offset)] = True
        hot = hot.view(1, 1, W, *[1] * (act.ndim - 3)).expand_as(act)
        new = hot.to(act.dtype) if target == "weights" else torch.where(hot, 0.0, float("-inf")).to(act.dtype)
        ok = valid[:, int(offset)].view(1, -1, *[1] * (act.ndim - 2))
        new = torch.where(ok, new, act)
    else:
        if tensor is None:
            raise ValueError("override='tensor' needs a tensor")
        t = torch.as_tensor(tensor, dtype=act.dtype, device=act.device)
        try:
            if t.ndim and t.shape[0] == W and t.ndim < act.ndim - 1:
                t = t.view(1, 1, *t.shape, *[1] * (act.ndim - 2 - t.ndim))
            new = t.expand_as(act)
        except RuntimeError:
            raise ValueError(f"override tensor of shape {tuple(t.shape)} does not broadcast to the gate's "
                             f"{tuple(act.shape)} ([batch, entry, offset, kv_head(, d_head)]; [offset] or "
                             f"[offset, kv_head] also work)") from None
        new = _keep_masked(new, vmask, target)
    if kv_heads is not None:
        K = act.shape[3]
        for h in kv_heads:
            if not 0 <= int(h) < K:
                raise ValueError(f"kv_head={h} is invalid: allowed 0..{K - 1}")
        sel = torch.zeros(K, dtype=torch.bool, device=act.device)
        sel[[int(h) for h in kv_heads]] = True
        new = torch.where(sel.view(1, 1, 1, K, *[1] * (act.ndim - 4)), new, act)
    return new


def _keep_masked(new: Tensor, vmask: Tensor, target: str) -> Tensor:
    """`new` with the slots before position 0 masked as the model masks them. Entries without such
    slots are returned untouched (bit for bit); the others lose the weight there and are
    renormalized over their valid slots (logits: -inf there)."""
    if bool(vmask.all()):
        return new
    if target == "logits":
        return new.masked_fill(~vmask, float("-inf"))
    kept = torch.where(vmask, new, torch.zeros_like(new))
    total = kept.sum(2, keepdim=True)
    return torch.where(vmask.all(2, keepdim=True), new, kept / total.clamp_min(torch.finfo(new.dtype).tiny))


def gate_override_hooks(model, kind: str = "uniform", *, target: str = "weights", layers: Sequence[int] | None = None,
                        branches: Sequence[str] | None = None, kv_heads: Sequence[int] | None = None,
                        offset: int | None = None, tensor: Float[Tensor, "..."] | None = None,
                        record: dict | None = None) -> list[tuple[str, Callable]]:
    """Forward hooks that override gate weights (`hook_gate`) or logits (`hook_gate_logits`).

    `record`, when given, gets `record["changed"] = True` once an override changed a value.

    Example:
        >>> hooks = gate_override_hooks(model, "one_hot", offset=0, layers=[1], branches=["key"])
        >>> [name for name, _ in hooks]
        ['blocks.1.attn.compress_k.hook_gate']
        >>> model.run_with_hooks(tokens, fwd_hooks=hooks).shape
        torch.Size([8, 33, 512])
    """
    hook = "hook_gate" if target == "weights" else "hook_gate_logits"
    if target not in TARGETS:
        raise ValueError(f"target={target!r} is invalid: allowed one of {list(TARGETS)}")
    out = []
    for layer, branch, comp in compressors(model, layers, branches):
        if comp.cc.gate == "uniform" and target == "logits" and kind == "uniform":
            continue

        def fn(x: Tensor, hook, comp=comp) -> Tensor:
            new = override_values(comp, x, kind, target=target, offset=offset, tensor=tensor, kv_heads=kv_heads)
            if record is not None and not torch.equal(new, x):
                record["changed"] = True
            return new

        attr = next(a for a, b in BRANCH_NAMES.items() if b == branch)
        out.append((f"blocks.{layer}.attn.{attr}.{hook}", fn))
    return out


@contextmanager
def gate_override(model, kind: str = "uniform", **kwargs: Any) -> Iterator[None]:
    """Run the block with gates overridden (see `gate_override_hooks`); hooks are removed on exit,
    also on error. Warns if the override never changed a gate value.

    Example:
        >>> from phaseinterp.measure import phase_sweep
        >>> with gate_override(model, "uniform", layers=[0]):
        ...     curve = phase_sweep(model, batch, progress=False)
        >>> curve.modulus
        4
    """
    record = {"changed": False}
    backend = block_backend(model)
    with backend.hooks(gate_override_hooks(backend, kind, record=record, **kwargs)):
        yield
    if not record["changed"]:
        warnings.warn(f"gate override {kind!r} changed no gate value (the gates already had these values, "
                      "or no forward ran inside the block)", UserWarning, stacklevel=3)
