"""Docstrings → a tool's description and its parameters' descriptions.

Google style (``Args:``) and reST (``:param x:``) are read; the summary is the text before
the first section.
"""

from __future__ import annotations

import inspect
import re

_GOOGLE_SECTION = re.compile(
    r"(?:Args|Arguments|Parameters|Params|Keyword Args|Keyword Arguments|Kwargs)\s*:\s*"
)
_GOOGLE_ENTRY = re.compile(r"\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:(.*)")
_REST_PARAM = re.compile(r":param\s+(?:[^:]*\s)?\*{0,2}(\w+)\s*:(.*)")
_REST_TYPE = re.compile(r":type\s+\w+\s*:")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Split a docstring into the tool description and per-parameter descriptions.

    The parameter sections (Google ``Args:``, reST ``:param x:``/``:type x:``) are taken
    out; everything else stays in the description.
    """
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    params: dict[str, str] = {}
    kept: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if _indent(line) == 0 and _GOOGLE_SECTION.fullmatch(stripped):
            i = _parse_google_args(lines, i + 1, params)
            continue
        rest = _REST_PARAM.fullmatch(stripped)
        if rest or _REST_TYPE.match(stripped):
            i += 1
            text = rest.group(2).strip() if rest else ""
            while i < len(lines) and lines[i].strip() and _indent(lines[i]) > _indent(line):
                text = f"{text} {lines[i].strip()}".strip()
                i += 1
            if rest:
                params[rest.group(1)] = text
            continue
        kept.append(line)
        i += 1
    description = re.sub(r"\n{3,}", "\n\n", "\n".join(kept)).strip()
    return description, params


def _parse_google_args(lines: list[str], i: int, params: dict[str, str]) -> int:
    """Read an ``Args:`` body starting at line ``i``; return the index after it."""
    base: int | None = None
    current: str | None = None
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            # a blank line ends the section unless an indented line follows
            if i + 1 < len(lines) and lines[i + 1].strip() and _indent(lines[i + 1]) > 0:
                i += 1
                continue
            return i
        indent = _indent(line)
        if indent == 0:
            return i
        if base is None:
            base = indent
        entry = _GOOGLE_ENTRY.fullmatch(line.strip())
        if indent <= base and entry:
            current = entry.group(1)
            params[current] = entry.group(2).strip()
        elif current is not None:
            params[current] = f"{params[current]} {line.strip()}".strip()
        i += 1
    return i
