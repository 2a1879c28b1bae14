"""The built-in model families, one module each; importing this package imports every module in it,
which registers its family in `phaseinterp.family.FAMILIES` (whose lookups it re-exports). A new
family is one module here (picked up without registration elsewhere) or in user code, calling
`register_family`; see docs/architecture.md.

Example:
    >>> from phaseinterp import families
    >>> sorted(f.name for f in families.FAMILIES if f.trainable)[:3]
    ['hf-causal-lm', 'hooked', 'nsa']
"""

import importlib
import pkgutil

from phaseinterp.family import (FAMILIES, ModelFamily, backend_of, build_model, config_from_dict, family_of_config,
                                family_of_format, family_of_model, known_formats, register_family)

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    importlib.import_module(f"phaseinterp.families.{_module}")

__all__ = ["FAMILIES", "ModelFamily", "backend_of", "build_model", "config_from_dict", "family_of_config",
           "family_of_format", "family_of_model", "known_formats", "register_family"]
