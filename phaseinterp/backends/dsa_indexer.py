"""Deprecated alias of `phaseinterp.families.dsa.indexer`: this code lives in its model family's folder
(`phaseinterp/families/dsa/`). Kept so that old imports keep working; import from the new path."""

import sys
import warnings

from phaseinterp.families.dsa import indexer as _module

warnings.warn(f"{__name__} is deprecated: import {_module.__name__}", DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _module
