"""What made a result: library versions and JSON-safe configuration."""

from __future__ import annotations

import dataclasses
import json
import math
import platform
from typing import Any

import numpy as np
import torch

from phaseinterp.families.resolve import recorded_config


#: Libraries whose versions every result records when they are installed (read from package
#: metadata: recording a version never imports the library).
RECORDED = ("transformer-lens", "transformers", "nnsight", "scipy", "pandas", "plotly")


def versions() -> dict[str, str | int]:
    """The one provenance record of software versions: phaseinterp, Python, torch, numpy, each
    installed library of `RECORDED` (results, cards, reports and theory outputs all carry it), and
    torch's CPU thread count (`torch_threads`: float reductions may split differently with another
    count, docs/statistics.md "Thread count")."""
    from importlib.metadata import PackageNotFoundError, version

    from phaseinterp import __version__

    out: dict[str, str | int] = {"phaseinterp": __version__, "torch": torch.__version__, "numpy": np.__version__,
                                 "python": platform.python_version(), "torch_threads": torch.get_num_threads()}
    for name in RECORDED:
        try:
            out[name.replace("-", "_")] = version(name)
        except PackageNotFoundError:
            pass
    return out


def jsonable(obj: Any) -> Any:
    """Recursively convert dataclasses, numpy/torch values, tuples and non-finite floats
    (to None) into plain JSON types; anything else becomes its `str`."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return jsonable({f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)})
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, (np.ndarray, torch.Tensor)):
        return jsonable(obj.tolist())
    if isinstance(obj, (np.generic,)):
        return jsonable(obj.item())
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    return str(obj)


def model_config(model: Any) -> dict[str, Any] | None:
    """The model's `cfg` as a JSON-safe dict (None when it has none); a backend's `recorded_cfg`
    (our model's and NSA's own config, a HF backend's `BackendConfig`)."""
    cfg = recorded_config(model)
    if cfg is None:
        return None
    if dataclasses.is_dataclass(cfg):
        return jsonable(cfg)
    return jsonable(dict(vars(cfg))) if hasattr(cfg, "__dict__") else {"repr": str(cfg)}


def dumps(obj: Any) -> str:
    """Strict JSON text of `jsonable(obj)`."""
    return json.dumps(jsonable(obj), indent=1, allow_nan=False)
