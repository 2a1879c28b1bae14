"""The one place where several nnsight invokes become one batched forward on a plain module.

`nnsight.NNsight` wraps any `torch.nn.Module`, but its base `Envoy._batch` refuses to combine
two or more `tracer.invoke(...)` blocks ("does not support batching multiple invokes"), and its
`_batch_size` counts every input as one row. `BatchedNNsight` fixes both for models whose only
input is a `[batch, pos]` token tensor (our model, HF causal LMs called as `model(input_ids)`):
rows are counted from the tensor and the invokes' tokens are concatenated along dim 0. nnsight
then narrows every activation to each invoke's rows, so each block's edits touch only its rows.
Keyword arguments every call needs (HF: `use_cache=False`) are set once on the wrapper as
`_phaseinterp_call_kwargs` and added to the assembled call.

Sequences must have equal length: padding would move absolute positions, i.e. phases.
"""

from __future__ import annotations

from typing import Any

import torch
from nnsight import NNsight


def first_device(module: torch.nn.Module) -> torch.device | None:
    """Device of the first parameter not on the meta device (where accelerate keeps offloaded
    weights between calls), or None when every parameter is there (or there is none)."""
    return next((p.device for p in module.parameters() if p.device.type != "meta"), None)


class BatchedNNsight(NNsight):
    """`NNsight` whose invokes (each `[batch_i, pos]` tokens) run as one `[sum batch_i, pos]` forward.

    Example:
        >>> nn_model = BatchedNNsight(model)
        >>> with nn_model.trace() as tracer:
        ...     for h in range(4):
        ...         with tracer.invoke(tokens):
        ...             nn_model.blocks[0].attn.hook_z.output[:, -1, h] = 0
    """

    @property
    def device(self) -> torch.device | None:
        """Where nnsight moves the inputs: the first parameter not on the meta device (nnsight takes
        the first parameter, which is on meta when accelerate offloaded it; the model's dispatch
        hooks move the inputs on)."""
        return first_device(self._module)

    def _batch_size(self, *inputs: Any, **kwargs: Any) -> int:
        if inputs and isinstance(inputs[0], torch.Tensor):
            return int(inputs[0].shape[0])
        return super()._batch_size(*inputs, **kwargs)

    def _batch(self, invokes: list[tuple], fn: Any) -> tuple:
        extra = getattr(self, "_phaseinterp_call_kwargs", None) or {}
        if len(invokes) <= 1:
            args, kwargs = super()._batch(invokes, fn)
            return args, {**kwargs, **extra}
        tokens = []
        for args, kwargs in invokes:
            if len(args) != 1 or kwargs or not isinstance(args[0], torch.Tensor) or args[0].ndim != 2:
                raise ValueError("batched invokes take exactly one [batch, pos] token tensor each; got "
                                 f"{len(args)} positional and {sorted(kwargs)} keyword inputs")
            tokens.append(args[0])
        lengths = sorted({t.shape[1] for t in tokens})
        if len(lengths) > 1:
            raise ValueError(f"batched invokes need equal sequence lengths (padding would shift phases); got {lengths}")
        return (torch.cat(tokens, dim=0),), dict(extra)
