"""pi-ai's ``shortHash``: a fast, deterministic, non-cryptographic hash that shortens long ids.

Two 32-bit multiply-xorshift lanes over the string's UTF-16 code units, printed in base 36
(the second lane first), exactly as pi-ai 1.6.1 computes it, so an id shortened here is the
id pi sends.
"""

from __future__ import annotations

__all__ = ["short_hash"]

_MASK = 0xFFFFFFFF
_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"


def short_hash(text: str) -> str:
    """``text``'s pi-ai ``shortHash`` (about 12 base-36 characters)."""
    h1, h2 = 0xDEADBEEF, 0x41C6CE57
    units = text.encode("utf-16-le", "surrogatepass")
    for i in range(0, len(units), 2):
        ch = units[i] | units[i + 1] << 8
        h1 = ((h1 ^ ch) * 2654435761) & _MASK
        h2 = ((h2 ^ ch) * 1597334677) & _MASK
    h1 = ((h1 ^ (h1 >> 16)) * 2246822507 & _MASK) ^ ((h2 ^ (h2 >> 13)) * 3266489909 & _MASK)
    h2 = ((h2 ^ (h2 >> 16)) * 2246822507 & _MASK) ^ ((h1 ^ (h1 >> 13)) * 3266489909 & _MASK)
    return _base36(h2) + _base36(h1)


def _base36(value: int) -> str:
    digits = ""
    while True:
        value, rest = divmod(value, 36)
        digits = _DIGITS[rest] + digits
        if not value:
            return digits
