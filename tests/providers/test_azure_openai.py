"""The ``azure-openai-responses`` adapter against a local server: where the request goes
(deployment URLs, ``api-version``), how it is authorised (``api-key``, or an Entra ID bearer
token from a callable), the errors that name what is missing, retries, abort and usage.
The request bodies and events against pi-ai's own adapter: tests/reference/test_wire_azure.py.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import pytest
from freezegun import freeze_time

from piagent import AbortController
from piagent.messages import UserMessage
from piagent.models import Model, ModelCost
from piagent.providers import get_model, stream_simple
from piagent.providers.azure_openai import (
    azure_openai_responses,
    entra_id_token_provider,
    resolve_base_url,
    stream_azure_openai_responses,
)
from piagent.stream import Context, StreamOptions
from tests.conftest import WAIT

from .sse_script import Reply, ScriptedServer, Stall, sse

API = "azure-openai-responses"
KEY = "azure-SECRET-key-0123456789"


def _events(text: str = "hi", usage: tuple[int, int, int] = (10, 2, 0)) -> list[bytes]:
    item = {"type": "message", "id": "msg_1", "role": "assistant", "content": []}
    done = {**item, "content": [{"type": "output_text", "text": text}]}
    return [sse(e, event=e["type"]) for e in (
        {"type": "response.output_item.added", "output_index": 0, "item": item},
        {"type": "response.output_text.delta", "output_index": 0, "delta": text},
        {"type": "response.output_item.done", "output_index": 0, "item": done},
        {"type": "response.completed", "response": {"status": "completed", "usage": {
            "input_tokens": usage[0], "output_tokens": usage[1],
            "input_tokens_details": {"cached_tokens": usage[2]}}}})]


def _model(server: ScriptedServer | None, **fields: Any) -> Model:
    fields.setdefault("cost", ModelCost(2.0, 8.0, 0.5, 0.0))
    fields.setdefault("base_url", server.url + "/openai/v1" if server else "")
    return Model(id="gpt-4.1", api=API, provider="azure", **fields)


def _context() -> Context:
    return Context([UserMessage(content="Hello")])


def test_key_in_api_key_header_deployment_url_and_version(sse_server: ScriptedServer) -> None:
    sse_server.add(Reply(body=_events()))
    message = stream_simple(_model(sse_server), _context(), StreamOptions(api_key=KEY)).result(
        WAIT)
    assert (message.stop_reason, message.text, message.api) == ("stop", "hi", API)
    request = sse_server.requests[0]
    assert request.path == "/openai/v1/responses?api-version=v1"
    assert request.headers["api-key"] == KEY
    assert "Authorization" not in request.headers
    assert request.json["model"] == "gpt-4.1"


def test_settings_from_env_deployment_map_and_api_version(sse_server: ScriptedServer) -> None:
    sse_server.add(Reply(body=_events()))
    env = {"AZURE_OPENAI_API_KEY": KEY, "AZURE_OPENAI_BASE_URL": sse_server.url + "/openai/v1/",
           "AZURE_OPENAI_API_VERSION": "2025-04-01-preview",
           "AZURE_OPENAI_DEPLOYMENT_NAME_MAP": "gpt-4o=x, gpt-4.1 = prod-gpt41"}
    stream_simple(_model(None), _context(), StreamOptions(env=env)).result(WAIT)
    request = sse_server.requests[0]
    assert request.path == "/openai/v1/responses?api-version=2025-04-01-preview"
    assert (request.json["model"], request.headers["api-key"]) == ("prod-gpt41", KEY)


def test_entra_id_token_from_a_callable_each_request(sse_server: ScriptedServer) -> None:
    tokens = iter(["token-SECRET-1", "token-SECRET-2"])
    stream_fn = azure_openai_responses(token_provider=lambda: next(tokens),
                                       deployment_name="my-deploy", api_version="2024-10-21")
    sse_server.add(Reply(body=_events()), Reply(status=401, content_type="application/json",
                                                body=[b'{"error":{"message":"bad token-SECRET-2"'
                                                      b',"code":"401"}}']))
    first = stream_fn(_model(sse_server), _context(), StreamOptions()).result(WAIT)
    second = stream_fn(_model(sse_server), _context(), StreamOptions()).result(WAIT)
    assert first.stop_reason == "stop"
    headers = [r.headers for r in sse_server.requests]
    assert [h["Authorization"] for h in headers] == ["Bearer token-SECRET-1",
                                                     "Bearer token-SECRET-2"]
    assert all("api-key" not in h for h in headers)
    assert sse_server.requests[0].path == "/openai/v1/responses?api-version=2024-10-21"
    assert sse_server.requests[0].json["model"] == "my-deploy"
    assert second.stop_reason == "error" and "token-SECRET-2" not in second.error_message
    assert len(sse_server.requests) == 2  # a 401 is not retried


def test_token_provider_that_returns_no_token_fails_the_stream() -> None:
    stream_fn = azure_openai_responses(token_provider=lambda: "",
                                       base_url="https://r.openai.azure.com")
    message = stream_fn(_model(None), _context(), StreamOptions()).result(WAIT)
    assert message.stop_reason == "error"
    assert message.error_message.startswith("The Azure OpenAI token_provider returned str ''")


def test_missing_key_names_the_variable_and_the_token_alternative(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AZURE_OPENAI_API_KEY", raising=False)
    message = stream_simple(_model(None, base_url="https://r.openai.azure.com"), _context(),
                            StreamOptions()).result(WAIT)
    assert message.error_message == (
        "No API key for provider: azure. Pass StreamOptions(api_key=...), set "
        "AZURE_OPENAI_API_KEY (looked for in StreamOptions.env and the environment), or make "
        "the stream function with azure_openai_responses(token_provider=...) for a Microsoft "
        "Entra ID token.")


def test_missing_base_url_names_where_it_was_looked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AZURE_OPENAI_BASE_URL", "AZURE_OPENAI_RESOURCE_NAME"):
        monkeypatch.delenv(name, raising=False)
    model = get_model("azure", "gpt-4.1")  # the catalogue has no base URL for Azure
    assert (model.api, model.base_url) == (API, "")
    message = stream_simple(model, _context(), StreamOptions(api_key=KEY)).result(WAIT)
    assert message.stop_reason == "error"
    assert message.error_message.startswith(
        "Azure OpenAI base URL is required. Set AZURE_OPENAI_BASE_URL or "
        "AZURE_OPENAI_RESOURCE_NAME (looked for in StreamOptions.env and the environment)")


@pytest.mark.parametrize(("given", "expected"), [
    ("https://res.openai.azure.com", "https://res.openai.azure.com/openai/v1"),
    ("https://res.openai.azure.com/openai/", "https://res.openai.azure.com/openai/v1"),
    ("https://res.cognitiveservices.azure.com/openai/v1/responses?x=1",
     "https://res.cognitiveservices.azure.com/openai/v1"),
    ("https://proj.services.ai.azure.com/api/projects/p/openai/v1",
     "https://proj.services.ai.azure.com/api/projects/p/openai/v1"),
    ("http://127.0.0.1:8080/custom/", "http://127.0.0.1:8080/custom"),
])
def test_base_url_normalised_as_pi(given: str, expected: str) -> None:
    assert resolve_base_url(_model(None), given) == expected


def test_resource_name_builds_the_url() -> None:
    assert resolve_base_url(_model(None), None, None, {"AZURE_OPENAI_RESOURCE_NAME": "acme"}) \
        == "https://acme.openai.azure.com/openai/v1"


@pytest.mark.parametrize(("kwargs", "error", "text"), [
    ({"api_version": ""}, ValueError, "api_version must be a non-empty string or None"),
    ({"base_url": 3}, ValueError, "base_url must be a non-empty string or None"),
    ({"token_provider": "tok"}, TypeError, "token_provider must be a callable"),
])
def test_wrong_settings_fail_at_the_call(kwargs: dict[str, Any], error: type[Exception],
                                         text: str) -> None:
    with pytest.raises(error, match=text):
        azure_openai_responses(**kwargs)


def test_429_is_retried_then_succeeds(sse_server: ScriptedServer) -> None:
    sse_server.add(Reply(status=429, headers={"retry-after-ms": "1"},
                         content_type="application/json",
                         body=[b'{"error":{"message":"Rate limit","code":"429"}}']),
                   Reply(body=_events("ok")))
    message = stream_azure_openai_responses(_model(sse_server), _context(),
                                            StreamOptions(api_key=KEY)).result(WAIT)
    assert message.text == "ok"
    assert len(sse_server.requests) == 2


def test_usage_and_cost_with_cached_tokens(sse_server: ScriptedServer) -> None:
    sse_server.add(Reply(body=_events(usage=(1000, 100, 600))))
    message = stream_simple(_model(sse_server), _context(), StreamOptions(api_key=KEY)).result(
        WAIT)
    usage = message.usage
    assert (usage.input, usage.output, usage.cache_read) == (400, 100, 600)
    assert usage.cost.total == pytest.approx((400 * 2.0 + 100 * 8.0 + 600 * 0.5) / 1e6)


def test_abort_mid_stream_ends_within_50_ms(sse_server: ScriptedServer,
                                            no_piagent_threads: Any) -> None:
    """Measured five times: the median from ``abort()`` to the last event is under 50 ms."""
    elapsed = []
    for _ in range(5):
        stall = Stall()
        events = _events("partial")
        sse_server.add(Reply(body=[*events[:2], stall, *events[2:]]))
        controller = AbortController()
        stream = stream_simple(_model(sse_server), _context(),
                               StreamOptions(api_key=KEY, signal=controller.signal))
        it = iter(stream)
        assert [next(it).type for _ in range(3)] == ["start", "text_start", "text_delta"]
        assert stall.reached.wait(WAIT)
        started = time.monotonic()
        controller.abort()
        rest = [e.type for e in it]
        elapsed.append(time.monotonic() - started)
        message = stream.result(WAIT)
        assert rest == ["error"]
        assert (message.stop_reason, message.text) == ("aborted", "partial")
    assert statistics.median(elapsed) < 0.05, elapsed


# --- Entra ID tokens from a credential ----------------------------------------------------------


class _Token:
    """azure-identity's ``AccessToken``: the token and its expiry in epoch seconds."""

    def __init__(self, token: str, expires_on: float) -> None:
        self.token, self.expires_on = token, expires_on


