"""Deprecated alias of `phaseinterp.families.nsa.backend`: this code lives in its model family's folder
(`phaseinterp/families/nsa/`). Kept so that old imports keep working; import from the new path."""

import sys
import warnings

from phaseinterp.families.nsa import backend as _module

warnings.warn(f"{__name__} is deprecated: import {_module.__name__}", DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _module
