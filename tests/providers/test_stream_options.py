"""pi-ai's request options on each built-in adapter, against a local server.

``on_payload`` (inspect, edit in place, replace the body), ``on_response`` (status and
headers of every response: the retried and failed ones, the accepted one before any event), ``on_provider_stream_event`` (each parsed
provider event), ``identity`` (User-Agent and attribution), a ``None`` header removing a
default one, ``timeout_ms`` (a stalled body, a server that never answers) and ``env`` (the
API key and ``PI_CACHE_RETENTION``). Plus the checks ``StreamOptions`` makes at
construction, and that an unused option leaves the per-chunk path as it was.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from piagent import __version__
from piagent.messages import SystemMessage, ToolDeclaration, UserMessage
from piagent.models import Model
from piagent.providers import stream_simple
from piagent.providers.kit import HttpClient, ProviderCall, parse_event_json
from piagent.stream import (
    ClientAttribution,
    ClientIdentity,
    Context,
    ProviderResponse,
    StreamOptions,
)
from tests.conftest import WAIT

from .sse_script import Reply, ScriptedServer, Stall, sse


def _anthropic_event(name: str, data: dict[str, Any]) -> bytes:
    return sse({"type": name, **data}, event=name)


def _responses_event(name: str, **data: Any) -> bytes:
    return sse({"type": name, **data}, event=name)


@dataclass(frozen=True)
class Adapter:
    api: str
    provider: str
    path: str  # appended to the server's URL as base_url
    key_header: str  # the header the key travels in (its value contains the key)
    key_variable: str  # the environment variable of the key
    body: tuple[bytes, ...]  # a complete answer "hi"
    raw: tuple[Any, ...]  # what on_provider_stream_event receives for ``body``

    def model(self, server: ScriptedServer, **fields: Any) -> Model:
        fields.setdefault("provider", self.provider)
        return Model(id="m-1", api=self.api, base_url=server.url + self.path, **fields)


_COMPLETIONS = (
    {"id": "c", "choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": None}]},
    {"id": "c", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    {"id": "c", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 1}},
)
_RESPONSES = (
    {"type": "response.output_item.added", "output_index": 0,
     "item": {"type": "message", "id": "msg_1", "role": "assistant", "content": []}},
    {"type": "response.output_text.delta", "output_index": 0, "content_index": 0,
     "delta": "hi"},
    {"type": "response.output_item.done", "output_index": 0,
     "item": {"type": "message", "id": "msg_1", "role": "assistant",
              "content": [{"type": "output_text", "text": "hi"}]}},
    {"type": "response.completed", "response": {
        "status": "completed", "usage": {"input_tokens": 3, "output_tokens": 1}}},
)
_ANTHROPIC = (
    {"type": "message_start", "message": {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "m-1", "content": [],
        "usage": {"input_tokens": 3, "output_tokens": 1}}},
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hi"}},
    {"type": "content_block_stop", "index": 0},
    {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
     "usage": {"output_tokens": 1}},
    {"type": "message_stop"},
)
_GOOGLE = (
    {"candidates": [{"content": {"role": "model", "parts": [{"text": "hi"}]}}]},
    {"candidates": [{"content": {"role": "model", "parts": [{"text": ""}]},
                     "finishReason": "STOP"}],
     "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 1}},
)

ADAPTERS = {
    "openai-completions": Adapter(
        "openai-completions", "openai", "/v1", "Authorization", "OPENAI_API_KEY",
        (*(sse(c) for c in _COMPLETIONS), b"data: [DONE]\n\n"), _COMPLETIONS),
    "openai-responses": Adapter(
        "openai-responses", "openai", "/v1", "Authorization", "OPENAI_API_KEY",
        tuple(sse(e, event=e["type"]) for e in _RESPONSES), _RESPONSES),
    "azure-openai-responses": Adapter(
        "azure-openai-responses", "azure", "/openai/v1", "api-key", "AZURE_OPENAI_API_KEY",
        tuple(sse(e, event=e["type"]) for e in _RESPONSES), _RESPONSES),
    "mistral-conversations": Adapter(
        "mistral-conversations", "mistral", "", "Authorization", "MISTRAL_API_KEY",
        (*(sse(c) for c in _COMPLETIONS), b"data: [DONE]\n\n"), _COMPLETIONS),
    "anthropic-messages": Adapter(
        "anthropic-messages", "anthropic", "", "x-api-key", "ANTHROPIC_API_KEY",
        # a ping is no message event: pi-ai never hands it to the observer
        (_anthropic_event("ping", {}), *(sse(e, event=e["type"]) for e in _ANTHROPIC)),
        _ANTHROPIC),
    "google-generative-ai": Adapter(
        "google-generative-ai", "google", "/v1beta", "x-goog-api-key", "GEMINI_API_KEY",
        tuple(sse(c) for c in _GOOGLE), _GOOGLE),
}


@pytest.fixture(params=list(ADAPTERS))
def adapter(request: pytest.FixtureRequest) -> Adapter:
    return ADAPTERS[request.param]


KEY = "sk-options-SECRET-1234567890"
TOOL = ToolDeclaration("lookup", "Look it up", {"type": "object"})


def _context() -> Context:
    return Context([SystemMessage(content="Be brief.", tools_added=[TOOL], timestamp=0),
                    UserMessage(content="Hello?")])


def _run(adapter: Adapter, server: ScriptedServer, *replies: Reply,
         model: Model | None = None, **options: Any) -> tuple[list[Any], Any]:
    server.add(*(replies or (Reply(body=list(adapter.body)),)))
    options.setdefault("api_key", KEY)
    stream = stream_simple(model or adapter.model(server), _context(), StreamOptions(**options))
    events = list(stream)
    return events, stream.result(WAIT)


def _header(server: ScriptedServer, name: str, index: int = 0) -> str | None:
    """The header ``name`` of request ``index`` (case-insensitive), or ``None``."""
    found = [v for k, v in server.requests[index].headers.items() if k.lower() == name.lower()]
    assert len(found) <= 1, found
    return found[0] if found else None


# --- on_payload -----------------------------------------------------------------------------


def test_on_payload_replaces_the_body(adapter: Adapter, sse_server: ScriptedServer) -> None:
    seen: list[tuple[Any, Model]] = []

    def on_payload(body: Any, model: Model) -> Any:
        seen.append((json.loads(json.dumps(body)), model))
        return {**body, "x_added": [1, "two"]}

    model = adapter.model(sse_server)
    _events, message = _run(adapter, sse_server, model=model, on_payload=on_payload)
    assert message.stop_reason == "stop", message.error_message
    [(body, given)] = seen
    assert given is model
    sent = sse_server.requests[0].json
    assert sent == {**body, "x_added": [1, "two"]}  # what the hook saw, plus its change
    assert "Hello?" in json.dumps(body)


def test_on_payload_none_sends_the_body_with_edits_in_place(
        adapter: Adapter, sse_server: ScriptedServer) -> None:
    def on_payload(body: Any, model: Model) -> None:
        body["x_edited"] = True

    _events, message = _run(adapter, sse_server, on_payload=on_payload)
    assert message.stop_reason == "stop", message.error_message
    assert sse_server.requests[0].json["x_edited"] is True


def test_on_payload_replacement_of_anthropic_still_streams(sse_server: ScriptedServer) -> None:
    adapter = ADAPTERS["anthropic-messages"]
    _events, message = _run(adapter, sse_server, on_payload=lambda body, model: {
        k: v for k, v in body.items() if k != "stream"})
    assert message.stop_reason == "stop", message.error_message
    assert sse_server.requests[0].json["stream"] is True  # pi-ai sets it over the replacement


def test_on_payload_that_raises_fails_the_stream_and_sends_nothing(
        sse_server: ScriptedServer) -> None:
    def on_payload(body: Any, model: Model) -> Any:
        raise ValueError("no payloads today")

    adapter = ADAPTERS["openai-completions"]
    stream = stream_simple(adapter.model(sse_server), _context(),
                           StreamOptions(api_key=KEY, on_payload=on_payload))
    message = stream.result(WAIT)
    assert message.stop_reason == "error"
    assert message.error_message == "StreamOptions.on_payload raised ValueError: no payloads today"
    assert sse_server.requests == []


def test_on_payload_replacement_that_is_not_json(sse_server: ScriptedServer) -> None:
    adapter = ADAPTERS["openai-completions"]
    stream = stream_simple(adapter.model(sse_server), _context(),
                           StreamOptions(api_key=KEY, on_payload=lambda body, model: {1j}))
    message = stream.result(WAIT)
    assert message.stop_reason == "error"
    assert message.error_message.startswith(
        "StreamOptions.on_payload returned a request body that cannot be sent as JSON (TypeError")


# --- on_response ----------------------------------------------------------------------------


def test_on_response_sees_status_and_headers_before_any_event(
        adapter: Adapter, sse_server: ScriptedServer) -> None:
    log: list[Any] = []

    def on_response(response: ProviderResponse, model: Model) -> None:
        log.append((response.status, response.headers.get("x-ratelimit-remaining-requests"),
                    model.api))

    throttled = Reply(status=429, content_type="application/json", chunked=False,
                      headers={"retry-after-ms": "1"}, body=[b'{"error": {"message": "slow"}}'])
    accepted = Reply(body=list(adapter.body), headers={"X-RateLimit-Remaining-Requests": "42"})
    sse_server.add(throttled, accepted)
    stream = stream_simple(adapter.model(sse_server), _context(),
                           StreamOptions(api_key=KEY, on_response=on_response, max_retries=1))
    for event in stream:
        log.append(event.type)
    # the retried 429 too (pi-ai 1.6), then the accepted response: names lower-cased
    assert log[:2] == [(429, None, adapter.api), (200, "42", adapter.api)]
    assert log[2] == "start" and log[-1] == "done"
    assert len(sse_server.requests) == 2


def test_on_response_sees_an_error_response(adapter: Adapter,
                                            sse_server: ScriptedServer) -> None:
    """A response that fails the call is reported too (pi-ai 1.6), with its headers."""
    seen: list[tuple[int, str | None]] = []
    refused = Reply(status=400, content_type="application/json", chunked=False,
                    headers={"X-Request-Id": "req-7"},
                    body=[b'{"error": {"message": "bad request"}}'])
    events, message = _run(adapter, sse_server, refused, on_response=lambda response, model:
                           seen.append((response.status, response.headers.get("x-request-id"))))
    assert seen == [(400, "req-7")]
    assert [e.type for e in events] == ["error"] and message.stop_reason == "error"


def test_on_response_that_raises_fails_before_start(sse_server: ScriptedServer) -> None:
    adapter = ADAPTERS["anthropic-messages"]

    def on_response(response: ProviderResponse, model: Model) -> None:
        raise RuntimeError("over budget")

    events, message = _run(adapter, sse_server, on_response=on_response)
    assert [e.type for e in events] == ["error"]
    assert message.error_message == "StreamOptions.on_response raised RuntimeError: over budget"


# --- on_provider_stream_event ---------------------------------------------------------------


def test_each_raw_event_reaches_on_provider_stream_event(
        adapter: Adapter, sse_server: ScriptedServer) -> None:
    raw: list[Any] = []
    model = adapter.model(sse_server)
    _events, message = _run(adapter, sse_server, model=model,
                            on_provider_stream_event=lambda data, m: raw.append((data, m)))
    assert message.stop_reason == "stop", message.error_message
    assert [data for data, _m in raw] == list(adapter.raw)
    assert all(m is model for _data, m in raw)


def test_observer_that_raises_fails_the_stream(sse_server: ScriptedServer) -> None:
    adapter = ADAPTERS["google-generative-ai"]

    def observe(data: Any, model: Model) -> None:
        raise KeyError("candidates")

    _events, message = _run(adapter, sse_server, on_provider_stream_event=observe)
    assert message.stop_reason == "error"
    assert message.error_message == (
        "StreamOptions.on_provider_stream_event raised KeyError: 'candidates'")


def test_unused_options_leave_the_per_chunk_path_alone(sse_server: ScriptedServer) -> None:
    model = ADAPTERS["openai-completions"].model(sse_server)
    call = ProviderCall(model, _context(), StreamOptions(), None, HttpClient("t"),  # type: ignore[arg-type]
                        "T")
    assert call.event_parser() is parse_event_json  # no wrapper: nothing added per chunk
    request = call.request("http://x/", {"a": 1}, {"h": "v"})
    assert (request.body, request.headers, request.on_response) == ({"a": 1}, {"h": "v"}, None)


# --- headers and identity -------------------------------------------------------------------


def test_none_header_removes_a_default_header(adapter: Adapter,
                                              sse_server: ScriptedServer) -> None:
    # lower-cased on purpose: header names compare case-insensitively
    headers = {"user-agent": None, adapter.key_header.lower(): None, "Accept": None,
               "X-Extra": "yes"}
    _events, _message = _run(adapter, sse_server, headers=headers)
    assert _header(sse_server, "User-Agent") is None
    assert _header(sse_server, adapter.key_header) is None
    assert _header(sse_server, "Accept") is None
    assert _header(sse_server, "X-Extra") == "yes"
    assert _header(sse_server, "Content-Type") == "application/json"


def test_default_user_agent_is_detailed(adapter: Adapter, sse_server: ScriptedServer) -> None:
    _run(adapter, sse_server)
    agent = _header(sse_server, "User-Agent")
    assert agent is not None and agent.startswith(f"piagent/{__version__} (")
    assert "; python/3." in agent


@pytest.mark.parametrize(("identity", "expected"), [
    (ClientIdentity(user_agent="short"), "piagent"),
    (ClientIdentity(user_agent="my-app/2.0"), "my-app/2.0"),
])
def test_identity_user_agent(adapter: Adapter, sse_server: ScriptedServer,
                             identity: ClientIdentity, expected: str) -> None:
    _run(adapter, sse_server, identity=identity)
    assert _header(sse_server, "User-Agent") == expected


def test_identity_version_in_the_detailed_agent(sse_server: ScriptedServer) -> None:
    _run(ADAPTERS["openai-responses"], sse_server, identity=ClientIdentity(version="9.9.9"))
    assert (_header(sse_server, "User-Agent") or "").startswith("piagent/9.9.9 (")


ATTRIBUTION = ClientAttribution(name="acme", url="https://acme.example",
                                categories=("cli-agent", "ops"))


def test_attribution_headers_for_openrouter(sse_server: ScriptedServer) -> None:
    adapter = ADAPTERS["openai-completions"]
    model = adapter.model(sse_server, provider="openrouter")
    _run(adapter, sse_server, model=model, identity=ClientIdentity(attribution=ATTRIBUTION),
         headers={"X-OpenRouter-Title": "override"})
    assert _header(sse_server, "HTTP-Referer") == "https://acme.example"
    assert _header(sse_server, "X-OpenRouter-Categories") == "cli-agent,ops"
    assert _header(sse_server, "X-OpenRouter-Title") == "override"  # request headers win


@pytest.mark.parametrize(("provider", "header", "value"), [
    ("nvidia", "X-BILLING-INVOKE-ORIGIN", "Acme"),
    ("opencode", "x-opencode-client", "acme"),
    ("openai", "HTTP-Referer", None),  # other providers: no attribution
])
def test_attribution_headers_per_provider(sse_server: ScriptedServer, provider: str,
                                          header: str, value: str | None) -> None:
    adapter = ADAPTERS["openai-completions"]
    model = adapter.model(sse_server, provider=provider)
    _run(adapter, sse_server, model=model, identity=ClientIdentity(attribution=ATTRIBUTION))
    assert _header(sse_server, header) == value


# --- timeout_ms -----------------------------------------------------------------------------


def test_timeout_ms_bounds_a_stalled_stream(adapter: Adapter, sse_server: ScriptedServer) -> None:
    stall = Stall()
    reply = Reply(body=[adapter.body[0], stall])
    started = time.monotonic()
    events, message = _run(adapter, sse_server, reply, timeout_ms=200)
    elapsed = time.monotonic() - started
    assert stall.reached.is_set()
    assert message.stop_reason == "error"
    assert "broke in the middle of the response" in message.error_message
    assert "timed out" in message.error_message
    assert events[0].type == "start" and events[-1].type == "error"
    assert elapsed < WAIT  # the stall lasts 2 × WAIT unless released


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A port that accepts connections (the kernel's backlog) but never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.close()


def test_timeout_ms_bounds_a_server_that_never_answers(adapter: Adapter,
                                                       silent_server: str) -> None:
    model = Model(id="m-1", api=adapter.api, provider=adapter.provider,
                  base_url=silent_server + adapter.path)
    started = time.monotonic()
    message = stream_simple(model, _context(), StreamOptions(
        api_key=KEY, timeout_ms=150, max_retries=0)).result(WAIT)
    assert time.monotonic() - started < WAIT
    assert message.stop_reason == "error"
    assert "(timed out)" in message.error_message


# --- env --------------------------------------------------------------------------------------


def test_env_supplies_the_key_before_the_environment(
        adapter: Adapter, sse_server: ScriptedServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(adapter.key_variable, "sk-from-os-environ")
    _run(adapter, sse_server, api_key=None, env={adapter.key_variable: "sk-from-env-option"})
    assert "sk-from-env-option" in (_header(sse_server, adapter.key_header) or "")


def test_env_without_the_variable_falls_back_to_the_environment(
        adapter: Adapter, sse_server: ScriptedServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(adapter.key_variable, "sk-from-os-environ")
    _run(adapter, sse_server, api_key=None, env={"UNRELATED": "x"})
    assert "sk-from-os-environ" in (_header(sse_server, adapter.key_header) or "")


def test_env_key_is_redacted_from_errors(sse_server: ScriptedServer,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    adapter = ADAPTERS["openai-completions"]
    monkeypatch.delenv(adapter.key_variable, raising=False)
    secret = "sk-env-SECRET-abcdef0123456789"
    reply = Reply(status=401, content_type="application/json", chunked=False,
                  body=[json.dumps({"error": {"message": f"bad key {secret}"}}).encode()])
    _events, message = _run(adapter, sse_server, reply, api_key=None,
                            env={adapter.key_variable: secret})
    assert message.stop_reason == "error"
    assert secret not in message.error_message


def test_env_cache_retention_for_anthropic(sse_server: ScriptedServer,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    adapter = ADAPTERS["anthropic-messages"]
    monkeypatch.setenv("PI_CACHE_RETENTION", "short")
    _run(adapter, sse_server)
    assert "cache_control" in sse_server.requests[0].body.decode()
    _run(adapter, sse_server, env={"PI_CACHE_RETENTION": "none"})
    assert "cache_control" not in sse_server.requests[1].body.decode()


# --- checks at construction -----------------------------------------------------------------


@pytest.mark.parametrize(("options", "error", "text"), [
    ({"on_payload": "not callable"}, TypeError,
     "StreamOptions.on_payload must be a callable or None, got str."),
    ({"on_response": 3}, TypeError, "StreamOptions.on_response must be a callable or None, got int."),
    ({"on_provider_stream_event": [print]}, TypeError,
     "StreamOptions.on_provider_stream_event must be a callable or None, got list."),
    ({"identity": {"userAgent": "short"}}, TypeError,
     "StreamOptions.identity must be a ClientIdentity (e.g. ClientIdentity(user_agent='short')) "
     "or None, got dict."),
    ({"timeout_ms": 0}, ValueError,
     "StreamOptions.timeout_ms must be a positive, finite number of milliseconds, got 0."),
    ({"timeout_ms": float("nan")}, ValueError,
     "StreamOptions.timeout_ms must be a positive, finite number of milliseconds, got nan."),
    ({"timeout_ms": True}, ValueError,
     "StreamOptions.timeout_ms must be a positive, finite number of milliseconds, got True."),
    ({"env": {"OPENAI_API_KEY": 1}}, TypeError,
     "StreamOptions.env must be a mapping of str to str (names to values), got a mapping with "
     "int value for 'OPENAI_API_KEY'."),
    ({"env": ["A=1"]}, TypeError,
     "StreamOptions.env must be a mapping of str to str (names to values), got list."),
])
def test_wrong_options_fail_at_construction(options: dict[str, Any], error: type[Exception],
                                            text: str) -> None:
    with pytest.raises(error) as caught:
        StreamOptions(**options)
    assert str(caught.value) == text


def test_env_error_never_shows_a_value() -> None:
    with pytest.raises(TypeError) as caught:
        StreamOptions(env={"OPENAI_API_KEY": "sk-secret", "N": 2})  # type: ignore[dict-item]
    assert "sk-secret" not in str(caught.value)


@pytest.mark.parametrize(("build", "text"), [
    (lambda: ClientIdentity(user_agent=""),
     "ClientIdentity.user_agent must be 'detailed', 'short' or a non-empty User-Agent string, "
     "got ''."),
    (lambda: ClientIdentity(attribution="pi"),
     "ClientIdentity.attribution must be a ClientAttribution or None, got str."),
    (lambda: ClientAttribution(name="a", url="u", categories="cli-agent"),
     "ClientAttribution.categories must be a sequence of str, e.g. ('cli-agent',), got "
     "'cli-agent'."),
    (lambda: ClientAttribution(name=None, url="u"), "ClientAttribution.name must be a str, got NoneType."),
])
def test_wrong_identity_fails_at_construction(build: Callable[[], object], text: str) -> None:
    with pytest.raises(TypeError) as caught:
        build()
    assert str(caught.value) == text


def test_attribution_categories_become_a_tuple() -> None:
    assert ClientAttribution(name="a", url="u", categories=["x", "y"]).categories == ("x", "y")  # type: ignore[arg-type]


def test_no_attribution_by_default(sse_server: ScriptedServer) -> None:
    """pi-agent-core sends pi's attribution (``PI_ATTRIBUTION``) unless told otherwise;
    piagent claims no product: without ``identity.attribution`` no attribution header."""
    adapter = ADAPTERS["openai-completions"]
    _run(adapter, sse_server, model=adapter.model(sse_server, provider="openrouter"))
    assert [_header(sse_server, h) for h in ("HTTP-Referer", "X-OpenRouter-Title",
                                             "X-OpenRouter-Categories")] == [None, None, None]
