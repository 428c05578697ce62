"""Keys stay where they belong, for all 4 wire APIs and the proxy client.

* A redirect is never followed: the other origin never sees a request (so neither
  ``x-api-key`` nor ``x-goog-api-key`` nor ``Authorization`` reaches it), and the error
  names the Location's origin.
* Redaction happens before (or survives) every truncation: a key straddling the
  4,000-character cut of an HTTP error body, the 200-character quote of an event's data,
  the 500-character Anthropic stream error and Google's 500-character tail leaves no
  prefix of itself (of 6 characters or more: shorter ones cannot be told from text) in the
  message.
* A short proxy token is redacted as a whole token, once: never inside a word, never
  "[redac[redacted]ed]".
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from piagent import Context, Model, StreamOptions, UserMessage
from piagent.providers import stream_simple
from piagent.proxy import ProxyStreamOptions, stream_proxy

from ..conftest import WAIT
from .conftest import FIGURES
from .faultserver import APIS, KEY_HEADER, PROVIDER, Fault, FaultServer, Writer, error_body, sse

KEY = "sk-sec-SECRET-0123456789abcdefghijklmn"


def assert_no_key_prefix(text: str, key: str = KEY) -> None:
    leaked = [key[:k] for k in range(6, len(key) + 1) if key[:k] in text]
    assert leaked == [], f"a prefix of the key leaked: {leaked[-1]!r} in {text[-300:]!r}"


def straddling(cut: int, offset: int = 10, glue: str = " ") -> str:
    """Text of which the key covers position ``cut`` (it starts ``offset`` before), after
    ``glue`` (a space: the key is a token of its own; "" glues it to the word before)."""
    return "y" * (cut - offset - len(glue)) + glue + KEY + " and more text after the key"


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[FaultServer, FaultServer]]:
    other = FaultServer()
    server = FaultServer(FAULTS)
    server.redirect_to = other.url
    try:
        yield server, other
    finally:
        server.close()
        other.close()


def run(server: FaultServer, fault: str, api: str, key: str = KEY) -> str:
    model = Model(id="m", api=api, provider=PROVIDER[api], base_url=server.base_url(fault, api))
    message = stream_simple(model, Context([UserMessage(content="hi")]),
                            StreamOptions(api_key=key, max_retries=0)).result(WAIT)
    assert message.stop_reason == "error"
    assert message.error_message
    FIGURES.add("security.checks")
    return message.error_message


# --- faults that carry the key -----------------------------------------------------------------


def _redirect(status: int, location: str) -> Fault:
    def write(w: Writer, api: str, hit: int) -> None:
        target = location.replace("OTHER", w.server.redirect_to)
        w.reply(status, b"moved", "text/plain", headers={"Location": target})
    return Fault(f"redirect-{status}-{abs(hash(location))}", write, "error")


REDIRECTS = [_redirect(s, "OTHER/steal/openai-completions/x") for s in (301, 302, 303, 307, 308)]


def _http_body(w: Writer, api: str, hit: int) -> None:
    # the provider's message is cut at 4,000 characters; the key covers the cut
    w.reply(400, error_body(api, 400, straddling(4000)))


def _http_text_body(w: Writer, api: str, hit: int) -> None:
    w.reply(500, straddling(4000).encode(), "text/plain")


def _event_data(w: Writer, api: str, hit: int) -> None:
    # not JSON: the message quotes the first 200 characters of the data
    w.head()
    w.body([b"data: " + straddling(200).encode() + b"\n\n"])


def _anthropic_stream_error(w: Writer, api: str, hit: int) -> None:
    # an error event whose "error" is not an object: quoted as JSON, cut at 500
    prefix_len = len(json.dumps({"type": "error", "error": ""})) - 2
    w.head()
    w.body([sse({"type": "error", "error": straddling(500 - prefix_len)}, event="error")])


def _google_tail(w: Writer, api: str, hit: int) -> None:
    # Gemini's bare (not SSE) tail, not JSON: quoted, cut at 500
    w.head()
    w.body([straddling(500).encode()])


def _google_tail_json(w: Writer, api: str, hit: int) -> None:
    w.head()
    w.body([json.dumps({"note": straddling(500)}).encode()])


def _completions_error_event(w: Writer, api: str, hit: int) -> None:
    # "event: error" with data that is not JSON: cut at 4,000
    w.head()
    w.body([b"event: error\ndata: " + straddling(4000).encode() + b"\n\n"])


def _content_type_body(w: Writer, api: str, hit: int) -> None:
    w.reply(200, error_body(api, 200, straddling(4000)), "application/json")


def _proxy_error(w: Writer, api: str, hit: int) -> None:
    w.reply(401, b'{"error": "token ted is not valid; redacted, tedious, [ted], ted-x"}')


def _proxy_event(w: Writer, api: str, hit: int) -> None:
    w.head()
    w.body([b"data: " + straddling(200).encode() + b"\n\n"])


FAULTS = {f.name: f for f in [
    *REDIRECTS,
    Fault("redirect-relative", lambda w, api, hit: w.reply(
        302, b"", "text/plain", headers={"Location": "/elsewhere"}), "error"),
    Fault("http-body", _http_body, "error"),
    Fault("http-text-body", _http_text_body, "error"),
    Fault("event-data", _event_data, "error"),
    Fault("anthropic-stream-error", _anthropic_stream_error, "error"),
    Fault("google-tail", _google_tail, "error"),
    Fault("google-tail-json", _google_tail_json, "error"),
    Fault("completions-error-event", _completions_error_event, "error"),
    Fault("content-type-body", _content_type_body, "error"),
    Fault("proxy-error", _proxy_error, "error"),
    Fault("proxy-event", _proxy_event, "error"),
]}


# --- redirects ---------------------------------------------------------------------------------


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("fault", [f.name for f in REDIRECTS])
def test_a_cross_origin_redirect_is_not_followed(servers: tuple[FaultServer, FaultServer],
                                                 fault: str, api: str) -> None:
    server, other = servers
    error = run(server, fault, api)
    assert f"with a redirect to {other.url}." in error
    assert list(other.requests) == []  # the key header never reached the other origin
    sent = server.requests_for(fault, api)
    assert len(sent) == 1 and KEY in sent[0].headers[KEY_HEADER[api]]
    assert KEY not in error


@pytest.mark.parametrize("api", APIS)
def test_a_relative_redirect_names_its_own_origin(servers: tuple[FaultServer, FaultServer],
                                                  api: str) -> None:
    server, _ = servers
    error = run(server, "redirect-relative", api)
    assert f"with a redirect to {server.url}." in error
    assert len(server.requests_for("redirect-relative", api)) == 1


# --- redaction before truncation ---------------------------------------------------------------


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("fault", ["http-body", "http-text-body", "event-data",
                                   "content-type-body"])
def test_a_key_cut_by_a_truncation_leaves_no_prefix(servers: tuple[FaultServer, FaultServer],
                                                    fault: str, api: str) -> None:
    server, _ = servers
    error = run(server, fault, api)
    assert "yyyyyyyyyy" in error  # the quoted text is there, only the key is not
    assert_no_key_prefix(error)


@pytest.mark.parametrize(("fault", "api"), [
    ("anthropic-stream-error", "anthropic-messages"),
    ("google-tail", "google-generative-ai"),
    ("google-tail-json", "google-generative-ai"),
    ("completions-error-event", "openai-completions"),
])
def test_a_key_cut_by_an_adapter_quote_leaves_no_prefix(
        servers: tuple[FaultServer, FaultServer], fault: str, api: str) -> None:
    server, _ = servers
    error = run(server, fault, api)
    assert "yyyyyyyyyy" in error
    assert_no_key_prefix(error)


@pytest.mark.parametrize("offset", range(1, 40, 3))
def test_every_cut_position_inside_the_key_is_redacted(
        servers: tuple[FaultServer, FaultServer], offset: int) -> None:
    server, _ = servers

    def write(w: Writer, api: str, hit: int) -> None:
        w.reply(400, error_body(api, 400, straddling(4000, offset)))

    server.faults[f"cut-{offset}"] = Fault(f"cut-{offset}", write, "error")
    for api in APIS:
        assert_no_key_prefix(run(server, f"cut-{offset}", api))


@pytest.mark.parametrize("api", APIS)
def test_a_long_key_glued_to_a_word_is_redacted_too(servers: tuple[FaultServer, FaultServer],
                                                    api: str) -> None:
    server, _ = servers

    def write(w: Writer, api: str, hit: int) -> None:
        w.reply(400, error_body(api, 400, "token=x" + KEY + "y " + straddling(4000, glue="")))

    server.faults["glued"] = Fault("glued", write, "error")
    error = run(server, "glued", api)
    assert "token=x[redacted]y " in error
    assert_no_key_prefix(error)


# --- the proxy token ---------------------------------------------------------------------------


def test_a_short_proxy_token_is_redacted_as_whole_tokens_once(
        servers: tuple[FaultServer, FaultServer]) -> None:
    server, _ = servers
    model = Model(id="m", api="openai-completions", provider="openai", base_url="unused")
    options = ProxyStreamOptions(proxy_url=f"{server.url}/proxy-error/openai-completions",
                                 auth_token="ted", max_retries=0)
    message = stream_proxy(model, Context([UserMessage(content="hi")]), options).result(WAIT)
    error = message.error_message or ""
    assert message.stop_reason == "error"
    assert "token [redacted] is not valid; redacted, tedious, [[redacted]], [redacted]-x" in \
        error or "token [redacted] is not valid; redacted, tedious, [[redacted]], ted-x" in error
    assert "[redac[redacted]ed]" not in error
    assert "redacted, tedious" in error  # words holding the token keep their letters
    sent = server.requests_for("proxy-error", "openai-completions")
    assert sent[0].headers["authorization"] == "Bearer ted"


def test_a_proxy_token_cut_by_the_event_quote_leaves_no_prefix(
        servers: tuple[FaultServer, FaultServer]) -> None:
    server, _ = servers
    model = Model(id="m", api="openai-completions", provider="openai", base_url="unused")
    options = ProxyStreamOptions(proxy_url=f"{server.url}/proxy-event/openai-completions",
                                 auth_token=KEY, max_retries=0)
    message = stream_proxy(model, Context([UserMessage(content="hi")]), options).result(WAIT)
    assert message.stop_reason == "error"
    assert_no_key_prefix(message.error_message or "")
