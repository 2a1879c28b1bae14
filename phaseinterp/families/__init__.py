"""The built-in model families, one module each; importing this package registers them all in
`phaseinterp.family.FAMILIES` (whose lookups it re-exports). A new family is one module here (or
in user code) calling `register_family`, see docs/architecture.md.

Example:
    >>> from phaseinterp import families
    >>> [f.name for f in families.FAMILIES][:3]
    ['hooked', 'hf-causal-lm', 'deepseek-v4']
"""

from phaseinterp.families import hooked, hf_causal_lm, deepseek_v4, nsa, compressed_hf, hf  # noqa: F401  (registration order)
from phaseinterp.family import (FAMILIES, ModelFamily, backend_of, build_model, config_from_dict, family_of_config,
                                family_of_format, family_of_model, known_formats, register_family)

__all__ = ["FAMILIES", "ModelFamily", "backend_of", "build_model", "config_from_dict", "family_of_config",
           "family_of_format", "family_of_model", "known_formats", "register_family"]
