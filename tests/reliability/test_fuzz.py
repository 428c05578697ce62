"""Hypothesis fuzzing of everything that reads untrusted text.

* ``parse_streaming_json``: never raises, always gives a dict; on complete JSON it agrees
  with ``json.loads``; every prefix of a JSON object parses.
* Messages: any transcript survives ``messages_to_json`` / ``messages_from_json`` exactly
  (usage counts above 2**53 included).
* ``validate_tool_arguments``: on arbitrary JSON arguments (and arbitrary schemas) it
  returns or raises ``ToolArgumentError``, nothing else.
* Provider decoding: arbitrary bytes, random SSE events and mutated valid streams, served
  over HTTP to each of the 4 adapters and to ``stream_proxy``, end in a ``done`` or an
  ``error`` event with a message (within the wait bound), never an exception.

Examples per target: ``PIAGENT_RELIABILITY=short`` a few hundred, ``full`` thousands (see
``conftest.fuzz_settings``); the counts are in the figures.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, strategies as st

from piagent import (
    AgentTool,
    AgentToolResult,
    AssistantMessage,
    Context,
    ImageContent,
    Model,
    StreamOptions,
    SystemMessage,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolDeclaration,
    ToolResultMessage,
    Usage,
    UserMessage,
    messages_from_json,
    messages_to_json,
    parse_streaming_json,
)
from piagent.errors import ToolArgumentError
from piagent.providers import stream_simple
from piagent.proxy import ProxyStreamOptions, stream_proxy
from piagent.tools import validate_tool_arguments

from ..conftest import WAIT
from .conftest import FIGURES, fuzz_settings, scaled
from .faultserver import APIS, PROVIDER, Fault, FaultServer, Writer, good, sse

pytestmark = pytest.mark.timeout(scaled(60, 1500))  # a full-mode target runs minutes

# --- strategies --------------------------------------------------------------------------------

finite = st.floats(allow_nan=False, allow_infinity=False)
json_scalars = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | finite | st.text()
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner,
                                                               max_size=5),
    max_leaves=25)
json_objects = st.dictionaries(st.text(max_size=8), json_values, max_size=6)
JSONISH = '{}[]":,-+.eE0123456789 \t\n\\/tfnrulasb\u00e9\U0001f600'
jsonish_text = st.text(alphabet=JSONISH, max_size=80)


def same_json(a: Any, b: Any) -> bool:
    """Equal as JSON values (``-0.0 == 0.0``; ints and floats kept apart)."""
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_json(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


# --- parse_streaming_json ----------------------------------------------------------------------


@fuzz_settings("parse_streaming_json.any_text", 300, 5000)
@given(st.text() | jsonish_text)
def test_parse_streaming_json_never_raises(text: str) -> None:
    FIGURES.add("fuzz.parse_streaming_json.any_text")
    assert isinstance(parse_streaming_json(text), dict)


@fuzz_settings("parse_streaming_json.complete", 200, 5000)
@given(json_objects, st.booleans(), st.sampled_from([None, 0, 2]))
def test_parse_streaming_json_matches_json_loads_on_complete_input(
        value: dict[str, Any], ascii_only: bool, indent: int | None) -> None:
    FIGURES.add("fuzz.parse_streaming_json.complete")
    text = json.dumps(value, ensure_ascii=ascii_only, indent=indent)
    assert same_json(parse_streaming_json(text), json.loads(text))


@fuzz_settings("parse_streaming_json.loads_agrees", 300, 5000)
@given(jsonish_text)
def test_parse_streaming_json_agrees_wherever_json_loads_gives_an_object(text: str) -> None:
    FIGURES.add("fuzz.parse_streaming_json.loads_agrees")
    try:
        expected = json.loads(text)
    except ValueError:
        return
    if isinstance(expected, dict):
        assert same_json(parse_streaming_json(text), expected)


@fuzz_settings("parse_streaming_json.prefixes", 150, 2000)
@given(json_objects, st.lists(st.floats(0, 1), min_size=1, max_size=12))
def test_any_prefix_of_a_json_object_parses_to_a_dict(value: dict[str, Any],
                                                      cuts: list[float]) -> None:
    FIGURES.add("fuzz.parse_streaming_json.prefixes")
    text = json.dumps(value)
    for cut in cuts:  # a dozen cut points per object: every position costs O(n²)
        assert isinstance(parse_streaming_json(text[:round(cut * len(text))]), dict)


# --- messages round trip -----------------------------------------------------------------------

counts = st.integers(0, 2**80)
usages = st.builds(Usage, counts, counts, counts, counts, counts)
opt_text = st.none() | st.text(max_size=10)
text_blocks = st.builds(TextContent, st.text(), opt_text)
image_blocks = st.builds(ImageContent, st.text(alphabet="abcXYZ019+/=", max_size=20),
                         st.sampled_from(["image/png", "image/jpeg"]))
tool_calls = st.builds(ToolCall, st.text(max_size=10), st.text(max_size=10), json_objects,
                       opt_text)
assistant_blocks = text_blocks | st.builds(ThinkingContent, st.text(), opt_text,
                                           st.booleans()) | tool_calls
timestamps = st.integers(0, 2**53)
messages = st.one_of(
    st.builds(UserMessage, st.text() | st.lists(text_blocks | image_blocks, max_size=3),
              timestamps),
    st.builds(AssistantMessage, st.lists(assistant_blocks, max_size=4), st.text(max_size=8),
              st.text(max_size=8), st.text(max_size=8), usages,
              st.sampled_from(["stop", "length", "toolUse", "error", "aborted"]), opt_text,
              st.none() | st.sampled_from(["off", "minimal", "low", "medium", "high"]),
              timestamps),
    st.builds(ToolResultMessage, st.text(max_size=10), st.text(max_size=10),
              st.lists(text_blocks | image_blocks, max_size=3), json_values,
              st.none() | usages, st.booleans(), st.none() | st.integers(0, 2**40), timestamps),
    st.builds(SystemMessage, st.text(),
              st.none() | st.dictionaries(st.text(max_size=6), opt_text, max_size=3),
              st.none() | st.lists(st.builds(ToolDeclaration, st.text(min_size=1, max_size=8),
                                             st.text(max_size=10), json_objects), max_size=2),
              st.none() | st.lists(st.text(min_size=1, max_size=8), max_size=2), timestamps),
)


@fuzz_settings("messages.round_trip", 300, 5000)
@given(st.lists(messages, max_size=6), st.sampled_from([None, 2]))
def test_any_transcript_survives_its_json_round_trip(transcript: list[Any],
                                                     indent: int | None) -> None:
    FIGURES.add("fuzz.messages.round_trip")
    back = messages_from_json(messages_to_json(transcript, indent=indent))
    assert back == transcript


# --- validate_tool_arguments -------------------------------------------------------------------

SCHEMAS = [
    {"type": "object", "properties": {"n": {"type": "integer"}, "s": {"type": "string"},
                                      "b": {"type": "boolean"}, "x": {"type": "number"}},
     "required": ["n"]},
    {"type": "object", "properties": {"items": {"type": "array", "items": {"type": "integer"}},
                                      "tags": {"type": "array", "items": {"type": "string"},
                                               "maxItems": 3}}},
    {"type": "object", "properties": {"mode": {"enum": ["a", "b", 3]},
                                      "deep": {"type": "object", "properties": {
                                          "k": {"anyOf": [{"type": "null"},
                                                          {"type": "integer", "minimum": 0}]}},
                                          "additionalProperties": False}}},
    {"type": "object", "properties": {"opt": {"type": ["string", "null"]},
                                      "one": {"oneOf": [{"type": "string"},
                                                        {"type": "array"}]}},
     "additionalProperties": {"type": "number"}},
]
schema_fragments = st.recursive(
    st.fixed_dictionaries({"type": st.sampled_from(
        ["string", "integer", "number", "boolean", "null", "array", "object", "nonsense"])})
    | st.just({}) | st.builds(lambda v: {"enum": v}, st.lists(json_scalars, max_size=3))
    | json_values,
    lambda inner: st.builds(lambda p: {"type": "object", "properties": p},
                            st.dictionaries(st.text(max_size=4), inner, max_size=3))
    | st.builds(lambda i: {"type": "array", "items": i}, inner)
    | st.builds(lambda a: {"anyOf": a}, st.lists(inner, max_size=3)),
    max_leaves=8)


def make_tool(schema: Any) -> AgentTool:
    def execute(*args: Any) -> AgentToolResult:
        return AgentToolResult(content=[])
    return AgentTool(name="fuzzed", description="", parameters=schema, execute=execute)


TOOLS = [make_tool(s) for s in SCHEMAS]


@fuzz_settings("validate_tool_arguments.known_schemas", 300, 5000)
@given(st.sampled_from(range(len(SCHEMAS))), json_values)
def test_validate_tool_arguments_only_raises_tool_argument_error(index: int,
                                                                 arguments: Any) -> None:
    FIGURES.add("fuzz.validate_tool_arguments.known_schemas")
    try:
        validate_tool_arguments(TOOLS[index], arguments)
    except ToolArgumentError as exc:
        assert 'Validation failed for tool "fuzzed"' in str(exc)


@fuzz_settings("validate_tool_arguments.any_schema", 200, 3000)
@given(schema_fragments, json_values)
def test_validate_tool_arguments_survives_arbitrary_schemas(schema: Any,
                                                            arguments: Any) -> None:
    FIGURES.add("fuzz.validate_tool_arguments.any_schema")
    tool = make_tool(schema if isinstance(schema, dict) else {"type": "object"})
    try:  # an invalid schema is logged (a warning) and the arguments pass: documented
        validate_tool_arguments(tool, arguments)
    except ToolArgumentError:
        pass


# --- provider decoding on hostile bytes --------------------------------------------------------


def _payload(w: Writer, api: str, hit: int) -> None:
    w.head()
    w.body(list(w.server.payload))  # type: ignore[attr-defined]


class PayloadServer(FaultServer):
    """A fault server that answers every request with ``payload`` (set per example)."""

    payload: list[bytes] = []


@pytest.fixture(scope="module")
def server() -> Iterator[PayloadServer]:
    s = PayloadServer({"fuzz": Fault("fuzz", _payload, "error")}, keep_requests=4)
    try:
        yield s
    finally:
        s.close()


TARGETS = [*APIS, "proxy"]
EVENT_NAMES = ["message_start", "content_block_start", "content_block_delta",
               "content_block_stop", "message_delta", "message_stop", "error", "ping",
               "response.created", "response.output_item.added", "response.output_text.delta",
               "response.function_call_arguments.delta", "response.output_item.done",
               "response.completed", "response.failed", "start", "text_delta", "done",
               "toolcall_start", "toolcall_delta", "thinking_delta", None]
TYPE_FIELD = st.sampled_from([n for n in EVENT_NAMES if n])
wire_objects = st.fixed_dictionaries(
    {"type": TYPE_FIELD},
    optional={"index": st.integers(-2, 5) | st.text(max_size=3),
              "contentIndex": st.integers(-2, 5), "output_index": st.integers(-2, 3),
              "delta": json_values, "content_block": json_values, "message": json_values,
              "item": json_values, "usage": json_values, "response": json_values,
              "error": json_values, "choices": json_values, "candidates": json_values,
              "usageMetadata": json_values, "reason": json_values, "partial": json_values})


@st.composite
def sse_streams(draw: st.DrawFn) -> list[bytes]:
    """Random events: JSON shaped like the APIs' own, raw junk, comments, [DONE]."""
    items = []
    for _ in range(draw(st.integers(0, 8))):
        kind = draw(st.integers(0, 4))
        if kind <= 1:
            items.append(sse(draw(wire_objects), event=draw(st.sampled_from(EVENT_NAMES))))
        elif kind == 2:
            items.append(sse(json.dumps(draw(json_values))))
        elif kind == 3:
            items.append(draw(st.sampled_from([b"data: [DONE]\n\n", b": ping\n\n", b"\n",
                                               b"event: error\n", b"retry: x\n\n"])))
        else:
            items.append(draw(st.binary(max_size=30)))
    return items


