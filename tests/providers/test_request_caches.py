"""The request caches cannot be wrong (issue 44): whatever an application edits in place,
at any depth, between two requests, the cached request is byte for byte the one built
without caches; ``on_payload``'s in-place edits stay in their own request; the suite runs
in check mode (every request built both ways).

The property test edits a random slot of a random earlier message (any dataclass field,
list item or dict value, at any depth: fields no adapter sends too), in a random way: a
new value, an equal value of another type (``1`` for ``True``, ``1.0`` for ``1``), a list
grown, shrunk or reversed, a dict grown or its keys reordered, a block replaced by an
equal copy.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, reject, settings, strategies as st

from piagent.messages import AssistantMessage, TextContent, ToolCall, ToolResultMessage, UserMessage
from piagent.models import Model
from piagent.providers import anthropic, openai_completions
from piagent.providers._compat import get_compat
from piagent.providers._keep import RequestCacheMismatch, cache_mode, set_cache_mode
from piagent.stream import Context, StreamOptions
from tests.conftest import WAIT

from .sse_script import Reply, ScriptedServer, sse
from .test_segments import ANTHROPIC, MODEL, TEXT_ONLY, transcripts


def _completions_bytes(model: Model) -> Callable[[list[Any]], bytes]:
    def build(messages: list[Any]) -> bytes:
        compat = get_compat(model)
        body = openai_completions.build_completions_request(
            model, messages, StreamOptions(), compat,
            wire_messages=openai_completions._convert(model, messages, compat))
        return openai_completions._BODIES.encode(body, "messages", messages[0])

    return build


def _anthropic_bytes(messages: list[Any]) -> bytes:
    body = anthropic.build_anthropic_request(ANTHROPIC, messages, StreamOptions())
    return anthropic._BODIES.encode(body, "messages", messages[0])


BUILDERS = {"completions": _completions_bytes(MODEL),
            "completions-text-only": _completions_bytes(TEXT_ONLY),
            "anthropic": _anthropic_bytes}


@contextlib.contextmanager
def mode(name: str) -> Iterator[None]:
    previous = set_cache_mode(name)
    try:
        yield
    finally:
        set_cache_mode(previous)


def _slots(value: Any, depth: int = 0) -> list[tuple[Any, Any]]:
    """Every (container, key) in ``value``'s tree: dataclass fields, list items, dict
    values (the containers themselves included, as their parents' slots)."""
    out: list[tuple[Any, Any]] = []
    if depth > 8:
        return out
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        children = [(value, f.name) for f in dataclasses.fields(value)]
    elif isinstance(value, list):
        children = [(value, i) for i in range(len(value))]
    elif isinstance(value, dict):
        children = [(value, k) for k in value]
    else:
        return out
    for holder, key in children:
        out.append((holder, key))
        out.extend(_slots(_get(holder, key), depth + 1))
    return out


def _get(holder: Any, key: Any) -> Any:
    return holder[key] if isinstance(holder, (list, dict)) else getattr(holder, key)


def _set(holder: Any, key: Any, value: Any) -> None:
    if isinstance(holder, (list, dict)):
        holder[key] = value
    else:
        setattr(holder, key, value)


def _edit(holder: Any, key: Any, how: int) -> None:
    """Edit one slot in place, one of several ways chosen by ``how``."""
    value = _get(holder, key)
    if isinstance(value, bool):
        _set(holder, key, [not value, int(value), float(value)][how % 3])
    elif isinstance(value, int):
        _set(holder, key, [value + 1, float(value), bool(value) if value in (0, 1) else -value,
                           str(value)][how % 4])
    elif isinstance(value, float):
        _set(holder, key, [value + 0.5, int(value), -value][how % 3])
    elif isinstance(value, str):
        _set(holder, key, [value + " (edited)", "", value.upper(), "".join(value)][how % 4])
    elif value is None:
        _set(holder, key, ["set", 0, {"k": "v"}][how % 3])
    elif isinstance(value, list):
        if how % 5 == 0 and value:
            value.append(copy.copy(value[-1]))
        elif how % 5 == 1 and value:
            value.pop()
        elif how % 5 == 2:
            value.reverse()
        elif how % 5 == 3:
            _set(holder, key, [copy.copy(item) for item in value])  # an equal new list
        else:
            value.clear()
    elif isinstance(value, dict):
        if how % 3 == 0:
            value["added"] = {"nested": [1, True]}
        elif how % 3 == 1:
            items = list(value.items())[::-1]  # the same pairs, the keys in another order
            value.clear()
            value.update(items)
        else:
            value.clear()
    elif dataclasses.is_dataclass(value):
        _set(holder, key, copy.copy(value))  # an equal copy of a block


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(transcripts, st.sampled_from(list(BUILDERS)), st.data())
def test_any_in_place_edit_of_an_earlier_message_is_in_the_next_request(
        transcript: list[Any], builder: str, data: st.DataObject) -> None:
    build = BUILDERS[builder]
    if len(transcript) < 2:
        reject()
    cut = data.draw(st.integers(2, len(transcript)), label="first request's length")
    with mode("on"):
        build(transcript[:cut])  # fills the caches
        build(transcript[:cut])  # and reuses them
    for _ in range(data.draw(st.integers(1, 3), label="edits")):
        target = data.draw(st.integers(0, cut - 1), label="edited message")
        slots = _slots(transcript[target])
        if not slots:
            continue
        holder, key = slots[data.draw(st.integers(0, len(slots) - 1), label="slot")]
        _edit(holder, key, data.draw(st.integers(0, 59), label="how"))
        cut = data.draw(st.integers(cut, len(transcript)), label="next length")
        later = transcript[:cut]
        with mode("off"):
            try:
                fresh = build(later)
            except Exception:  # the edit made a transcript no adapter takes: nothing to compare
                reject()
        with mode("on"):
            cached = build(later)
        assert cached == fresh


def test_the_suite_runs_the_request_caches_in_check_mode() -> None:
    assert os.environ.get("PIAGENT_REQUEST_CACHES") == "check"
    assert cache_mode() == "check"


def test_check_mode_raises_when_a_cache_gives_a_stale_request() -> None:
    """Check mode can fail: a cache entry corrupted by hand is caught at the next build."""
    history: list[Any] = [UserMessage("q"),
                          AssistantMessage([TextContent("a")], api=ANTHROPIC.api,
                                           provider=ANTHROPIC.provider, model=ANTHROPIC.id),
                          UserMessage("q2")]
    with mode("check"):
        _anthropic_bytes(history)
        kept = anthropic._SEGMENTS._kept.get(history[0])
        assert kept is not None
        kept.output[1] = {"role": "assistant", "content": [{"type": "text", "text": "stale"}]}
        with pytest.raises(RequestCacheMismatch, match="SegmentCache.*stale"):
            _anthropic_bytes([*history, UserMessage("q3")])


def test_an_unknown_cache_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="one of"):
        set_cache_mode("sometimes")