class _Credential:
    """A stand-in for an azure-identity credential: each ``get_token`` issues a new token
    valid for an hour from the (frozen) clock."""

    def __init__(self) -> None:
        self.scopes: list[str] = []

    def get_token(self, scope: str) -> _Token:
        self.scopes.append(scope)
        return _Token(f"entra-SECRET-{len(self.scopes)}", time.time() + 3600)


def test_entra_id_tokens_are_kept_until_five_minutes_before_expiry() -> None:
    credential = _Credential()
    with freeze_time("2026-01-01 12:00:00") as clock:
        provider = entra_id_token_provider(credential)
        assert provider() == provider() == "entra-SECRET-1"
        clock.tick(3600 - 301)  # 5 min 1 s before expiry: still good
        assert provider() == "entra-SECRET-1"
        clock.tick(2)  # inside the last five minutes: fetched again
        assert provider() == "entra-SECRET-2"
        clock.tick(60)
        assert provider() == "entra-SECRET-2"
    assert credential.scopes == ["https://cognitiveservices.azure.com/.default"] * 2


def test_entra_id_token_refresh_before_and_scope(sse_server: ScriptedServer) -> None:
    credential = _Credential()
    provider = entra_id_token_provider(credential, scope="api://my-app/.default",
                                       refresh_before_s=0)
    stream_fn = azure_openai_responses(token_provider=provider)
    with freeze_time("2026-01-01 12:00:00") as clock:
        sse_server.add(Reply(body=_events()), Reply(body=_events()), Reply(body=_events()))
        for _ in range(2):
            stream_fn(_model(sse_server), _context(), StreamOptions()).result(WAIT)
        clock.tick(3600)  # expired exactly: a new token
        stream_fn(_model(sse_server), _context(), StreamOptions()).result(WAIT)
    assert [r.headers["Authorization"] for r in sse_server.requests] == [
        "Bearer entra-SECRET-1", "Bearer entra-SECRET-1", "Bearer entra-SECRET-2"]
    assert credential.scopes == ["api://my-app/.default"] * 2


