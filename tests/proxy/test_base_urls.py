"""The proxy sends a provider request only to the catalogue's base URL of the model's
provider, or to one its operator allowed for that provider (``allowed_base_urls``,
``piagent proxy --allow-base-url``). Any other base URL is answered 403 before any
connection is made: a ``CaptureServer`` on another 127.0.0.1 port stands in for the host a
client names and records every connection, so "no byte of the key left" is asserted as
"no connection at all"."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import threading

import pytest
import requests

from piagent.messages import UserMessage
from piagent.models import Model
from piagent.providers import get_model
from piagent.proxy import ProxyApp, ProxyStreamOptions, stream_proxy
from piagent.proxy._protocol import context_to_dict, model_to_dict
from piagent.stream import Context
from piagent.testing import ScriptedStreamFn, assistant_text
from tests.conftest import WAIT, read_child_line

from .conftest import TOKEN, CaptureServer

KEY = "sk-server-side-secret-0123456789"
GROQ_KEY = "gsk-server-side-secret-9876543210"


def _post(url: str, model: Model) -> requests.Response:
    body = {"model": model_to_dict(model),
            "context": context_to_dict(Context([UserMessage("hi")])), "options": {}}
    return requests.post(f"{url}/api/stream", json=body, timeout=WAIT,
                         headers={"Authorization": f"Bearer {TOKEN}"})


CATALOGUE = {"openai": "https://api.openai.com/v1", "groq": "https://api.groq.com/openai/v1"}


def _refusal(provider: str, url: str) -> str:
    if provider in CATALOGUE:
        where = (f"sends {provider} requests only to {CATALOGUE[provider]} (the catalogue's) "
                 "and to the base URLs its operator allowed")
    else:
        where = (f"serves provider {provider!r} (which has no base URL in the catalogue) only "
                 "at base URLs its operator allowed")
    return (f"Base URL {url!r} is not allowed for provider {provider!r}: this proxy {where}; "
            f"the operator can allow it with 'piagent proxy --allow-base-url {provider}=URL' "
            f"or ProxyApp(allowed_base_urls={{'{provider}': URL}}).")


def _tricks(capture: CaptureServer) -> list[tuple[str, str]]:
    """(provider, base URL) pairs that all lead to the capture server."""
    port = capture.port
    return [
        ("openai", capture.url),
        ("openai", f"http://api.openai.com@127.0.0.1:{port}/v1"),  # userinfo, not the host
        ("openai", f"http://api.openai.com\\@127.0.0.1:{port}/v1"),
        ("openai", f"HTTP://127.0.0.1:{port}/v1/"),
        ("vllm", capture.url),        # a provider the catalogue does not list
        ("ollama", f"http://localhost:{port}/v1"),
    ]


@pytest.mark.parametrize("with_key", [True, False], ids=["key", "no-key"])
def test_a_base_url_the_operator_did_not_allow_is_403_and_no_connection_is_made(
        serve, capture, monkeypatch, with_key):
    if with_key:
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
    else:
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    server = serve()  # the default stream function: stream_simple, the real providers
    for provider, url in _tricks(capture):
        model = dataclasses.replace(get_model("openai", "gpt-4o-mini", base_url=capture.url),
                                    provider=provider, base_url=url)
        answer = _post(server.url, model)
        assert answer.status_code == 403, (url, answer.text)
        assert answer.json() == {"error": _refusal(provider, url)}
        assert KEY not in answer.text
        message = stream_proxy(model, Context([UserMessage("hi")]), ProxyStreamOptions(
            proxy_url=server.url, auth_token=TOKEN)).result(WAIT)
        assert message.stop_reason == "error"
        assert message.error_message == f"Proxy error: {_refusal(provider, url)}"
    # no stream function ran (no pump thread), so nothing can connect after the answer
    assert not [t for t in threading.enumerate() if t.name.startswith("piagent-proxy-pump")]
    assert capture.connections == 0
    assert capture.requests == []


@pytest.mark.parametrize("base_url", [
    "https://api.openai.com/v1", "https://api.openai.com/v1/", "HTTPS://API.OpenAI.com:443/v1"])
def test_the_catalogue_base_url_is_served_without_configuration(serve, base_url):
    fn = ScriptedStreamFn([assistant_text("served"), assistant_text("served too")])
    server = serve(fn, allowed_base_urls=None)
    model = dataclasses.replace(get_model("openai", "gpt-4o-mini"), base_url=base_url)
    message = stream_proxy(model, Context([UserMessage("hi")]), ProxyStreamOptions(
        proxy_url=server.url, auth_token=TOKEN)).result(WAIT)
    assert message.text == "served"
    claude = get_model("anthropic", "claude-sonnet-4-5")
    message = stream_proxy(claude, Context([UserMessage("hi")]), ProxyStreamOptions(
        proxy_url=server.url, auth_token=TOKEN)).result(WAIT)
    assert message.text == "served too"
    assert [call.model.base_url for call in fn.calls] == [base_url, claude.base_url]


def test_an_allowed_base_url_gets_the_request_and_the_key_other_providers_do_not(
        serve, capture, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("GROQ_API_KEY", GROQ_KEY)
    server = serve(allowed_base_urls={"openai": [capture.url + "/"], "vllm": capture.url})
    groq = Model(id="m", api="openai-completions", provider="groq", base_url=capture.url)
    answer = _post(server.url, groq)  # allowed for openai and vllm, not for groq
    assert answer.status_code == 403
    assert capture.connections == 0
    message = stream_proxy(get_model("openai", "gpt-4o-mini", base_url=capture.url),
                           Context([UserMessage("hi")]), ProxyStreamOptions(
                               proxy_url=server.url, auth_token=TOKEN)).result(WAIT)
    assert message.stop_reason == "error"
    assert "captured" in (message.error_message or "")
    assert capture.connections == 1
    head = capture.requests[0].partition(b"\r\n\r\n")[0].decode()
    assert head.startswith("POST /v1/chat/completions HTTP/1.1")
    assert f"Authorization: Bearer {KEY}" in head.split("\r\n")
    assert GROQ_KEY.encode() not in capture.requests[0]


def test_resolve_model_runs_first_and_the_model_it_returns_is_checked(serve, capture,
                                                                      monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)

    def to_capture(model: Model) -> Model:  # an operator hook that moves every model
        return dataclasses.replace(model, base_url=capture.url)

    server = serve(resolve_model=to_capture)
    openai = get_model("openai", "gpt-4o-mini")  # asks for the catalogue's URL
    answer = _post(server.url, openai)
    assert answer.status_code == 403
    assert answer.json() == {"error": _refusal("openai", capture.url)}
    assert capture.connections == 0

    fn = ScriptedStreamFn([assistant_text("pinned")])
    pinned = serve(fn, allowed_base_urls=None, resolve_model=lambda model: dataclasses.replace(
        model, base_url=get_model(model.provider, model.id).base_url))
    elsewhere = get_model("openai", "gpt-4o-mini", base_url=capture.url)
    message = stream_proxy(elsewhere, Context([UserMessage("hi")]), ProxyStreamOptions(
        proxy_url=pinned.url, auth_token=TOKEN)).result(WAIT)
    assert message.text == "pinned"
    assert fn.calls[0].model.base_url == "https://api.openai.com/v1"

    def refuse(model: Model) -> Model:
        raise ValueError("only gpt-4o is served")

    answer = _post(serve(resolve_model=refuse).url, elsewhere)
    assert answer.status_code == 403
    assert answer.json() == {"error": "Model openai/gpt-4o-mini is not served here: only "
                                      "gpt-4o is served (ProxyApp resolve_model)"}
    assert capture.connections == 0


@pytest.mark.parametrize(("allowed", "error", "text"), [
    ("https://x.example/v1", TypeError, "ProxyApp(allowed_base_urls=...) takes a mapping of "
     "provider to base URL(s), e.g. {'openai': 'https://gateway.example/v1'}; got str."),
    ({"": "https://x.example"}, ValueError, "ProxyApp(allowed_base_urls=...): every key must be "
     "a provider name (a non-empty str without spaces), got ''."),
    ({1: "https://x.example"}, TypeError, "ProxyApp(allowed_base_urls=...): every key must be a "
     "provider name (a non-empty str without spaces), got 1."),
    ({"openai": []}, ValueError, "ProxyApp(allowed_base_urls=...)['openai'] is empty; give at "
     "least one base URL or leave it out."),
    ({"openai": 42}, TypeError, "ProxyApp(allowed_base_urls=...)['openai'] must be a base URL "
     "(str) or a list of them, got int."),
    ({"openai": [None]}, TypeError, "ProxyApp(allowed_base_urls=...)['openai'] must hold base "
     "URLs (str), got NoneType: None."),
    ({"openai": "api.openai.com/v1"}, ValueError, "ProxyApp(allowed_base_urls=...)['openai']: "
     "'api.openai.com/v1' is not an http:// or https:// URL with a host (no spaces, "
     "backslashes or non-ASCII characters)."),
    ({"vllm": ["http://ok.example", "ftp://h/v1"]}, ValueError, "ProxyApp(allowed_base_urls="
     "...)['vllm']: 'ftp://h/v1' is not an http:// or https:// URL with a host"),
    ({" vllm": "http://h/v1"}, ValueError, "(a non-empty str without spaces), got ' vllm'."),
    ({"vllm": "http://h st/v1"}, ValueError, "'http://h st/v1' is not an http:// or https://"),
    ({"vllm": "http://h:99999/v1"}, ValueError, "'http://h:99999/v1' is not an http://"),
])
def test_allowed_base_urls_is_checked_when_the_app_is_built(allowed, error, text):
    with pytest.raises(error) as raised:
        ProxyApp(auth_tokens=TOKEN, allowed_base_urls=allowed)
    assert text in str(raised.value)


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child process")
def test_piagent_proxy_refuses_by_default_and_serves_allow_base_url(capture):
    env = dict(os.environ, OPENAI_API_KEY=KEY, GROQ_API_KEY=GROQ_KEY)
    proc = subprocess.Popen([sys.executable, "-m", "piagent", "proxy", "--port", "0",
                             "--token", TOKEN, "--allow-base-url", f"openai={capture.url}"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL, env=env)
    try:
        line = read_child_line(proc)
        assert line.startswith("piagent proxy on http://127.0.0.1:"), line
        url = line.split()[3].removesuffix("/api/stream")
        for model in (Model(id="m", api="openai-completions", provider="groq",
                            base_url=capture.url),
                      Model(id="m", api="openai-completions", provider="vllm",
                            base_url=capture.url)):
            answer = _post(url, model)
            assert answer.status_code == 403
            assert answer.json() == {"error": _refusal(model.provider, capture.url)}
        assert capture.connections == 0
        answer = _post(url, get_model("openai", "gpt-4o-mini", base_url=capture.url))
        assert answer.status_code == 200
        events = [json.loads(line[6:]) for line in answer.text.splitlines()
                  if line.startswith("data: ")]
        assert events[-1]["type"] == "error"
        assert capture.connections == 1
        assert f"Authorization: Bearer {KEY}".encode() in capture.requests[0]
        assert GROQ_KEY.encode() not in capture.requests[0]
    finally:
        proc.terminate()
        proc.wait(WAIT)
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()
        proc.stderr.close()
