"""The Amazon Bedrock adapter (``bedrock-converse-stream``): SigV4 against AWS's test vectors
and an independent verifier, credentials from the usual chain (with a container role
refreshed under a frozen clock), region and endpoint, the event stream (a broken frame),
abort, retries, timeouts, usage and cost. The wire mapping is compared with pi-ai 1.6.1's in
``tests/reference/test_wire_bedrock.py``."""

from __future__ import annotations

import hashlib
import hmac
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from piagent import AbortController, Context, Model, ModelCost, UserMessage
from piagent.providers import stream_simple
from piagent.providers._bedrock_auth import bedrock_target, forget_sessions, sigv4_headers
from piagent.stream import StreamOptions
from tests.conftest import WAIT
from tests.reference.wire_bedrock_conversations import event, stop, text

from .sse_script import Reply, ScriptedServer, Stall

freezegun = pytest.importorskip("freezegun")
botocore_credentials = pytest.importorskip("botocore.credentials")

KEY_ID, SECRET = "AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
STREAM = "application/vnd.amazon.eventstream"
MODEL_ID = "anthropic.claude-sonnet-4-5-20250929-v1:0"
ANSWER = [event("messageStart", role="assistant"), *text(0, "Hi"),
          *stop("end_turn", 1000, 100, cacheReadInputTokens=200)]
_AWS = ("AWS_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
        "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_BEARER_TOKEN_BEDROCK", "AWS_BEDROCK_SKIP_AUTH",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_AUTHORIZATION_TOKEN", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN")


@pytest.fixture(autouse=True)
def _no_ambient_aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    for name in _AWS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    forget_sessions()
    yield
    forget_sessions()


def _model(base_url: str) -> Model:
    return Model(id=MODEL_ID, name="Claude Sonnet 4.5", api="bedrock-converse-stream",
                 provider="amazon-bedrock", base_url=base_url, reasoning=True,
                 input=["text", "image"], context_window=200000, max_tokens=64000,
                 cost=ModelCost(input=3.3, output=16.5, cache_read=0.33, cache_write=4.125))


def _keys(**more: str) -> dict[str, str]:
    return {"AWS_ACCESS_KEY_ID": KEY_ID, "AWS_SECRET_ACCESS_KEY": SECRET, **more}


def _stream(server: ScriptedServer, **options: Any) -> Any:
    options.setdefault("env", _keys())
    return stream_simple(_model(server.url), Context([UserMessage("Hello")]),
                         StreamOptions(**options))


def _answer(*chunks: bytes) -> Reply:
    return Reply(content_type=STREAM, body=list(chunks or ANSWER))


# --- SigV4 -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("method", "signature"), [
    ("GET", "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"),
    ("POST", "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b"),
])
def test_sigv4_matches_the_aws_test_suite(method: str, signature: str) -> None:
    """AWS's Signature Version 4 test suite, ``get-vanilla`` and ``post-vanilla``."""
    credentials = botocore_credentials.Credentials(KEY_ID, SECRET)
    with freezegun.freeze_time("2015-08-30 12:36:00"):
        headers = sigv4_headers(method, "https://example.amazonaws.com/", {}, b"",
                                credentials, "us-east-1", "service")
    assert headers["X-Amz-Date"] == "20150830T123600Z"
    assert headers["Authorization"] == (
        "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
        f"SignedHeaders=host;x-amz-date, Signature={signature}")


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def _verify(recorded: Any, secret: str, region: str) -> None:
    """An independent SigV4 check of one recorded request (the service's own rules:
    the canonical URI encoded twice, the signed headers as named)."""
    headers = {k.lower(): v for k, v in recorded.headers.items()}
    auth = headers["authorization"]
    scheme, _, rest = auth.partition(" ")
    fields = dict(part.strip().split("=", 1) for part in rest.split(","))
    assert scheme == "AWS4-HMAC-SHA256"
    names = fields["SignedHeaders"].split(";")
    path = recorded.path
    canonical_uri = "/".join(quote(segment, safe="-_.~") for segment in path.split("/"))
    canonical = "\n".join([
        "POST", canonical_uri, "",
        *(f"{n}:{headers[n].strip()}" for n in names), "", fields["SignedHeaders"],
        hashlib.sha256(recorded.body).hexdigest()])
    date = headers["x-amz-date"]
    scope = f"{date[:8]}/{region}/bedrock/aws4_request"
    assert fields["Credential"] == f"{KEY_ID}/{scope}"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", date, scope,
                         hashlib.sha256(canonical.encode()).hexdigest()])
    key = _hmac(("AWS4" + secret).encode(), date[:8])
    for part in (region, "bedrock", "aws4_request"):
        key = _hmac(key, part)
    assert fields["Signature"] == hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()


