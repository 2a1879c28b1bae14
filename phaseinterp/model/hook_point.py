"""TransformerLens's `HookPoint`, with forward hooks held to the activation's shape and dtype.

A hook may observe (return None) or replace the activation with a tensor of the same shape and
dtype; anything else raises a ValueError that names the hook point and what was expected, at the
hook, instead of a deep torch error downstream (or, for a smaller batch, a silently smaller output).
"""

from __future__ import annotations

import difflib
import functools
from typing import Any, Callable

import torch

from transformer_lens.hook_points import HookPoint as TLHookPoint


def checked_hook(fn: Callable, point: TLHookPoint) -> Callable:
    """`fn` (called as `fn(activation, hook=...)`), raising when its result breaks the contract."""

    @functools.wraps(fn)
    def hook(activation: torch.Tensor, hook: Any) -> Any:
        out = fn(activation, hook=hook)
        if out is None:
            return None
        want = f"None or a tensor of shape {tuple(activation.shape)} and dtype {activation.dtype}"
        if not isinstance(out, torch.Tensor):
            raise ValueError(f"the hook on {point.name!r} returned a {type(out).__name__}: allowed {want}")
        if out.shape != activation.shape or out.dtype != activation.dtype:
            raise ValueError(f"the hook on {point.name!r} returned shape {tuple(out.shape)} and dtype {out.dtype}: "
                             f"allowed {want} (a hook may change values, not shapes or dtypes)")
        return out

    return hook


def missing_hook_point(name: Any, names: list[str], doc: str) -> KeyError:
    """The KeyError for a hook name that is not in `names`, with the nearest valid ones (or `doc`)."""
    close = difflib.get_close_matches(str(name), names, n=5, cutoff=0.5)
    hint = f"; did you mean {close}?" if close else f"; see model.hook_dict or {doc}"
    return KeyError(f"no hook point named {name!r}{hint}")


class HookPoint(TLHookPoint):
    """A TransformerLens hook point whose forward hooks are checked (`checked_hook`)."""

    def add_hook(self, hook: Callable, dir: str = "fwd", *args: Any, **kwargs: Any):
        if not callable(hook):
            raise ValueError(f"the hook for {self.name!r} is a {type(hook).__name__}, not a function: allowed a "
                             "callable fn(activation, hook) returning None or a replacement tensor")
        return super().add_hook(checked_hook(hook, self) if dir == "fwd" else hook, dir, *args, **kwargs)


__all__ = ["HookPoint", "checked_hook", "missing_hook_point"]
