"""Static-graph mode: the forward pass without host synchronization, for `torch.compile` and CUDA
graph capture (`phaseinterp.train.fleet`).

Eager forwards check their inputs (token ids in range) and pick paths by Python state; both read
tensor values on the host, which a compiled graph would split on and a captured CUDA graph cannot
contain. `tracing()` is true while compiling or inside `static_graph()`; the model then skips
those checks and takes the shape-static paths.

Example:
    >>> with static_graph():
    ...     tracing()
    True
"""

from __future__ import annotations

import contextlib
import threading
from typing import Iterator

import torch

_state = threading.local()


def tracing() -> bool:
    """True while torch.compile traces or inside `static_graph()`: no host reads of tensor values."""
    return getattr(_state, "depth", 0) > 0 or torch.compiler.is_compiling()


@contextlib.contextmanager
def static_graph() -> Iterator[None]:
    """Run the model without host synchronization (the caller guarantees valid token ids)."""
    _state.depth = getattr(_state, "depth", 0) + 1
    try:
        yield
    finally:
        _state.depth -= 1


__all__ = ["static_graph", "tracing"]