def test_request_is_signed_and_verifies(sse_server: ScriptedServer) -> None:
    sse_server.add(_answer())
    with freezegun.freeze_time("2026-01-02 03:04:05"):
        message = _stream(sse_server).result(WAIT)
    assert message.text == "Hi"
    recorded = sse_server.requests[0]
    assert recorded.path == f"/model/{quote(MODEL_ID, safe='')}/converse-stream"
    assert recorded.headers["X-Amz-Date"] == "20260102T030405Z"
    assert recorded.headers["X-Amz-Content-SHA256"] == hashlib.sha256(recorded.body).hexdigest()
    assert "SignedHeaders=content-length;content-type;host;x-amz-content-sha256;x-amz-date," \
        in recorded.headers["Authorization"]
    _verify(recorded, SECRET, "us-east-1")


def test_session_token_is_sent_signed_and_redacted(sse_server: ScriptedServer) -> None:
    body = json.dumps({"message": "token SESSION-SECRET-1 expired"}).encode()
    sse_server.add(Reply(status=403, content_type="application/json", body=[body]))
    message = _stream(sse_server, env=_keys(AWS_SESSION_TOKEN="SESSION-SECRET-1",
                                            AWS_REGION="eu-west-3")).result(WAIT)
    recorded = sse_server.requests[0]
    assert recorded.headers["X-Amz-Security-Token"] == "SESSION-SECRET-1"
    assert "x-amz-security-token" in recorded.headers["Authorization"]
    _verify(recorded, SECRET, "eu-west-3")
    assert "SESSION-SECRET-1" not in message.error_message
    assert message.error_message.startswith("Bedrock API error (403)")


