"""Griffe extension for the docs site (mkdocs.yml, mkdocstrings `extensions:`).

The docstrings head their doctests `Example:` (126 of them); Google style as griffe reads it knows only
`Examples:` as the examples section and renders `Example:` as an admonition of Markdown text, where `>>>`
lines become block quotes and `[a, b]` outputs unresolved cross-references. This renames the heading as
each docstring loads, so the doctests render as code and the sources stay as they are.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

EXAMPLE_HEADING = re.compile(r"^(\s*)Example:[ \t]*$", re.MULTILINE)


class ExampleSections(griffe.Extension):
    """Reads a docstring's `Example:` section heading as `Examples:`."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = EXAMPLE_HEADING.sub(r"\1Examples:", obj.docstring.value)