def _tool_history(model: Model) -> list[Any]:
    return [UserMessage("Weather?"),
            AssistantMessage([ToolCall("call_1", "get_weather", {"city": "Paris"})],
                             api=model.api, provider=model.provider, model=model.id,
                             stop_reason="toolUse"),
            ToolResultMessage("call_1", "get_weather", [TextContent("sunny")])]


@pytest.mark.usefixtures("caches_on")
@pytest.mark.parametrize("api", ["openai-completions", "anthropic-messages"])
def test_on_payload_edits_in_place_stay_in_their_own_request(sse_server: ScriptedServer,
                                                             api: str) -> None:
    """A hook that edits the body in place (a cache_control on the tool result, the
    arguments changed) changes that request only; the next request without the hook is the
    uncached one, and the transcript's own arguments dict is untouched."""
    if api == "openai-completions":
        model = Model(id="m", api=api, provider="openai", base_url=sse_server.url + "/v1")
        done = [sse({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
                     "choices": [{"index": 0, "delta": {"content": "ok"},
                                  "finish_reason": "stop"}]}), b"data: [DONE]\n\n"]
        stream = openai_completions.stream_openai_completions
    else:
        model = Model(id="claude-x", api=api, provider="anthropic", base_url=sse_server.url,
                      max_tokens=1000)
        done = [sse({"type": "message_start", "message": {
                    "id": "m1", "type": "message", "role": "assistant", "content": [],
                    "usage": {"input_tokens": 1, "output_tokens": 1}}}, event="message_start"),
                sse({"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                     "usage": {"output_tokens": 1}}, event="message_delta"),
                sse({"type": "message_stop"}, event="message_stop")]
        stream = anthropic.stream_anthropic
    history = _tool_history(model)

    def hook(body: Any, _model: Model) -> None:
        for message in body["messages"]:
            content = message["content"]
            if isinstance(content, list):
                for block in content:
                    block["cache_control"] = {"type": "ephemeral"}
                    if "input" in block:
                        block["input"]["city"] = "Rome"
            message["edited"] = True

    requests = []
    for options in (StreamOptions(api_key="k", on_payload=hook), StreamOptions(api_key="k"),
                    StreamOptions(api_key="k")):
        sse_server.add(Reply(body=done))
        stream(model, Context(messages=list(history)), options).result(WAIT)
        requests.append(sse_server.requests[-1].body)
    assert b'"edited":true' in requests[0]
    if api == "anthropic-messages":
        assert b"cache_control" in requests[0] and b"Rome" in requests[0]
    assert history[1].content[0].arguments == {"city": "Paris"}
    with mode("off"):
        sse_server.add(Reply(body=done))
        stream(model, Context(messages=list(history)), StreamOptions(api_key="k")).result(WAIT)
        fresh = sse_server.requests[-1].body
    assert requests[1] == requests[2] == fresh
    assert b"edited" not in fresh and b"Rome" not in fresh


@pytest.mark.parametrize("fast", [True, False])
def test_a_snapshot_sees_an_edit_with_either_identity_check(monkeypatch: pytest.MonkeyPatch,
                                                             fast: bool) -> None:
    """The address comparison (CPython) and the portable ``operator.is_`` one agree."""
    from piagent.providers import _snapshot

    if not fast:
        monkeypatch.setattr(_snapshot, "_ADDRESSES", None)
    elif _snapshot._ADDRESSES is None:
        pytest.skip("this interpreter has no list layout to read addresses from")
    history: list[Any] = [UserMessage("q"),
                          AssistantMessage([ToolCall("c1", "t", {"n": 1})], api="x"),
                          ToolResultMessage("c1", "t", [TextContent("old")]),
                          UserMessage("q2")]
    snapshot = _snapshot.Snapshot()
    assert snapshot.extend(history[:2]) == 2
    assert snapshot.extend(history[2:]) == 2
    assert (snapshot.addresses is not None) is fast
    assert snapshot.unchanged(history, 4) == 4
    history[1].content[0].arguments["n"] = True  # an equal value of another type
    assert snapshot.unchanged(history, 4) == 0
    history[1].content[0].arguments["n"] = 1
    history[2].content[0].text = "new"
    assert snapshot.unchanged(history, 4) == 2  # the first batch is still reusable
    snapshot.truncate(2)
    assert len(snapshot) == 2 and snapshot.unchanged(history, 4) == 2
