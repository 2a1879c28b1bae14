"""Deprecated alias of `phaseinterp.families.nsa.backend`: this code lives in its model family's folder
(`phaseinterp/families/nsa/`). Kept so that old imports keep working; import from the new path."""

import sys

from phaseinterp.families.nsa import backend as _module

sys.modules[__name__] = _module
