"""Deprecated alias of `phaseinterp.families.dsa.backend`: this code lives in its model family's folder
(`phaseinterp/families/dsa/`). Kept so that old imports keep working; import from the new path."""

import sys

from phaseinterp.families.dsa import backend as _module

sys.modules[__name__] = _module
