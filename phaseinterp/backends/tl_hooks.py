"""Running our model with TransformerLens hooks: logits at one query position per row, hooks that
are always removed, many units batched into one forward, and captures that stop early.

`HookedBackend` answers the intervention primitives (`final_logits`, `run_units`, `capture`,
`hooks`) with these functions; a generic backend answers them through nnsight
(`backends.compat`). Hook names are any of the model's hook points (`model.hook_dict`)."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator, Sequence

import torch
from jaxtyping import Float, Int
from torch import Tensor

from phaseinterp.backends.prompts import distinct_prompts, units_per_forward

# A unit edit: {hook name: fn(activation block [B, ...]) -> edited block}, applied to one unit's rows.
UnitEdit = dict[str, Callable[[Tensor], Tensor]]


class _Stop(Exception):
    """Raised by the last hook we need, so the rest of the forward is skipped."""


def has_hooks(model) -> bool:
    """Whether any hook point of `model` holds a forward or backward hook."""
    return any(hp.has_hooks() if hasattr(hp, "has_hooks") else bool(hp._forward_hooks)
               for hp in model.hook_dict.values())


def model_device(model) -> torch.device:
    for p in model.parameters():
        return p.device
    return torch.device("cpu")


@contextmanager
def hooked(model, fwd_hooks: Sequence[tuple[str, Callable]] = ()) -> Iterator[None]:
    """Attach forward hooks for the duration of the block; removed on exit, also on error."""
    with model.hooks(fwd_hooks=list(fwd_hooks)):
        yield


def final_logits(model, tokens: Int[Tensor, "batch pos"], query_pos: Int[Tensor, " batch"],
                 fwd_hooks: Sequence[tuple[str, Callable]] = (), *, grad: bool = False
                 ) -> Float[Tensor, "batch vocab"]:
    """Next-token logits at `query_pos[i]` of each row, with `fwd_hooks` attached; the forward
    stops after `ln_final` (only the scored positions are unembedded)."""
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
    """Logits at `query_pos` for each unit's edit: the batch is repeated once per unit in a chunk
    (`backends.prompts.units_per_forward`: at most `max_rows` rows and `FORWARD_TOKENS` tokens per forward, at
    least one unit); each unit's hook functions see and
    edit only that unit's rows, after `base_hooks`."""
    B = tokens.shape[0]
    per = units_per_forward(B, max_rows, tokens.shape[1])
    outs = []
    for start in range(0, len(units), per):
        chunk = units[start : start + per]
        names = sorted({name for u in chunk for name in u})

        def make(name: str) -> Callable:
            def hook(x: Tensor, hook) -> Tensor:
                x = x.clone()
                for i, u in enumerate(chunk):  # noqa: B023  (each hook runs within its chunk's iteration)
                    if name in u:
                        x[i * B : (i + 1) * B] = u[name](x[i * B : (i + 1) * B])
                return x
            return hook

        logits = final_logits(model, tokens.repeat(len(chunk), 1), query_pos.repeat(len(chunk)),
                              [*base_hooks, *[(n, make(n)) for n in names]])
        outs.append(logits.view(len(chunk), B, -1))
    return torch.cat(outs)


def capture(model, tokens: Int[Tensor, "batch pos"], names: Sequence[str],
            sites: Int[Tensor, "batch site"] | None = None) -> dict[str, Tensor]:
    """Activations at the given hook names from one forward (no gradients; stops after the last
    of them fires); `sites` [batch, n_sites] keeps only those positions."""
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


def prompt_logits(model, tokens: Int[Tensor, "batch pos"], query_pos: Int[Tensor, " batch"],
                  prompt_id: Int[Tensor, " batch"]) -> Float[Tensor, "batch vocab"]:
    """Logits at `query_pos` from one full forward per distinct prompt (rows that share a prompt,
    several queries of one haystack, share its forward): the phase sweep's path."""
    dev = model_device(model)
    first, inverse = distinct_prompts(prompt_id, tokens)
    logits = model(tokens[first].to(dev))
    return logits[inverse.to(dev), query_pos.to(dev)]


class OwnModelSweep:
    """Mixed into the backends of our own models (`HookedBackend`, `NSABackend`): the phase sweep
    runs one plain forward per prompt (`prompt_logits`, the numbers the shipped curves were made
    with) unless an `intervene` block is open, and results record the model's own config."""

    @property
    def recorded_cfg(self):
        return self.model.cfg

    def sweep_logits(self, tokens: Int[Tensor, "batch pos"], query_pos: Int[Tensor, " batch"],
                     prompt_id: Int[Tensor, " batch"]) -> Float[Tensor, "batch vocab"]:
        if self._active:
            return super().sweep_logits(tokens, query_pos, prompt_id)
        return prompt_logits(self.model, tokens, query_pos, prompt_id)

    def sweep_info(self) -> dict | None:
        return None
