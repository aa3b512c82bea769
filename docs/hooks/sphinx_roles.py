"""A griffe extension for the API reference: the docstrings' Sphinx roles (``:func:`~zen_analysis.x.f```) written
as Markdown inline code (`` `f` ``), since mkdocstrings renders the text as Markdown and would show the roles raw."""

from __future__ import annotations

import re

import griffe

ROLE = re.compile(r":(?:py:)?(?:mod|func|class|meth|attr|data|exc|obj|const):`(~?)([^`]+)`")


def _code(m: re.Match) -> str:
    short, target = m.group(1), m.group(2)
    return f"`{target.rsplit('.', 1)[-1] if short else target}`"


class SphinxRoles(griffe.Extension):
    def on_object(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = ROLE.sub(_code, obj.docstring.value)