@st.composite
def mutated(draw: st.DrawFn, api: str) -> list[bytes]:
    """A valid stream of ``api`` with bytes flipped, cut, dropped or inserted."""
    data = bytearray(b"".join(good(api)))
    for _ in range(draw(st.integers(1, 4))):
        if not data:
            break
        at = draw(st.integers(0, len(data) - 1))
        how = draw(st.integers(0, 3))
        if how == 0:
            data[at] = draw(st.integers(0, 255))
        elif how == 1:
            del data[at:at + draw(st.integers(1, 40))]
        elif how == 2:
            data[at:at] = draw(st.binary(min_size=1, max_size=10))
        else:
            del data[at:]
    return [bytes(data)]


def decode(server: PayloadServer, target: str, payload: list[bytes]) -> None:
    """Serve ``payload`` to ``target``; the stream must end in done or error, never raise."""
    server.payload = payload
    context = Context([UserMessage(content="hi")])
    if target == "proxy":
        model = Model(id="m", api="openai-completions", provider="openai", base_url="x")
        options: StreamOptions = ProxyStreamOptions(
            proxy_url=f"{server.url}/fuzz/openai-completions", auth_token="tok-fuzz",
            max_retries=0)
        stream = stream_proxy(model, context, options)  # type: ignore[arg-type]
    else:
        model = Model(id="m", api=target, provider=PROVIDER[target],
                      base_url=server.base_url("fuzz", target))
        stream = stream_simple(model, context, StreamOptions(api_key="k", max_retries=0))
    events = list(stream)
    message = stream.result(WAIT)
    assert events, "no event at all"
    assert events[-1].type in ("done", "error")
    if events[-1].type == "error":
        assert message.stop_reason == "error"
        assert message.error_message
    else:
        assert message.stop_reason in ("stop", "length", "toolUse")


@pytest.mark.parametrize("target", TARGETS)
def test_arbitrary_bytes_end_in_an_error_event(server: PayloadServer, target: str) -> None:
    @fuzz_settings(f"decode.bytes.{target}", 60, 600)
    @given(st.lists(st.binary(max_size=200), max_size=4))
    def check(payload: list[bytes]) -> None:
        FIGURES.add(f"fuzz.decode.bytes.{target}")
        decode(server, target, payload)
    check()


@pytest.mark.parametrize("target", TARGETS)
def test_random_sse_events_end_in_done_or_error(server: PayloadServer, target: str) -> None:
    @fuzz_settings(f"decode.events.{target}", 80, 1000)
    @given(sse_streams())
    def check(payload: list[bytes]) -> None:
        FIGURES.add(f"fuzz.decode.events.{target}")
        decode(server, target, payload)
    check()


@pytest.mark.parametrize("api", APIS)
def test_mutated_valid_streams_end_in_done_or_error(server: PayloadServer, api: str) -> None:
    @fuzz_settings(f"decode.mutated.{api}", 80, 1000)
    @given(mutated(api))
    def check(payload: list[bytes]) -> None:
        FIGURES.add(f"fuzz.decode.mutated.{api}")
        decode(server, api, payload)
    check()