def test_a_credential_that_fails_fails_the_stream_with_its_words() -> None:
    class Failing:
        def get_token(self, scope: str) -> _Token:
            raise RuntimeError("DefaultAzureCredential failed to retrieve a token")

    stream_fn = azure_openai_responses(token_provider=entra_id_token_provider(Failing()),
                                       base_url="https://r.openai.azure.com")
    message = stream_fn(_model(None), _context(), StreamOptions()).result(WAIT)
    assert (message.stop_reason, message.error_message) == (
        "error", "The Azure OpenAI token_provider raised RuntimeError: "
                 "DefaultAzureCredential failed to retrieve a token")


def test_default_credential_without_the_extra_names_it() -> None:
    try:
        import azure.identity  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("azure-identity is installed here")
    with pytest.raises(ImportError, match=r"pip install 'piagent\[azure\]'"):
        entra_id_token_provider()


@pytest.mark.parametrize(("kwargs", "error", "text"), [
    ({"credential": object()}, TypeError, "credential must have get_token"),
    ({"credential": _Credential(), "scope": ""}, ValueError, "scope must be a non-empty"),
    ({"credential": _Credential(), "refresh_before_s": -1}, ValueError,
     "refresh_before_s must be a number of seconds >= 0"),
])
def test_wrong_token_provider_settings_fail_at_the_call(
        kwargs: dict[str, Any], error: type[Exception], text: str) -> None:
    with pytest.raises(error, match=text):
        entra_id_token_provider(**kwargs)
