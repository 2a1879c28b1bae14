"""Completion-flip sweep: candidate next-token probabilities as a filler of length L varies, and
whether the preferred candidate follows L mod P (see `phaseinterp.flip.sweep`).

Example:
    >>> from phaseinterp.flip import FillerSpec, completion_flip
    >>> spec = FillerSpec(symbol=5, words=(7, 8, 9), comment_prefix=(3,), newline=4)
    >>> spec.tokens("symbol", 3), spec.tokens("words", 4)
    ([5, 5, 5], [7, 8, 9, 7])
"""

from phaseinterp.flip.filler import FAMILIES, FillerSpec
from phaseinterp.flip.sweep import FlipResult, completion_flip, completion_flip_text

__all__ = ["FAMILIES", "FillerSpec", "FlipResult", "completion_flip", "completion_flip_text"]
