"""Deprecated alias of `phaseinterp.families.hooked.backend`: this code lives in its model family's folder
(`phaseinterp/families/hooked/`). Kept so that old imports keep working; import from the new path."""

import sys

from phaseinterp.families.hooked import backend as _module

sys.modules[__name__] = _module
