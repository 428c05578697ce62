"""Responses replay ids as pi-ai 1.6.1 gives them: ``shortHash`` (its values computed by
pi-ai's own function), the ``msg_pi_{n}[_{j}]`` fallback, another provider's call item ids
(``fc_<hash>``, or none for a provider without OpenAI's ``call|item`` ids), and another
model's thinking dropped. The request differential (``replay-*`` conversations) compares the
same with pi-ai; these pin the edges it does not run."""

from __future__ import annotations

import pytest

from piagent.providers._hash import short_hash


@pytest.mark.parametrize(("text", "expected"), [
    ("", "k4n83c7h0j2b"),
    ("a", "m8735310ae7sx"),
    ("msg_" + "x" * 70, "1f43gnm1wcb1pr"),
    ("fc_" + "z" * 80, "1jdtn1u1p8od6g"),
])
def test_short_hash_is_pi_s(text: str, expected: str) -> None:
    assert short_hash(text) == expected


def test_short_hash_counts_utf16_units() -> None:
    # a character outside the BMP is two code units in JavaScript; a lone half is one
    assert short_hash("\U0001f642") == short_hash("\ud83d\ude42")
    assert short_hash("\ud83d") != short_hash("")
