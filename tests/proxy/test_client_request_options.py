"""What the proxy client does with pi-ai's request options, as pi's ``streamProxy`` does:
``headers`` travel (a ``None`` value as JSON ``null``, which the server's adapter honours);
the callbacks, ``identity``, ``timeout_ms`` and ``env`` stay on the client, unused (the
proxy's own request is not a provider request)."""

from __future__ import annotations

import io
import json
from typing import Any

from piagent.messages import UserMessage
from piagent.proxy import ProxyStreamOptions, proxy_stream_fn, stream_proxy
from piagent.stream import ClientIdentity, Context, StreamOptions
from piagent.testing import ScriptedStreamFn, assistant_text
from tests.conftest import WAIT

from .conftest import TOKEN


def _recording(serve: Any, fn: ScriptedStreamFn, bodies: list[Any]) -> Any:
    inner = serve(fn).app

    def app(environ: dict[str, Any], start_response: Any) -> Any:
        raw = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        bodies.append({"body": json.loads(raw), "agent": environ.get("HTTP_USER_AGENT")})
        return inner(dict(environ, **{"wsgi.input": io.BytesIO(raw)}), start_response)

    return serve(app=app)


def test_headers_travel_and_the_rest_stays(serve: Any) -> None:
    calls: list[str] = []
    fn = ScriptedStreamFn([assistant_text("ok")])
    bodies: list[Any] = []
    server = _recording(serve, fn, bodies)
    options = ProxyStreamOptions(
        proxy_url=server.url, auth_token=TOKEN, headers={"X-A": "1", "User-Agent": None},
        on_payload=lambda body, model: calls.append("payload"),
        on_response=lambda response, model: calls.append("response"),
        on_provider_stream_event=lambda data, model: calls.append("event"),
        identity=ClientIdentity(user_agent="short"), timeout_ms=60_000,
        env={"OPENAI_API_KEY": "sk-client-env"})
    result = stream_proxy(fn.model, Context([UserMessage("hi")]), options).result(WAIT)

    assert result.stop_reason == "stop", result.error_message
    [sent] = bodies
    assert sent["body"]["options"] == {"headers": {"X-A": "1", "User-Agent": None}}
    assert "sk-client-env" not in json.dumps(sent["body"])
    assert sent["agent"] != "piagent"  # the identity is not applied to the proxy request
    assert calls == []
    received = fn.calls[0].options
    assert received.headers == {"X-A": "1", "User-Agent": None}
    assert (received.on_payload, received.identity, received.timeout_ms, received.env) == (
        None, None, None, None)


def test_proxy_stream_fn_keeps_them_on_the_client(serve: Any) -> None:
    fn = ScriptedStreamFn([assistant_text("ok")])
    bodies: list[Any] = []
    server = _recording(serve, fn, bodies)
    stream_fn = proxy_stream_fn(server.url, TOKEN)
    options = StreamOptions(timeout_ms=5000, identity=ClientIdentity(), env={"A": "b"},
                            on_response=lambda response, model: None)
    result = stream_fn(fn.model, Context([UserMessage("hi")]), options).result(WAIT)
    assert result.stop_reason == "stop", result.error_message
    assert bodies[0]["body"]["options"] == {}
