"""Keys never leave for another server and never survive in a message: no redirects are
followed, redaction happens before any truncation, and only whole tokens are redacted, once.
"""

from __future__ import annotations

import pytest

from piagent.messages import UserMessage
from piagent.models import Model
from piagent.providers import stream_simple
from piagent.providers.kit import redact
from piagent.stream import Context, StreamOptions

from .sse_script import WAIT, Reply, ScriptedServer

KEY = "sk-test-SECRET-abcdef1234567890"

ADAPTERS = [  # (api, provider, path under the server for base_url, the key's header)
    ("anthropic-messages", "anthropic", "", "x-api-key"),
    ("google-generative-ai", "google", "/v1beta", "x-goog-api-key"),
    ("openai-completions", "openai", "/v1", "authorization"),
    ("openai-responses", "openai", "/v1", "authorization"),
    ("azure-openai-responses", "azure", "/openai/v1", "api-key"),
    ("mistral-conversations", "mistral", "", "authorization"),
]


@pytest.mark.parametrize(("api", "provider", "path", "key_header"), ADAPTERS,
                         ids=[a[0] for a in ADAPTERS])
@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_a_redirect_is_an_error_naming_its_origin_and_the_key_stays(
        sse_server: ScriptedServer, other_server: ScriptedServer, api: str, provider: str,
        path: str, key_header: str, status: int) -> None:
    sse_server.add(Reply(status=status, content_type="text/plain", body=[b"moved"],
                         headers={"Location": other_server.url + "/steal"}))
    model = Model(id="m", api=api, provider=provider, base_url=sse_server.url + path)
    context = Context(messages=[UserMessage(content="hi")])
    message = stream_simple(model, context, StreamOptions(api_key=KEY)).result(WAIT)

    assert message.stop_reason == "error"
    assert f"with a redirect to {other_server.url}." in message.error_message
    assert "set base_url to the address that answers without one" in message.error_message
    assert other_server.requests == []  # never followed, so the key went nowhere else
    assert len(sse_server.requests) == 1  # and not retried
    sent = {name.lower(): value for name, value in sse_server.requests[0].headers.items()}
    assert KEY in sent[key_header]  # the key went only to base_url


def test_a_key_in_an_error_body_is_redacted_before_the_body_is_cut(
        sse_server: ScriptedServer) -> None:
    # the key straddles the 4,000-character cut of the quoted message
    body = ("x " * 1995 + "key " + KEY + " end").encode()
    sse_server.add(Reply(status=400, content_type="text/plain", body=[body]))
    model = Model(id="m", api="openai-completions", provider="openai",
                  base_url=sse_server.url + "/v1")
    context = Context(messages=[UserMessage(content="hi")])
    message = stream_simple(model, context, StreamOptions(api_key=KEY)).result(WAIT)

    assert message.stop_reason == "error"
    assert message.error_message.endswith("key [redac…")  # the cut falls in the replacement
    for k in range(6, len(KEY) + 1):
        assert KEY[:k] not in message.error_message


def test_a_cut_off_key_is_redacted() -> None:
    assert redact(f"a {KEY[:12]}…", (KEY,)) == "a [redacted]…"
    assert redact(f"the key was {KEY[:9]}", (KEY,)) == "the key was [redacted]"


def test_only_whole_tokens_are_redacted_and_only_once() -> None:
    text = "the redacted word, ted, [ted] and tedious"
    assert redact(text, ("ted",)) == "the redacted word, [redacted], [[redacted]] and tedious"
    assert redact("ted", ("ted", "redacted")) == "[redacted]"
    assert redact(f"Bearer {KEY}, again {KEY}", (KEY,)) == "Bearer [redacted], again [redacted]"
    assert redact("nothing here", ()) == "nothing here"
