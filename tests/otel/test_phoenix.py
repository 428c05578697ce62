"""Spans exported over OTLP/HTTP to a real Arize Phoenix started here, read back through its
REST API: the run's tree arrives whole, with the GenAI attributes Phoenix shows.

Phoenix lives in a virtual environment of its own (``.ci/install-phoenix.sh``; its
dependencies are not piagent's): ``PIAGENT_PHOENIX`` names its ``phoenix`` executable
(default ``~/.cache/piagent/phoenix/bin/phoenix``). Missing: the test skips saying how to
install it (``PIAGENT_REQUIRE_ALL=1`` makes that a failure).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from piagent import Agent, Model, otel, tool
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls

from ..conftest import SLOW_WAIT, WAIT, wait_until

PHOENIX = Path(os.environ.get("PIAGENT_PHOENIX",
                              Path.home() / ".cache/piagent/phoenix/bin/phoenix"))
START_S = 180.0  # Phoenix's first start (database migrations) on a loaded machine
PROJECT = "piagent-tests"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=WAIT) as response:  # noqa: S310 - localhost
        return json.loads(response.read())


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=WAIT) as response:  # noqa: S310
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Any]]:
    if not PHOENIX.exists():
        pytest.skip(f"Arize Phoenix is not installed at {PHOENIX} (sh .ci/install-phoenix.sh, "
                    "or set PIAGENT_PHOENIX)")
    work = tmp_path_factory.mktemp("phoenix")
    port = _free_port()
    env = dict(os.environ, PHOENIX_PORT=str(port), PHOENIX_GRPC_PORT=str(_free_port()),
               PHOENIX_HOST="127.0.0.1", PHOENIX_WORKING_DIR=str(work),
               PHOENIX_TELEMETRY_ENABLED="false")
    with (work / "phoenix.log").open("ab") as log:
        process = subprocess.Popen([str(PHOENIX), "serve"], env=env, stdout=log,
                                   stderr=subprocess.STDOUT, cwd=work)
    url = f"http://127.0.0.1:{port}"

    def wake(seconds: float) -> None:  # returns early if Phoenix exits
        try:
            process.wait(seconds)
        except subprocess.TimeoutExpired:
            pass

    try:
        wait_until(lambda: process.poll() is not None or _healthy(url), "Phoenix to start",
                   wake=wake, timeout=START_S)
        assert process.poll() is None, (work / "phoenix.log").read_text()[-3000:]
        yield url, wake
    finally:
        process.terminate()
        try:
            process.wait(SLOW_WAIT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(SLOW_WAIT)


def test_a_run_exported_over_otlp_http_reads_back_from_phoenix(
        phoenix: tuple[str, Any]) -> None:
    url, wake = phoenix
    provider = TracerProvider(resource=Resource({"service.name": "piagent-tests",
                                                 "openinference.project.name": PROJECT}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(
        endpoint=f"{url}/v1/traces")))
    barrier = threading.Barrier(2, timeout=WAIT)  # the two calls overlap

    @tool
    def find_order(order_id: str) -> str:
        """Find an order.

        Args:
            order_id: the order number.
        """
        barrier.wait()
        with provider.get_tracer("shop").start_as_current_span("SELECT orders"):
            return f"{order_id}: shipped"

    model = Model(id="gpt-4.1-mini", api="openai-completions", provider="openai",
                  base_url="https://api.openai.com/v1")
    stream = ScriptedStreamFn([assistant_tool_calls(("find_order", {"order_id": "A-17"}),
                                                    ("find_order", {"order_id": "B-42"})),
                               assistant_text("Both shipped.")])
    otel.instrument(provider, agent_name="support")
    try:
        with provider.get_tracer("web").start_as_current_span("POST /chat") as request:
            Agent(model=model, stream_fn=stream, tools=[find_order]).prompt("where?")
    finally:
        otel.uninstrument()
        provider.shutdown()
    trace_id = f"{request.get_span_context().trace_id:032x}"

    def spans() -> list[dict[str, Any]]:
        try:
            body = _get(f"{url}/v1/projects/{PROJECT}/spans/otlpv1?trace_id={trace_id}"
                        f"&limit=100")
        except urllib.error.HTTPError:  # the project appears with its first span
            return []
        return list(body["data"])

    wait_until(lambda: len(spans()) >= 8, "Phoenix to store the trace's 8 spans",
               wake=wake, timeout=SLOW_WAIT)
    found = spans()
    by_id = {span["span_id"]: span for span in found}
    tree = sorted((span["name"], by_id[span["parent_span_id"]]["name"]
                   if span.get("parent_span_id") else None) for span in found)
    assert tree == [("POST /chat", None),
                    ("SELECT orders", "execute_tool find_order"),
                    ("SELECT orders", "execute_tool find_order"),
                    ("chat gpt-4.1-mini", "invoke_agent support"),
                    ("chat gpt-4.1-mini", "invoke_agent support"),
                    ("execute_tool find_order", "invoke_agent support"),
                    ("execute_tool find_order", "invoke_agent support"),
                    ("invoke_agent support", "POST /chat")]
    chat = next(span for span in found if span["name"] == "chat gpt-4.1-mini")
    attributes = {item["key"]: item["value"]["string_value"] for item in chat["attributes"]
                  if item["value"].get("string_value") is not None}
    assert attributes["gen_ai.operation.name"] == "chat"
    assert attributes["gen_ai.provider.name"] == "openai"
    assert attributes["gen_ai.request.model"] == "gpt-4.1-mini"
