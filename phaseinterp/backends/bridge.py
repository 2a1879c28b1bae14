"""Deprecated alias of `phaseinterp.families.bridges.backend`: this code lives in its model family's folder
(`phaseinterp/families/bridges/`). Kept so that old imports keep working; import from the new path."""

import sys

from phaseinterp.families.bridges import backend as _module

sys.modules[__name__] = _module
