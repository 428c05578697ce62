"""The Vertex AI adapter (``google-vertex``): credentials, URLs, the OAuth token and its
refresh under a frozen clock, abort, retries, timeouts and usage. The wire mapping itself is
the Gemini adapter's (``test_google.py``) and is compared with pi-ai 1.6.1's in
``tests/reference/test_wire_vertex.py``."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from piagent import AbortController, Context, Model, ModelCost, UserMessage
from piagent.providers import stream_simple
from piagent.providers._vertex_auth import VertexTarget, forget_credentials
from piagent.providers.vertex import stream_vertex, vertex_url
from piagent.stream import StreamOptions
from tests.conftest import WAIT

from .sse_script import Reply, ScriptedServer, Stall, sse

freezegun = pytest.importorskip("freezegun")
pytest.importorskip("google.auth")

TEXT = [sse({"candidates": [{"content": {"role": "model", "parts": [{"text": "Hi"}]},
                             "finishReason": "STOP"}],
             "usageMetadata": {"promptTokenCount": 1000, "candidatesTokenCount": 100,
                               "thoughtsTokenCount": 20, "cachedContentTokenCount": 200,
                               "totalTokenCount": 1120}})]
ENV_VARS = ("GOOGLE_CLOUD_API_KEY", "GOOGLE_CLOUD_PROJECT", "GCLOUD_PROJECT",
            "GOOGLE_CLOUD_LOCATION", "GOOGLE_APPLICATION_CREDENTIALS")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    forget_credentials()
    yield
    forget_credentials()


def _model(base_url: str = "https://{location}-aiplatform.googleapis.com",
           model_id: str = "gemini-2.5-flash") -> Model:
    return Model(id=model_id, name=model_id, api="google-vertex", provider="google-vertex",
                 base_url=base_url, reasoning=True, input=["text", "image"],
                 cost=ModelCost(input=0.3, output=2.5, cache_read=0.03, cache_write=0),
                 context_window=1048576, max_tokens=65536)


def _context() -> Context:
    return Context([UserMessage(content="Hello")])


def _service_account(tmp_path: Path, token_uri: str) -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    path = tmp_path / "sa.json"
    path.write_text(json.dumps({
        "type": "service_account", "project_id": "proj-1", "private_key_id": "k1",
        "private_key": pem, "client_email": "sa@proj-1.iam.gserviceaccount.com",
        "client_id": "1", "token_uri": token_uri}))
    return str(path)


def _token(value: str, expires_in: int = 3600) -> Reply:
    body = json.dumps({"access_token": value, "expires_in": expires_in,
                       "token_type": "Bearer"}).encode()
    return Reply(content_type="application/json", chunked=False, body=[body])


# --- URLs ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("base", "target", "url"), [
    ("https://{location}-aiplatform.googleapis.com", VertexTarget("k"),
     "https://aiplatform.googleapis.com/v1/publishers/google/models/m:streamGenerateContent"
     "?alt=sse"),
    ("https://{location}-aiplatform.googleapis.com", VertexTarget(None, "p", "us-central1"),
     "https://us-central1-aiplatform.googleapis.com/v1/projects/p/locations/us-central1/"
     "publishers/google/models/m:streamGenerateContent?alt=sse"),
    ("https://{location}-aiplatform.googleapis.com", VertexTarget(None, "p", "global"),
     "https://aiplatform.googleapis.com/v1/projects/p/locations/global/"
     "publishers/google/models/m:streamGenerateContent?alt=sse"),
    ("https://{location}-aiplatform.googleapis.com", VertexTarget(None, "p", "eu"),
     "https://aiplatform.eu.rep.googleapis.com/v1/projects/p/locations/eu/"
     "publishers/google/models/m:streamGenerateContent?alt=sse"),
    ("http://127.0.0.1:9/gw/", VertexTarget(None, "p", "us-central1"),
     "http://127.0.0.1:9/gw/v1/publishers/google/models/m:streamGenerateContent?alt=sse"),
    ("http://127.0.0.1:9/gw/v1beta1", VertexTarget("k"),
     "http://127.0.0.1:9/gw/v1beta1/publishers/google/models/m:streamGenerateContent?alt=sse"),
])
def test_urls_as_pi_builds_them(base: str, target: VertexTarget, url: str) -> None:
    assert vertex_url(_model(base, "m"), target) == url


# --- credentials -----------------------------------------------------------------------------


def test_no_key_and_no_project_names_what_to_set() -> None:
    message = stream_vertex(_model(), _context(), StreamOptions()).result(WAIT)
    assert message.stop_reason == "error"
    for name in ("GOOGLE_CLOUD_API_KEY", "GOOGLE_CLOUD_PROJECT", "GOOGLE_CLOUD_LOCATION",
                 "StreamOptions.env"):
        assert name in message.error_message


def test_no_location_is_named() -> None:
    options = StreamOptions(env={"GOOGLE_CLOUD_PROJECT": "p"})
    message = stream_vertex(_model(), _context(), options).result(WAIT)
    assert message.error_message.startswith("Vertex AI requires a location. Set "
                                            "GOOGLE_CLOUD_LOCATION")


def test_credentials_file_that_is_missing_is_named(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.json")
    options = StreamOptions(env={"GOOGLE_CLOUD_PROJECT": "p", "GOOGLE_CLOUD_LOCATION": "l",
                                 "GOOGLE_APPLICATION_CREDENTIALS": missing})
    message = stream_vertex(_model(), _context(), options).result(WAIT)
    assert message.stop_reason == "error"
    assert f"GOOGLE_APPLICATION_CREDENTIALS ({missing})" in message.error_message


def test_missing_extra_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "google.auth.transport.requests", None)
    options = StreamOptions(env={"GOOGLE_CLOUD_PROJECT": "p", "GOOGLE_CLOUD_LOCATION": "l"})
    message = stream_vertex(_model(), _context(), options).result(WAIT)
    assert "pip install 'piagent[vertex]'" in message.error_message


@pytest.mark.parametrize("given", ["gcp-vertex-credentials", "<authenticated>"])
def test_marker_keys_mean_adc(given: str) -> None:
    options = StreamOptions(api_key=given, env={"GOOGLE_CLOUD_PROJECT": "p"})
    message = stream_vertex(_model(), _context(), options).result(WAIT)
    assert "requires a location" in message.error_message


def test_key_from_environment_in_header_never_in_errors(
        sse_server: ScriptedServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOOGLE_CLOUD_API_KEY", "vx-SECRET-1")
    body = b'{"error":{"code":403,"message":"bad key vx-SECRET-1","status":"PERMISSION_DENIED"}}'
    sse_server.add(Reply(status=403, content_type="application/json", body=[body]))
    message = stream_simple(_model(sse_server.url), _context(), StreamOptions()).result(WAIT)
    assert sse_server.requests[0].headers["x-goog-api-key"] == "vx-SECRET-1"
    assert sse_server.requests[0].path == (
        "/v1/publishers/google/models/gemini-2.5-flash:streamGenerateContent?alt=sse")
    assert "vx-SECRET-1" not in message.error_message
    assert message.error_message.startswith("Google Vertex API error (403")


# --- the OAuth token -------------------------------------------------------------------------


def test_service_account_token_is_sent_and_refreshed(sse_server: ScriptedServer,
                                                     tmp_path: Path) -> None:
    path = _service_account(tmp_path, sse_server.url + "/token")
    options = StreamOptions(env={"GOOGLE_CLOUD_PROJECT": "proj-1",
                                 "GOOGLE_CLOUD_LOCATION": "us-central1",
                                 "GOOGLE_APPLICATION_CREDENTIALS": path})
    model = _model(sse_server.url)
    with freezegun.freeze_time("2026-01-01 12:00:00") as clock:
        sse_server.add(_token("tok-SECRET-1"), Reply(body=TEXT))
        assert stream_vertex(model, _context(), options).result(WAIT).text == "Hi"
        clock.tick(1800)  # within the hour: the same token, no token request
        sse_server.add(Reply(body=TEXT))
        assert stream_vertex(model, _context(), options).result(WAIT).text == "Hi"
        clock.tick(1799)  # inside google-auth's refresh margin before the expiry: refreshed
        sse_server.add(_token("tok-SECRET-2"), Reply(body=TEXT))
        assert stream_vertex(model, _context(), options).result(WAIT).text == "Hi"
    stream_path = "/v1/publishers/google/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    assert [r.path for r in sse_server.requests] == [
        "/token", stream_path, stream_path, "/token", stream_path]
    assert [r.headers.get("Authorization") for r in sse_server.requests] == [
        None, "Bearer tok-SECRET-1", "Bearer tok-SECRET-1", None, "Bearer tok-SECRET-2"]
    grant = dict(p.split("=", 1) for p in sse_server.requests[0].body.decode().split("&"))
    assert grant["grant_type"] == "urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer"


def test_default_chain_reads_the_environment(sse_server: ScriptedServer, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS",
                       _service_account(tmp_path, sse_server.url + "/token"))
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "proj-1")
    monkeypatch.setenv("GOOGLE_CLOUD_LOCATION", "global")
    sse_server.add(_token("tok-env"), Reply(body=TEXT))
    message = stream_simple(_model(sse_server.url), _context(), StreamOptions()).result(WAIT)
    assert message.text == "Hi"
    assert sse_server.requests[1].headers["Authorization"] == "Bearer tok-env"


def test_token_endpoint_failure_is_named_and_redacted(sse_server: ScriptedServer,
                                                      tmp_path: Path) -> None:
    path = _service_account(tmp_path, sse_server.url + "/token")
    sse_server.add(Reply(status=400, content_type="application/json", chunked=False,
                         body=[b'{"error":"invalid_grant","error_description":"bad jwt"}']))
    options = StreamOptions(env={"GOOGLE_CLOUD_PROJECT": "p", "GOOGLE_CLOUD_LOCATION": "l",
                                 "GOOGLE_APPLICATION_CREDENTIALS": path})
    message = stream_vertex(_model(sse_server.url), _context(), options).result(WAIT)
    assert message.stop_reason == "error"
    assert message.error_message.startswith(
        f"Vertex AI could not get an access token from GOOGLE_APPLICATION_CREDENTIALS ({path})")
    assert "invalid_grant" in message.error_message


def test_token_is_redacted_from_errors(sse_server: ScriptedServer, tmp_path: Path) -> None:
    path = _service_account(tmp_path, sse_server.url + "/token")
    body = b'{"error":{"code":401,"message":"token tok-SECRET-9 expired","status":"X"}}'
    sse_server.add(_token("tok-SECRET-9"),
                   Reply(status=401, content_type="application/json", body=[body]))
    options = StreamOptions(env={"GOOGLE_CLOUD_PROJECT": "p", "GOOGLE_CLOUD_LOCATION": "l",
                                 "GOOGLE_APPLICATION_CREDENTIALS": path})
    message = stream_vertex(_model(sse_server.url), _context(), options).result(WAIT)
    assert "tok-SECRET-9" not in message.error_message


# --- transport: abort, retries, timeouts, usage ---------------------------------------------


def _keyed(server: ScriptedServer, **options: Any) -> Any:
    return stream_vertex(_model(server.url), _context(),
                         StreamOptions(api_key="vx-k", **options))


def test_abort_within_50_ms(sse_server: ScriptedServer, no_piagent_threads: Any) -> None:
    stall = Stall()
    first = sse({"candidates": [{"content": {"role": "model", "parts": [{"text": "It"}]}}]})
    sse_server.add(Reply(body=[first, stall]))
    controller = AbortController()
    stream = _keyed(sse_server, signal=controller.signal)
    events = iter(stream)
    assert [next(events).type for _ in range(3)] == ["start", "text_start", "text_delta"]
    assert stall.reached.wait(WAIT)
    started = time.perf_counter()
    controller.abort()
    message = stream.result(WAIT)
    assert (time.perf_counter() - started) < 0.05
    assert message.stop_reason == "aborted"
    assert message.text == "It"


def test_retry_after_503(sse_server: ScriptedServer) -> None:
    body = b'{"error":{"code":503,"message":"overloaded","status":"UNAVAILABLE"}}'
    sse_server.add(Reply(status=503, headers={"retry-after": "0"},
                         content_type="application/json", body=[body]), Reply(body=TEXT))
    assert _keyed(sse_server).result(WAIT).text == "Hi"
    assert len(sse_server.requests) == 2


def test_timeout_of_a_stalled_stream(sse_server: ScriptedServer) -> None:
    sse_server.add(Reply(body=[Stall()]))
    message = _keyed(sse_server, timeout_ms=100).result(WAIT)
    assert message.stop_reason == "error"
    assert "Google Vertex" in message.error_message


def test_usage_and_cost(sse_server: ScriptedServer) -> None:
    sse_server.add(Reply(body=TEXT))
    message = _keyed(sse_server).result(WAIT)
    assert (message.usage.input, message.usage.output, message.usage.cache_read,
            message.usage.total_tokens) == (800, 120, 200, 1120)
    assert message.usage.cost.total == pytest.approx((800 * 0.3 + 120 * 2.5 + 200 * 0.03) / 1e6)
    assert message.api == "google-vertex" and message.provider == "google-vertex"
