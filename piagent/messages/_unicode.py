"""Lone UTF-16 surrogates: found and removed (pi-ai's ``sanitizeSurrogates``).

A Python ``str`` can hold a surrogate code point (``"\\ud83d"``): a JSON decoder makes one
from an escape that is half of a pair (a model or server that splits ``"\\ud83d\\ude00"``
between two chunks), ``os.fsdecode`` makes them from bytes that are not UTF-8. Such a string
cannot be encoded as UTF-8: a web stream, a database, a file or a request body refuses it.
pi-ai removes the unpaired ones from request text (JavaScript keeps a pair as one character);
``sanitize_surrogates`` does the same, and joins a high and a low surrogate that stand side by
side into the one character they encode, since in JavaScript that pair is that character.
"""

from __future__ import annotations

import operator
import re
from typing import Any

__all__ = ["has_surrogates", "sanitize_surrogates", "sanitize_surrogates_in"]

# a pair (group 1) or a surrogate of either kind standing alone
_PAIR_OR_LONE = re.compile("([\ud800-\udbff][\udc00-\udfff])|[\ud800-\udfff]")


def _replace(match: re.Match[str]) -> str:
    pair = match.group(1)
    if pair is None:
        return ""
    return chr(0x10000 + ((ord(pair[0]) - 0xD800) << 10) + (ord(pair[1]) - 0xDC00))


def has_surrogates(text: str) -> bool:
    """True when ``text`` holds a surrogate code point, that is when it cannot be encoded as
    UTF-8 (constant time for ASCII text; else one encoding, faster than a search)."""
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # UTF-8 encodes every code point but the surrogates
        return True
    return False


def sanitize_surrogates(text: str) -> str:
    """``text`` without unpaired surrogates, as pi-ai's ``sanitizeSurrogates``: a high
    surrogate directly followed by a low one becomes the character the pair encodes; every
    other surrogate is removed. ``text`` itself when it holds none (constant time for ASCII).
    """
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # UTF-8 encodes every code point but the surrogates
        return _PAIR_OR_LONE.sub(_replace, text)
    return text


def sanitize_surrogates_in(value: Any) -> Any:
    """A JSON-like value (dicts, lists, tuples, strings, anything else as it is) with
    ``sanitize_surrogates`` applied to every string, keys included; ``value`` itself (not a
    copy) when nothing in it changes."""
    if isinstance(value, str):
        return sanitize_surrogates(value)
    if isinstance(value, dict):
        changed = False
        out: dict[Any, Any] = {}
        for key, item in value.items():
            clean_key, clean = sanitize_surrogates_in(key), sanitize_surrogates_in(item)
            changed = changed or clean_key is not key or clean is not item
            out[clean_key] = clean
        return out if changed else value
    if isinstance(value, (list, tuple)):
        items = [sanitize_surrogates_in(item) for item in value]
        if all(map(operator.is_, items, value)):
            return value
        return items if isinstance(value, list) else tuple(items)
    return value
