"""MkDocs hook: the reStructuredText of the docstrings, as the API pages render it through
mkdocstrings' Google-style parser, made readable.

- a cross-reference role, ``:class:`~jaxrot.State```, arrives as ``:class:<code>~jaxrot.State</code>``:
  it becomes ``<code>State</code>`` (the last name after ``~``, the whole path otherwise);
- a paragraph ending in ``::`` (reStructuredText's literal-block marker, as in ``Example::``) ends in
  ``:``.
"""

from __future__ import annotations

import re

_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|attr|data|mod|exc|obj|const|ref):<code>(~?)([^<]*)</code>")
_LITERAL = re.compile(r"::</p>")


def _name(match: re.Match) -> str:
    tilde, target = match.group(1), match.group(2).strip()
    return f"<code>{target.rsplit('.', 1)[-1] if tilde else target}</code>"


def on_page_content(html: str, page, config, files) -> str:
    return _LITERAL.sub(":</p>", _ROLE.sub(_name, html))
