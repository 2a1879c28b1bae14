"""Running a model for interventions: logits at one query position per row, hooks that are
always removed, many units batched into one forward, and the "changed nothing" check.

Every function here takes our `HookedCompressedTransformer` (TransformerLens hooks) or a backend
(`phaseinterp.backends`: nnsight, by the same hook names, see `backends.compat`); this module is
where the two differ, so knockout, patching and calibration are written once. Entry points turn
their model argument into one of the two with `resolve_model` (a raw HF model gets its backend)."""

from __future__ import annotations

import warnings
from contextlib import contextmanager
from typing import Callable, Iterator, Sequence

import torch
from jaxtyping import Float, Int
from torch import Tensor

from phaseinterp.interventions.checks import check_at_least_one
from phaseinterp.measure.sweep import is_backend, resolve_model

# A unit edit: {hook name: fn(activation block [B, ...]) -> edited block}, applied to one unit's rows.
UnitEdit = dict[str, Callable[[Tensor], Tensor]]


class _Stop(Exception):
    """Raised by the last hook we need, so the rest of the forward is skipped."""


def runnable(model):
    """`resolve_model(model, require=True)`: our model or a backend, else ValueError."""
    return resolve_model(model, require=True)


def has_hooks(model) -> bool:
    """Whether any hook point of `model` holds a forward or backward hook (False for backends:
    their edits exist only inside one traced forward)."""
    if is_backend(model):
        return False
    return any(hp.has_hooks() if hasattr(hp, "has_hooks") else bool(hp._forward_hooks)
               for hp in model.hook_dict.values())


def incremental_ok(model) -> bool:
    """Whether the incremental final-position path (`FinalPositionRun`) applies: our
    `HookedCompressedTransformer` with no hooks attached (not a backend)."""
    from phaseinterp.model import HookedCompressedTransformer

    return isinstance(model, HookedCompressedTransformer) and not has_hooks(model)


def describe(model) -> str:
    """Short name of what runs: "HookedCompressedTransformer" or e.g. "DeepseekV4Backend(DeepseekV4ForCausalLM)"."""
    if is_backend(model):
        return f"{type(model).__name__}({model.cfg.model_class})"
    return type(model).__name__


def n_layers(model) -> int:
    return int(model.cfg.n_layers)


def compressor_names(model, layer: int) -> list[str]:
    """Hook-name prefixes of the compressor branches of `layer` ("compress_k", "compress_v" or
    "compress_kv"; none for full attention)."""
    if is_backend(model):
        return [f"compress_{b}" for b in model.cfg.gate_branches[layer]]
    return [name for name in model.blocks[layer].attn._modules if name in ("compress_k", "compress_v", "compress_kv")]


@contextmanager
def hooked(model, fwd_hooks: Sequence[tuple[str, Callable]] = ()) -> Iterator[None]:
    """Attach forward hooks for the duration of the block; they are removed on exit, also when
    the block raises (TransformerLens `model.hooks`; on a backend, the same hooks as edits of
    every call inside `backend.intervene`)."""
    if is_backend(model):
        with model.intervene(*[model.hook_edit(name, fn) for name, fn in fwd_hooks]):
            yield
        return
    with model.hooks(fwd_hooks=list(fwd_hooks)):
        yield


def model_device(model) -> torch.device:
    if is_backend(model):
        return model.device
    for p in model.parameters():
        return p.device
    return torch.device("cpu")


def final_logits(model, tokens: Int[Tensor, "batch pos"], query_pos: Int[Tensor, " batch"],
                 fwd_hooks: Sequence[tuple[str, Callable]] = (), *, grad: bool = False
                 ) -> Float[Tensor, "batch vocab"]:
    """Next-token logits at `query_pos[i]` of each row, with `fwd_hooks` attached.

    The forward stops after `ln_final` (only the scored positions are unembedded). Hooks are
    removed even if the forward raises. A backend computes them with `backend.final_logits`
    (the hooks become edits of that one traced forward, by the hook names of
    `backend.hook_names()`; `grad` keeps the graph through nnsight).

    Example:
        >>> from phaseinterp import HookedCompressedTransformer, preset
        >>> m = HookedCompressedTransformer(preset("tiny-w4s4"), seed=0)
        >>> t = torch.randint(0, 512, (2, 16))
        >>> torch.allclose(final_logits(m, t, torch.tensor([15, 7])), m(t)[[0, 1], [15, 7]], atol=1e-5)
        True
    """
    if is_backend(model):
        return model.final_logits(tokens, query_pos, fwd_hooks, grad=grad)
    dev = model_device(model)
    tokens, query_pos = tokens.to(dev), query_pos.to(dev)
    rows = torch.arange(tokens.shape[0], device=dev)
    out = {}

    def grab(x: Tensor, hook) -> Tensor:
        out["h"] = x[rows, query_pos]
        raise _Stop

    with torch.set_grad_enabled(grad), hooked(model, [*fwd_hooks, ("ln_final.hook_normalized", grab)]):
        try:
            model(tokens)
        except _Stop:
            pass
        return out["h"] @ model.W_unembed


