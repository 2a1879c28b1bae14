"""Where an asset is: shipped checkpoints (`checkpoints/...`) and result files (`results/...`), by
their path relative to an assets folder laid out like the repository's `assets/`.

Folders searched, first match wins:

1. `$PHASEINTERP_HOME`, when set: a folder laid out like the repository's `assets/` (e.g. a clone's
   `assets/`, or a copy of the parts you need);
2. the repository's `assets/`, when phaseinterp runs from a checkout (editable install or `PYTHONPATH`);
3. the package data of an installed wheel (`phaseinterp/_assets/`): the core set of checkpoints with
   their cards and the result files tutorials read (`catalog.json`'s "package_data").

Example:
    >>> asset("checkpoints/w4s4.safetensors").name
    'w4s4.safetensors'
    >>> asset("checkpoints/no-such.safetensors")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    FileNotFoundError: asset 'checkpoints/no-such.safetensors' is not installed ...
"""

from __future__ import annotations

import os
from pathlib import Path

#: The environment setting naming an extra assets folder (searched first).
HOME_ENV = "PHASEINTERP_HOME"
#: Where a wheel keeps its package data.
PACKAGED = Path(__file__).resolve().parent / "_assets"
#: The repository's assets folder, when running from a checkout (the folder holding pyproject.toml).
CHECKOUT = Path(__file__).resolve().parents[1] / "assets"
#: Where the assets the wheel does not carry come from.
SOURCE = ("the phaseinterp repository's assets/ folder: run from a git checkout, or set "
          f"{HOME_ENV}=/path/to/phaseinterp/assets")


def roots() -> list[Path]:
    """The assets folders that exist, in search order ($PHASEINTERP_HOME, the checkout, the package data)."""
    found = []
    home = os.environ.get(HOME_ENV)
    if home:
        if not Path(home).is_dir():
            raise FileNotFoundError(f"{HOME_ENV}={home!r} is not a folder: allowed a folder laid out like the "
                                    "repository's assets/ (checkpoints/, results/)")
        found.append(Path(home).resolve())
    if CHECKOUT.is_dir() and (CHECKOUT.parent / "pyproject.toml").is_file():
        found.append(CHECKOUT)
    if PACKAGED.is_dir():
        found.append(PACKAGED)
    return found


def find(relative: str | os.PathLike) -> Path | None:
    """The first existing `ROOT/relative` over `roots()`, or None."""
    rel = _relative(relative)
    return next((root / rel for root in roots() if (root / rel).exists()), None)


def asset(relative: str | os.PathLike) -> Path:
    """The path of an asset (a file or a folder); FileNotFoundError naming the folders searched and
    where to get it when no assets folder holds it."""
    path = find(relative)
    if path is None:
        searched = ", ".join(str(r) for r in roots()) or "none"
        raise FileNotFoundError(f"asset {Path(relative).as_posix()!r} is not installed (searched: {searched}); "
                                f"get it from {SOURCE}")
    return path


def default(relative: str | os.PathLike) -> Path:
    """Where an asset is, or where it would be (the first assets folder) when none holds it: a default
    for an option, so that the command's own check names the missing file."""
    found = find(relative)
    if found is not None:
        return found
    first = next(iter(roots()), CHECKOUT)
    return first / _relative(relative)


def _relative(relative: str | os.PathLike) -> Path:
    rel = Path(relative)
    if rel.is_absolute() or ".." in rel.parts:
        raise ValueError(f"asset path {str(relative)!r} is invalid: allowed a path inside an assets folder, "
                         "e.g. 'checkpoints/w4s4.safetensors' or 'results/smollm2.json'")
    return rel


__all__ = ["CHECKOUT", "HOME_ENV", "PACKAGED", "SOURCE", "asset", "default", "find", "roots"]
