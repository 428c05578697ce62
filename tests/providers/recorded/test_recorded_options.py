"""The request callbacks over every recorded response: observing changes nothing.

Each successful recording is replayed once plainly and once with ``on_payload`` (keeping
the body), ``on_response`` and ``on_provider_stream_event`` set: the events and the final
message are the same, ``on_response`` ran once before the first event with the status, and
the observer saw every event's parsed JSON in order up to the adapter's last (Anthropic's
``ping``, an ``event: error`` and Chat Completions' ``[DONE]`` are not passed), read from
the bytes here with sseclient.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import sseclient

from piagent.messages import UserMessage, message_to_dict
from piagent.models import Model
from piagent.providers import stream_simple
from piagent.stream import Context, ProviderResponse, StreamOptions

from ..sse_script import WAIT, Reply, ScriptedServer
from .test_recorded import _BASE, DATA, KEY, _load


def _successful() -> list[str]:
    names = []
    for path in sorted(DATA.glob("*.meta.json")):
        meta = json.loads(path.read_text())
        if meta["status"] == 200 and not meta.get("xfail"):
            names.append(path.name[: -len(".meta.json")])
    return names


_LAST = {"openai-responses": {"response.completed", "response.failed", "response.incomplete",
                               "response.done"},
         "anthropic-messages": {"message_stop"}}


def _raw_events(api: str, body: bytes) -> list[Any]:
    """Each event's parsed data up to the adapter's terminal one, as the adapters hand
    them to the observer."""
    found = []
    for event in sseclient.SSEClient(iter([body])).events():
        text = event.data
        if event.event == "error":
            break  # the adapters stop there (as pi-ai's SDKs throw), unobserved
        if not text.strip():
            continue
        if api == "openai-completions" and text.strip() == "[DONE]":
            break
        if api == "anthropic-messages" and event.event == "ping":
            continue
        found.append(json.loads(text))
        if isinstance(found[-1], dict) and found[-1].get("type") in _LAST.get(api, ()):
            break
    return found


def _replay(server: ScriptedServer, meta: dict[str, Any], body: bytes,
            options: StreamOptions) -> tuple[list[Any], dict[str, Any]]:
    server.add(Reply(status=200, body=[body], content_type=meta["content_type"]))
    model = Model(id=meta["model"], api=meta["api"], provider=meta["provider"],
                  base_url=server.url + _BASE[meta["api"]])
    stream = stream_simple(model, Context([UserMessage(content="Hi")]), options)
    events = [event.type for event in stream]
    message = message_to_dict(stream.result(WAIT))
    for key in ("timestamp", "durationMs"):
        message.pop(key, None)
    if meta["api"] == "google-generative-ai":  # ids made up per call: not the wire's
        for block in message["content"]:
            block.pop("id", None)
    return events, message


@pytest.mark.parametrize("name", _successful())
def test_observing_changes_nothing(name: str, sse_server: ScriptedServer) -> None:
    meta, body = _load(name)
    plain = _replay(sse_server, meta, body, StreamOptions(api_key=KEY))
    log: list[Any] = []

    def on_response(response: ProviderResponse, model: Model) -> None:
        log.append(("response", response.status))

    observed = _replay(sse_server, meta, body, StreamOptions(
        api_key=KEY, on_payload=lambda payload, model: None, on_response=on_response,
        on_provider_stream_event=lambda data, model: log.append(data)))
    assert observed == plain
    assert sse_server.requests[0].body == sse_server.requests[1].body
    assert log[0] == ("response", 200)
    assert log[1:] == _raw_events(meta["api"], body)