def test_bearer_key_is_sent_unsigned(sse_server: ScriptedServer,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_BEARER_TOKEN_BEDROCK", "bedrock-key-1")
    sse_server.add(_answer())
    assert _stream(sse_server, env={}).result(WAIT).text == "Hi"
    assert sse_server.requests[0].headers["Authorization"] == "Bearer bedrock-key-1"
    assert "X-Amz-Date" not in sse_server.requests[0].headers


# --- credentials, region, endpoint -----------------------------------------------------------


def test_profile_from_the_shared_credentials_file(sse_server: ScriptedServer, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    shared = tmp_path / "credentials"
    shared.write_text(f"[work]\naws_access_key_id = {KEY_ID}\n"
                      "aws_secret_access_key = profile-SECRET\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(shared))
    sse_server.add(_answer())
    # a profile in StreamOptions.env wins over keys in the environment (pi-ai #6957)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDOTHER")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "other")
    assert _stream(sse_server, env={"AWS_PROFILE": "work"}).result(WAIT).text == "Hi"
    _verify(sse_server.requests[0], "profile-SECRET", "us-east-1")


def test_no_credentials_names_where_it_looked(sse_server: ScriptedServer) -> None:
    message = _stream(sse_server, env={}).result(WAIT)
    assert message.stop_reason == "error"
    for name in ("AWS_BEARER_TOKEN_BEDROCK", "AWS_PROFILE", "AWS_ACCESS_KEY_ID",
                 "StreamOptions.env", "~/.aws/credentials"):
        assert name in message.error_message
    assert sse_server.requests == []


def test_missing_extra_is_named(sse_server: ScriptedServer,
                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "botocore.session", None)
    message = _stream(sse_server).result(WAIT)
    assert "pip install 'piagent[bedrock]'" in message.error_message


def test_container_role_refreshed_under_a_frozen_clock(sse_server: ScriptedServer,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    def role(key: str, expires: str) -> Reply:
        data = {"AccessKeyId": key, "SecretAccessKey": SECRET, "Token": f"tok-{key}",
                "Expiration": expires}
        return Reply(content_type="application/json", chunked=False,
                     body=[json.dumps(data).encode()])

    monkeypatch.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", sse_server.url + "/role")
    with freezegun.freeze_time("2026-03-01 10:00:00") as clock:
        sse_server.add(role("ASIAONE", "2026-03-01T11:00:00Z"), _answer())
        first = _stream(sse_server, env={}).result(WAIT)
        assert first.text == "Hi", first.error_message
        clock.tick(30 * 60)  # 30 min before expiry: the same keys
        sse_server.add(_answer())
        assert _stream(sse_server, env={}).result(WAIT).text == "Hi"
        clock.tick(25 * 60)  # 5 min before expiry: botocore must refresh
        sse_server.add(role("ASIATWO", "2026-03-01T12:00:00Z"), _answer())
        assert _stream(sse_server, env={}).result(WAIT).text == "Hi"
    sent = [r for r in sse_server.requests if r.path != "/role"]
    tokens = [r.headers["X-Amz-Security-Token"] for r in sent]
    assert [r.path for r in sse_server.requests].count("/role") == 2
    assert tokens == ["tok-ASIAONE", "tok-ASIAONE", "tok-ASIATWO"]


@pytest.mark.parametrize(("model_id", "base", "env", "endpoint", "region"), [
    ("m", "https://bedrock-runtime.us-east-1.amazonaws.com", {"AWS_REGION": "eu-west-1"},
     "https://bedrock-runtime.eu-west-1.amazonaws.com", "eu-west-1"),
    ("m", "https://bedrock-runtime.eu-central-1.amazonaws.com", {},
     "https://bedrock-runtime.eu-central-1.amazonaws.com", "eu-central-1"),
    ("arn:aws:bedrock:ap-south-1:123:application-inference-profile/x",
     "https://bedrock-runtime.us-east-1.amazonaws.com", {"AWS_REGION": "eu-west-1"},
     "https://bedrock-runtime.ap-south-1.amazonaws.com", "ap-south-1"),
    ("m", "https://vpce-1.bedrock-runtime.example.test", {"AWS_DEFAULT_REGION": "us-west-2"},
     "https://vpce-1.bedrock-runtime.example.test", "us-west-2"),
])
def test_region_and_endpoint_as_pi_resolves_them(model_id: str, base: str, env: dict[str, str],
                                                 endpoint: str, region: str) -> None:
    model = Model(id=model_id, api="bedrock-converse-stream", provider="amazon-bedrock",
                  base_url=base)
    target = bedrock_target(model, StreamOptions(env={**_keys(), **env}))
    assert (target.endpoint, target.region) == (endpoint, region)


# --- the stream and transport ----------------------------------------------------------------


def test_usage_and_cost(sse_server: ScriptedServer) -> None:
    sse_server.add(_answer())
    usage = _stream(sse_server).result(WAIT).usage
    assert (usage.input, usage.output, usage.cache_read, usage.total_tokens) == (
        1000, 100, 200, 1100)
    assert usage.cost.total == pytest.approx((1000 * 3.3 + 100 * 16.5 + 200 * 0.33) / 1e6)


def test_a_broken_frame_is_named(sse_server: ScriptedServer) -> None:
    bad = bytearray(ANSWER[1])
    bad[-1] ^= 0xFF  # the message's CRC no longer matches
    sse_server.add(_answer(ANSWER[0], bytes(bad)))
    message = _stream(sse_server).result(WAIT)
    assert message.error_message.startswith(
        "Bedrock sent an event stream frame that cannot be read")


def test_an_answer_that_is_not_an_event_stream(sse_server: ScriptedServer) -> None:
    sse_server.add(Reply(content_type="text/html", body=[b"<html>proxy</html>"]))
    message = _stream(sse_server).result(WAIT)
    assert message.error_message.startswith(
        "Bedrock answered with Content-Type 'text/html' instead of an event stream")


def test_throttling_is_retried(sse_server: ScriptedServer) -> None:
    body = json.dumps({"message": "Too many requests"}).encode()
    sse_server.add(Reply(status=429, headers={"retry-after": "0"},
                         content_type="application/json", body=[body]), _answer())
    assert _stream(sse_server, max_retries=1).result(WAIT).text == "Hi"
    assert len(sse_server.requests) == 2


def test_abort_within_50_ms(sse_server: ScriptedServer, no_piagent_threads: Any) -> None:
    stall = Stall()
    sse_server.add(_answer(ANSWER[0], ANSWER[1], stall))
    controller = AbortController()
    stream = _stream(sse_server, signal=controller.signal)
    events = iter(stream)
    assert [next(events).type for _ in range(3)] == ["start", "text_start", "text_delta"]
    assert stall.reached.wait(WAIT)
    started = time.perf_counter()
    controller.abort()
    message = stream.result(WAIT)
    assert (time.perf_counter() - started) < 0.05
    assert message.stop_reason == "aborted" and message.text == "Hi"


def test_timeout_of_a_stalled_stream(sse_server: ScriptedServer) -> None:
    sse_server.add(Reply(content_type=STREAM, body=[ANSWER[0], Stall()]))
    message = _stream(sse_server, timeout_ms=100).result(WAIT)
    assert message.stop_reason == "error"
    assert "Bedrock" in message.error_message


def test_stream_events_reach_the_hook(sse_server: ScriptedServer) -> None:
    seen: list[Any] = []
    sse_server.add(_answer())
    assert _stream(sse_server, on_provider_stream_event=lambda e, m: seen.append(e)).result(
        WAIT).text == "Hi"
    assert seen[0] == {"messageStart": {"role": "assistant", "p": "abcd"}}
    assert [next(iter(e)) for e in seen] == ["messageStart", "contentBlockDelta",
                                             "contentBlockStop", "messageStop", "metadata"]


def test_a_raising_hook_is_named(sse_server: ScriptedServer) -> None:
    def hook(event: Any, model: Model) -> None:
        raise KeyError("boom")

    sse_server.add(_answer())
    message = _stream(sse_server, on_provider_stream_event=hook).result(WAIT)
    assert message.error_message == "StreamOptions.on_provider_stream_event raised KeyError: 'boom'"


def test_on_response_sees_the_accepted_answer(sse_server: ScriptedServer) -> None:
    seen: list[int] = []
    sse_server.add(_answer())
    _stream(sse_server, on_response=lambda r, m: seen.append(r.status)).result(WAIT)
    assert seen == [200]


def test_an_unknown_profile_is_named(sse_server: ScriptedServer) -> None:
    message = _stream(sse_server, env={"AWS_PROFILE": "nope"}).result(WAIT)
    assert message.stop_reason == "error"
    assert message.error_message.startswith("Amazon Bedrock could not read AWS profile 'nope'")
