"""The built-in model families, one module (or folder) each, named in `MODULES`: importing this
package imports them in that order, and each registers its family in `phaseinterp.family.FAMILIES`
(whose lookups it re-exports). A family module holds its registration, its Backend class (named by
its dotted path, imported when a model of the family first runs) and its sites; adding a built-in
family is one module here plus one line in `MODULES`; a user's family is a `register_family` call
in user code (see docs/architecture.md). What a model runs on is decided by
`phaseinterp.families.resolve` alone.

Example:
    >>> from phaseinterp import families
    >>> sorted(f.name for f in families.FAMILIES if f.trainable)[:3]
    ['hf-causal-lm', 'hooked', 'nsa']
"""

import importlib

from phaseinterp.family import (FAMILIES, ModelFamily, backend_of, build_model, config_from_dict, family_of_config,
                                family_of_format, family_of_model, find_family, known_formats, register_family)

#: The built-in families, in the order models are tried (fallbacks last whatever their place).
#: `bridges` comes first on purpose: a TransformerLens bridge and an nnsight wrapper answer `.config`
#: with their HF model's config, which the DeepSeek-V4 family (and the HF fallback) would claim.
MODULES = [
    "phaseinterp.families.bridges",
    "phaseinterp.families.gemma3",  # before compressed_hf: a compressed Gemma 3 is both
    "phaseinterp.families.compressed_hf",
    "phaseinterp.families.deepseek_v4",
    "phaseinterp.families.dsa",
    "phaseinterp.families.hf",
    "phaseinterp.families.hf_causal_lm",
    "phaseinterp.families.hooked",
    "phaseinterp.families.nsa",
]

for _module in MODULES:
    importlib.import_module(_module)

__all__ = ["FAMILIES", "MODULES", "ModelFamily", "backend_of", "build_model", "config_from_dict", "family_of_config",
           "family_of_format", "family_of_model", "find_family", "known_formats", "register_family"]
