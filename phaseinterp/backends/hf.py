"""Deprecated alias of `phaseinterp.families.hf.backend`: this code lives in its model family's folder
(`phaseinterp/families/hf/`). Kept so that old imports keep working; import from the new path."""

import sys

from phaseinterp.families.hf import backend as _module

sys.modules[__name__] = _module
