"""Amazon Bedrock (api ``bedrock-converse-stream``): piagent's adapter against pi-ai 1.6.1's.

Each conversation of ``wire_bedrock_conversations`` runs through pi-ai 1.6.1's own
``streamSimple`` of ``bedrock-converse-stream`` (the AWS SDK's ``BedrockRuntimeClient``,
HTTP/1.1, SigV4 with fixed test keys) and through piagent's ``stream_simple`` (botocore's
signer and event stream decoder), both against one ``WireServer`` on 127.0.0.1 answering
binary ``application/vnd.amazon.eventstream`` frames (``wire_harness``). Identical: the
requests (path, JSON body, content type, the names of the auth and ``x-amz-*`` headers, the
signature's scheme and signed header names) and the events and final message, or different
exactly as the rows of ``ROWS_OF`` say.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .ref_normalise import first_difference
from .wire_bedrock_conversations import MODELS, SONNET, conversations
from .wire_harness import (
    COMMON_ROWS,
    Out,
    Row,
    apply_rows,
    assert_documented,
    comparable,
    compare_requests,
    pi_job,
    run_ours,
    run_pi,
)
from .wire_server import WireServer

pytest.importorskip("botocore")

ENV = {"AWS_ACCESS_KEY_ID": "AKIDEXAMPLE",
       "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
       "AWS_REGION": "us-east-1", "AWS_BEDROCK_FORCE_HTTP1": "1"}
CONVERSATIONS = {conv["name"]: conv for conv in conversations()}
ROWS_OF = {
    "http-error-400": ["wire-error-sentence"],
    "abort-mid-stream": ["wire-abort-text"],
}
# the headers the AWS SDK adds and signs for itself (its telemetry: an invocation id, the
# attempt, its user agent); piagent signs the others, the same as the SDK
SDK_SIGNED = ("amz-sdk-invocation-id", "amz-sdk-request", "x-amz-user-agent")


def _model_json(conv: dict[str, Any], base_url: str) -> dict[str, Any]:
    model_id = conv.get("model", SONNET)
    return {"id": model_id, "api": "bedrock-converse-stream", "provider": "amazon-bedrock",
            "baseUrl": base_url, "input": ["text", "image"], **MODELS[model_id]}


def _options(conv: dict[str, Any]) -> dict[str, Any]:
    return {"maxRetries": 0, "env": ENV, **conv.get("options", {})}


def _sdk_headers(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Row ``wire-bedrock-sdk-headers``: the SDK's own headers out of pi's signature."""
    out = json.loads(json.dumps(requests))
    for record in out:
        if not record["headers"].get("auth_scheme", "").startswith("AWS4"):
            continue  # a bearer token: nothing signed
        scheme, _, names = record["headers"].get("auth_scheme", "").partition(" SignedHeaders=")
        kept = [n for n in names.split(";") if n not in SDK_SIGNED]
        assert len(kept) < len(names.split(";")), names
        record["headers"]["auth_scheme"] = f"{scheme} SignedHeaders={';'.join(kept)}"
    return out


@pytest.fixture(scope="module")
def server() -> Iterator[WireServer]:
    with contextlib.closing(WireServer()) as wire:
        yield wire


@pytest.fixture(scope="module")
def pi_side(pi16_installed: Path, server: WireServer,
            tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    jobs = [pi_job(name, _model_json(conv, server.add_run(f"{name}--pi", conv["script"])),
                   conv, _options(conv)) for name, conv in CONVERSATIONS.items()]
    return run_pi(jobs, tmp_path_factory.mktemp("wire-bedrock"))


ROWS: dict[str, Row] = dict(COMMON_ROWS)


def test_rows_are_documented() -> None:
    assert_documented([*COMMON_ROWS, "wire-bedrock-sdk-headers"])


def test_rows_name_conversations() -> None:
    assert set(ROWS_OF) <= set(CONVERSATIONS)
    assert {row for rows in ROWS_OF.values() for row in rows} <= set(ROWS)


@pytest.mark.parametrize("name", list(CONVERSATIONS))
def test_bedrock_conversation_as_pi(name: str, server: WireServer,
                                    pi_side: dict[str, Any]) -> None:
    conv = CONVERSATIONS[name]
    spec = _model_json(conv, server.add_run(f"{name}--piagent", conv["script"]))
    ours: Out = comparable(run_ours(spec, conv, _options(conv)))
    assert "driverError" not in pi_side[name], pi_side[name]["driverError"]
    requests = server.requests(f"{name}--pi")
    compare_requests(_sdk_headers(requests), server.requests(f"{name}--piagent"))
    pi = apply_rows(name, comparable(pi_side[name]), ours, ROWS_OF.get(name, []), ROWS)
    difference = first_difference(pi, ours)
    assert difference is None, f"{name} differs:\n{difference}"