def run_units(model, tokens: Int[Tensor, "batch pos"], query_pos: Int[Tensor, " batch"],
              units: Sequence[UnitEdit], *, max_rows: int = 2048,
              base_hooks: Sequence[tuple[str, Callable]] = ()) -> Float[Tensor, "unit batch vocab"]:
    """Logits at `query_pos` for each unit's edit, several units per forward.

    The batch is repeated once per unit in a chunk (at most `max_rows` rows per forward, at
    least one unit); each unit's hook functions see and edit only that unit's rows.

    Args:
        model: a HookedCompressedTransformer (or any TransformerLens HookedRootModule with
            `ln_final.hook_normalized` and `W_unembed`), or a backend (hook names of
            `backend.hook_names()`, each unit one nnsight invoke of a batched forward).
        tokens, query_pos: the rows.
        units: one {hook name: fn(block) -> block} per unit (an empty dict is the clean run).
        max_rows: rows per forward pass (units per forward = max(1, max_rows // batch)).
        base_hooks: hooks applied to every row before the unit edits (e.g. a gate override).

    Example:
        >>> zero_l0 = {"blocks.0.attn.hook_z": lambda z: torch.zeros_like(z)}
        >>> run_units(model, tokens, qpos, [{}, zero_l0]).shape  # [units, batch, vocab]
        torch.Size([2, 8, 512])
    """
    check_at_least_one("max_rows", max_rows)
    if is_backend(model):
        return model.run_units(tokens, query_pos, units, max_rows=max_rows, base_hooks=base_hooks)
    B = tokens.shape[0]
    per = max(1, max_rows // max(B, 1))
    outs = []
    for start in range(0, len(units), per):
        chunk = units[start : start + per]
        names = sorted({name for u in chunk for name in u})

        def make(name: str) -> Callable:
            def hook(x: Tensor, hook) -> Tensor:
                x = x.clone()
                for i, u in enumerate(chunk):
                    if name in u:
                        x[i * B : (i + 1) * B] = u[name](x[i * B : (i + 1) * B])
                return x
            return hook

        logits = final_logits(model, tokens.repeat(len(chunk), 1), query_pos.repeat(len(chunk)),
                              [*base_hooks, *[(n, make(n)) for n in names]])
        outs.append(logits.view(len(chunk), B, -1))
    return torch.cat(outs)


def unchanged_units(edited: Float[Tensor, "unit batch vocab"], clean: Float[Tensor, "batch vocab"],
                    rtol: float = 1e-5) -> list[int]:
    """Indices of units whose logits equal the clean logits up to `rtol` times the logit scale."""
    tol = rtol * (1.0 + float(clean.abs().max()))
    diff = (edited - clean[None]).abs().flatten(1).amax(1)
    return [i for i, d in enumerate(diff.tolist()) if d <= tol]


def warn_unchanged(labels: Sequence[str], what: str) -> None:
    """Emit one UserWarning naming the units whose intervention changed no output."""
    if labels:
        shown = ", ".join(labels[:12]) + (f" and {len(labels) - 12} more" if len(labels) > 12 else "")
        warnings.warn(f"{what} changed no output (logits equal to the run without it) for: {shown}",
                      UserWarning, stacklevel=3)


def capture(model, tokens: Int[Tensor, "batch pos"], names: Sequence[str],
            sites: Int[Tensor, "batch site"] | None = None) -> dict[str, Tensor]:
    """Activations at the given hook names from one forward (no gradients; our model stops
    after the last of them fires).

    Args:
        sites: per row, the positions to keep ([batch, n_sites]; hooks with a position axis
            after the batch axis, e.g. `hook_z`, `hook_resid_pre`, `hook_attn_out`): each
            activation is then `[batch, n_sites, ...]`; only those positions are stored.
    """
    if is_backend(model):
        return model.capture(tokens, names, sites)
    for n in names:
        model.check_hook_name(n)
    out: dict[str, Tensor] = {}
    want = set(names)
    if sites is not None:
        rows = torch.arange(tokens.shape[0], device=model_device(model))[:, None]
        sites = sites.to(rows.device)

    def grab(x: Tensor, hook) -> None:
        out[hook.name] = (x if sites is None else x[rows, sites]).detach()
        if set(out) >= want:
            raise _Stop

    with torch.no_grad(), hooked(model, [(n, grab) for n in names]):
        try:
            model(tokens.to(model_device(model)))
        except _Stop:
            pass
    return out
