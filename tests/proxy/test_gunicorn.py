"""``ProxyApp`` behind a real gunicorn (gthread worker): an agent runs through it with
``proxy_stream_fn``, the SSE stream is not buffered (its comments arrive while the stream
function is still running), and bad input gets the app's answers. Skipped with the reason
when gunicorn is not installed (it is in the ``test`` extra)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from piagent import Agent
from piagent.proxy import proxy_stream_fn
from piagent.proxy._protocol import model_to_dict
from piagent.testing import ScriptedStreamFn
from tests.conftest import WAIT

from .conftest import TOKEN

pytestmark = pytest.mark.skipif(importlib.util.find_spec("gunicorn") is None,
                                reason="gunicorn is not installed (pip install gunicorn, or "
                                       "the piagent[test] extra)")

ROOT = Path(__file__).resolve().parents[2]
BOOT_WAIT = 60.0  # gunicorn imports piagent in a fresh process on a shared, busy machine


@pytest.fixture(scope="module")
def gunicorn_url() -> Iterator[str]:
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    env["PIAGENT_PROXY_TOKEN"] = TOKEN
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    process = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "--bind", "127.0.0.1:0", "--workers", "1",
         "--worker-class", "gthread", "--threads", "4", "--timeout", "30",
         "--graceful-timeout", "2", "--chdir", str(ROOT), "tests.proxy.gunicorn_app:app"],
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True)
    log: list[str] = []
    found: dict[str, str] = {}
    booted = threading.Event()

    def read_log() -> None:
        assert process.stderr is not None
        for line in process.stderr:  # ends when gunicorn exits
            log.append(line)
            listening = re.search(r"Listening at: (http://127\.0\.0\.1:\d+)", line)
            if listening:
                found["url"] = listening.group(1)
            if "Booting worker" in line and "url" in found:
                booted.set()
        booted.set()  # exited: let the fixture see it

    # owner: this fixture; it ends with gunicorn's stderr and is joined at teardown
    reader = threading.Thread(target=read_log, name="test-gunicorn-log")
    reader.start()
    try:
        booted.wait(BOOT_WAIT)
        if "url" not in found or process.poll() is not None:
            pytest.fail("gunicorn did not start:\n" + "".join(log))
        yield found["url"]
    finally:
        process.terminate()
        try:
            process.wait(WAIT * 2)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(WAIT)
        reader.join(WAIT)
        assert process.stderr is not None
        process.stderr.close()


def test_an_agent_runs_through_gunicorn(gunicorn_url):
    fn = ScriptedStreamFn()
    agent = Agent(model=fn.model, stream_fn=proxy_stream_fn(gunicorn_url, TOKEN))
    run = agent.prompt("hello", timeout=WAIT)
    assert run.text == "echo: hello"
    assert agent.prompt("again", timeout=WAIT).text == "echo: again"


def test_gunicorn_streams_the_sse_unbuffered(gunicorn_url):
    fn = ScriptedStreamFn()
    body = {"model": model_to_dict(fn.model),
            "context": {"messages": [{"role": "user", "content": "hold", "timestamp": 0}]}}
    with requests.Session() as session:
        session.trust_env = False
        with session.post(gunicorn_url + "/api/stream", json=body, stream=True,
                          headers={"Authorization": f"Bearer {TOKEN}"},
                          timeout=WAIT) as answer:
            assert answer.status_code == 200
            assert answer.headers["Content-Type"] == "text/event-stream; charset=utf-8"
            lines = answer.iter_lines()
            seen = [next(lines) for _ in range(3)]  # the stream function is still waiting
    assert seen[0] == b": connected"
    assert b": keep-alive" in seen[1:]


def test_gunicorn_passes_on_the_apps_answers_to_bad_input(gunicorn_url):
    url = gunicorn_url + "/api/stream"
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with requests.Session() as session:
        session.trust_env = False
        answer = session.post(url, data=b"hi", timeout=WAIT,
                              headers={**auth, "Content-Type": "text/plain"})
        assert answer.status_code == 415
        assert answer.json()["error"].startswith("Content-Type 'text/plain' is not supported")
        answer = session.post(url, data=b"[" * 100_000, timeout=WAIT,
                              headers={**auth, "Content-Type": "application/json"})
        assert answer.status_code == 400
        assert answer.json() == {"error": "Request body is JSON nested more than 100 levels "
                                          "deep; the proxy refuses it. Flatten the deepest "
                                          "value."}

        def chunks() -> Iterator[bytes]:  # requests sends a generator chunked
            yield json.dumps({"model": model_to_dict(ScriptedStreamFn().model)}).encode()[:-1]
            yield b', "context": {"messages": []}}'

        answer = session.post(url, data=chunks(), timeout=WAIT,
                              headers={**auth, "Content-Type": "application/json"})
        assert answer.status_code == 200
        assert b'"type":"done"' in answer.content  # gunicorn decoded the chunked body
