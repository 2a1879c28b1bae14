"""Progress bars, one meaning everywhere: `progress=True` (the default of every public function
that runs many forward passes: sweeps, knockout maps, patching, attribution, gate cycling, branch
knockout, training) shows one bar counting that call's units of work; `progress=False` prints nothing.

The bar is `tqdm.auto`'s (a widget in Jupyter) only where ipywidgets is installed: without it,
`tqdm.auto` warns "IProgress not found" (a `TqdmWarning`, the first output of a notebook) before
falling back to text; plain `tqdm` (text on stderr) is what it would fall back to, without the warning."""

from __future__ import annotations

from typing import Any, Callable

import importlib.util

if importlib.util.find_spec("ipywidgets") is not None:
    from tqdm.auto import tqdm
else:
    from tqdm import tqdm


def check_progress(progress: Any) -> bool:
    if not isinstance(progress, bool):
        raise ValueError(f"progress={progress!r} is invalid: allowed True or False")
    return progress


def progress_bar(total: int, desc: str, progress: bool, unit: str = "unit") -> tqdm:
    """A bar of `total` steps, silent (disabled) when `progress` is False."""
    return tqdm(total=total, desc=desc, unit=unit, disable=not check_progress(progress), dynamic_ncols=True)


def in_chunks(run: Callable[[slice], Any], n: int, per: int, *, progress: bool, desc: str, unit: str = "unit") -> Any:
    """`run(slice)` over consecutive slices of `per` of `n` units, results concatenated along the
    first axis (torch tensors), a bar advancing by each slice's units. The slices are the ones a
    backend batches anyway (`backends.prompts.units_per_forward`), so the forwards and
    the results are those of one call over all units.

    Example:
        >>> import torch
        >>> in_chunks(lambda s: torch.arange(10)[s] * 2, 10, 4, progress=False, desc="demo").tolist()
        [0, 2, 4, 6, 8, 10, 12, 14, 16, 18]
    """
    import torch

    if n == 0:  # nothing to run: the callee's own answer (an empty result or its error)
        return run(slice(0, 0))
    per = max(1, int(per))
    out = []
    with progress_bar(n, desc, progress, unit) as bar:
        for start in range(0, n, per):
            sl = slice(start, min(n, start + per))
            out.append(run(sl))
            bar.update(sl.stop - sl.start)
    return torch.cat(out)
