"""What every intervention runs on: a backend (`phaseinterp.backends`), resolved once per entry
point by `runnable`, and the "changed nothing" check.

The interventions talk to the backend only: `final_logits`, `run_units`, `capture`, `hooks`,
`final_position_run`, `cycled_gates`, ... Our model runs behind `HookedBackend` (TransformerLens
hooks, the incremental final-position path, gate parameters rolled in place), HuggingFace models
behind their nnsight backends; which implementation runs is the backend's method, never a branch
here. `final_logits`, `run_units` and `capture` below are the public entry points of those
primitives for any model."""

from __future__ import annotations

import warnings
from typing import Callable, Sequence

from jaxtyping import Float, Int
from torch import Tensor

from phaseinterp.backends import Backend, resolve_model
from phaseinterp.backends.prompts import units_per_forward
from phaseinterp.interventions.checks import check_at_least_one
from phaseinterp.progress import in_chunks

# A unit edit: {hook name: fn(activation block [B, ...]) -> edited block}, applied to one unit's rows.
UnitEdit = dict[str, Callable[[Tensor], Tensor]]


def runnable(model) -> Backend:
    """The backend of `model` (`backends.resolve_model(model, require=True)`): a backend as is,
    our model, NSA or a raw HF model wrapped, anything else a ValueError."""
    return resolve_model(model, require=True)


def final_logits(model, tokens: Int[Tensor, "batch pos"], query_pos: Int[Tensor, " batch"],
                 fwd_hooks: Sequence[tuple[str, Callable]] = (), *, grad: bool = False
                 ) -> Float[Tensor, "batch vocab"]:
    """Next-token logits at `query_pos[i]` of each row, with `fwd_hooks` (TransformerLens-style
    `(name, fn(activation, hook))`) attached for this forward only (`Backend.final_logits`; our
    model stops after `ln_final` and unembeds only the scored positions).

    Example:
        >>> from phaseinterp import HookedCompressedTransformer, preset
        >>> m = HookedCompressedTransformer(preset("tiny-w4s4"), seed=0)
        >>> t = torch.randint(0, 512, (2, 16))
        >>> torch.allclose(final_logits(m, t, torch.tensor([15, 7])), m(t)[[0, 1], [15, 7]], atol=1e-5)
        True
    """
    return runnable(model).final_logits(tokens, query_pos, fwd_hooks, grad=grad)


def run_units(model, tokens: Int[Tensor, "batch pos"], query_pos: Int[Tensor, " batch"],
              units: Sequence[UnitEdit], *, max_rows: int = 2048,
              base_hooks: Sequence[tuple[str, Callable]] = (), progress: bool = True
              ) -> Float[Tensor, "unit batch vocab"]:
    """Logits at `query_pos` for each unit's edit, several units per forward (`Backend.run_units`).

    The batch is repeated once per unit in a chunk (at most `max_rows` rows and
    `backends.prompts.FORWARD_TOKENS` tokens per forward, at least one unit); each unit's hook functions see and edit only that unit's rows.

    Args:
        model: our model, a backend, or a raw HF model (hook names of `backend.hook_names()`).
        tokens, query_pos: the rows.
        units: one {hook name: fn(block) -> block} per unit (an empty dict is the clean run).
        max_rows: rows per forward pass (units per forward: `backends.prompts.units_per_forward`).
        base_hooks: hooks applied to every row before the unit edits (e.g. a gate override).
        progress: a progress bar over the units (default; `phaseinterp.progress`); False: silent.

    Example:
        >>> zero_l0 = {"blocks.0.attn.hook_z": lambda z: torch.zeros_like(z)}
        >>> run_units(model, tokens, qpos, [{}, zero_l0]).shape  # [units, batch, vocab]
        torch.Size([2, 8, 512])
    """
    check_at_least_one("max_rows", max_rows)
    backend = runnable(model)
    return in_chunks(lambda s: backend.run_units(tokens, query_pos, units[s], max_rows=max_rows, base_hooks=base_hooks),
                     len(units), units_per_forward(len(tokens), max_rows, tokens.shape[1]), progress=progress,
                     desc="units")


def capture(model, tokens: Int[Tensor, "batch pos"], names: Sequence[str],
            sites: Int[Tensor, "batch site"] | None = None) -> dict[str, Tensor]:
    """Activations at the given hook names from one forward, without gradients (`Backend.capture`;
    our model stops after the last of them fires).

    Args:
        sites: per row, the positions to keep ([batch, n_sites]; hooks with a position axis
            after the batch axis, e.g. `hook_z`, `hook_attn_out`): each activation is then
            `[batch, n_sites, ...]`; only those positions are stored.
    """
    return runnable(model).capture(tokens, names, sites)


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
