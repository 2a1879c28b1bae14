"""Lazy package exports (PEP 562), so that `import phaseinterp` and `phaseinterp --help` do not
import torch, transformers, nnsight or plotly before a name that needs them is used."""

from __future__ import annotations

import importlib
from typing import Any, Callable


def lazy_exports(package: str, namespace: dict[str, Any], exports: dict[str, str]) -> tuple[Callable, Callable]:
    """`(__getattr__, __dir__)` for `package`, whose public names are `exports` (name -> submodule
    that defines it, relative to the package). A name is imported on first use, then cached in the
    package's `namespace` so that later lookups are plain attribute reads."""

    def __getattr__(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{exports[name]}"), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__
