"""PrefixEncoder: request bodies byte for byte as ``json_dumps`` makes them, with the JSON of
a conversation's old messages reused (only new message objects are encoded)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

import piagent.providers._wire as wire
from piagent.providers._wire import PrefixEncoder, json_dumps

texts = st.text(max_size=8)  # non-ASCII included: the body is UTF-8, not \u escapes
messages = st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "tool"]),
                                  "content": texts | st.none()})


class Owner:
    """What a conversation keeps for its whole life (the adapters pass its first message)."""


def body(items: list[Any], model: str = "m") -> dict[str, Any]:
    return {"model": model, "messages": items, "stream": True, "tools": [{"n": "é"}]}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["append", "replace", "truncate", "other"]),
                          messages), min_size=1, max_size=12))
def test_every_body_is_what_json_dumps_makes(steps: list[tuple[str, dict[str, Any]]]) -> None:
    encoder = PrefixEncoder(size=2)
    owner = Owner()  # "mine" is kept by its owner; "other" by its first item
    mine: list[Any] = [{"role": "system", "content": "s"}]
    other: list[Any] = [{"role": "system", "content": "o"}]
    for action, message in steps:
        if action == "append":
            mine.append(message)
        elif action == "replace" and len(mine) > 1:
            mine[len(mine) // 2] = message  # a new object in the middle: re-encoded from there
        elif action == "truncate":
            del mine[1:]
        else:
            other.append(message)
            assert encoder.encode(body(other, "x"), "messages") == json_dumps(body(other, "x"))
        encoded = encoder.encode(body(mine), "messages", owner)
        assert encoded == json_dumps(body(mine))
        assert json.loads(encoded)["messages"] == mine


@pytest.fixture
def encoded_lists(monkeypatch: pytest.MonkeyPatch) -> Callable[[], list[Any]]:
    """From now on, every message list the body encoder is given (read by calling it)."""
    seen: list[Any] = []
    real = wire._BODY_ENCODER

    class Counting(json.JSONEncoder):
        def encode(self, o: Any) -> str:
            seen.append(o)
            return real.encode(o)

    monkeypatch.setattr(wire, "_BODY_ENCODER", Counting())
    return lambda: [o for o in seen if isinstance(o, list) and o and "role" in o[0]]


def test_only_new_messages_are_encoded(encoded_lists: Callable[[], list[Any]]) -> None:
    encoder = PrefixEncoder()
    transcript: list[Any] = [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]
    encoder.encode(body(transcript), "messages")
    first = len(encoded_lists())
    transcript.append({"role": "assistant", "content": "a"})
    assert encoder.encode(body(transcript), "messages") == json_dumps(body(transcript))
    assert encoded_lists()[first:] == [[transcript[-1]]]  # the new message alone, in one call


def test_an_empty_list_and_a_new_conversation() -> None:
    encoder = PrefixEncoder()
    assert encoder.encode(body([]), "messages") == json_dumps(body([]))
    first = [{"role": "user", "content": "a"}]
    assert encoder.encode(body(first), "messages") == json_dumps(body(first))
    equal_but_new = [{"role": "user", "content": "b"}]
    assert encoder.encode(body(equal_but_new), "messages") == json_dumps(body(equal_but_new))


@pytest.mark.parametrize("shape", [
    {"messages": [{"a": 1}]},  # nothing before or after the list
    {"messages": [{"a": 1}], "stream": True},
    {"model": "m", "messages": [{"a": 1}]},
    {"model": "m", "other": [1]},  # no list at all
    {},
])
def test_keys_on_either_side_of_the_list(shape: dict[str, Any]) -> None:
    encoder = PrefixEncoder()
    for _ in range(2):
        assert encoder.encode(shape, "messages") == json_dumps(shape)


def test_conversations_kept_by_owner_each_reuse_their_json_however_many(
        encoded_lists: Callable[[], list[Any]]) -> None:
    """With 50 conversations in flight (more than the fallback keeps), each turn encodes its
    new message only; the entries go when the owners do."""
    import gc

    encoder = PrefixEncoder(size=2)
    owners = [Owner() for _ in range(50)]
    transcripts: list[list[Any]] = [[{"role": "system", "content": f"s{i}"}] for i in range(50)]
    for owner, transcript in zip(owners, transcripts, strict=True):
        encoder.encode(body(transcript), "messages", owner)
    first = len(encoded_lists())
    for turn in range(3):
        for owner, transcript in zip(owners, transcripts, strict=True):
            transcript.append({"role": "user", "content": f"t{turn}"})
            assert (encoder.encode(body(transcript), "messages", owner)
                    == json_dumps(body(transcript)))
    assert encoded_lists()[first:] == [[t[turn + 1]] for turn in range(3) for t in transcripts]
    assert len(encoder._kept) == 50
    del owners, owner
    gc.collect()
    assert len(encoder._kept) == 0
