"""``CeleryRunner`` with real worker processes, a Redis broker and PostgreSQL (docs/celery.md).

Covers: a run started here executes on a worker and is streamed by another process, steered
and aborted from a third; a worker killed with SIGKILL mid-tool has its run finished by the
other worker with the ``replay`` rules (the "safe" tool ran twice, the "never" one got the
unknown-outcome error result); 50 sessions at once across two workers lose nothing (every
message exactly once, in order); a store that goes away gives a reader a clear error and a
broker that is down makes ``start`` fail clearly, both within a bound; a worker's run, and a
recovered one, join the trace of the request that started it (``piagent.otel``).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider

from piagent import otel
from piagent.messages import ToolResultMessage
from piagent.runs import QueuedRunner
from piagent.sessions import PostgresStore

from ..conftest import SLOW_WAIT, wait_until
from .conftest import ROOT, Cluster, exit_of, run_change


def _client(cluster: Cluster, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "tests.celery._client", *args], cwd=ROOT,
                            env=cluster.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _finish(process: subprocess.Popen[str]) -> str:
    out, err = process.communicate(timeout=SLOW_WAIT * 2)
    assert process.returncode == 0, err
    return out


def _worker_pids(cluster: Cluster) -> set[int]:
    return {p.pid for p in cluster.workers.values() if p.poll() is None}


def _users(cluster: Cluster, session_id: str) -> list[str]:
    return [getattr(m, "text", "") for m in cluster.app.store.load(session_id)  # type: ignore[union-attr]
            if m.role == "user"]


def test_start_here_stream_elsewhere_steer_and_abort_from_a_third(cluster: Cluster) -> None:
    runner = cluster.runner
    (cluster.dir / "expect-steer-block-1").touch()
    run_id = runner.start("block-1", "go")
    streamer = _client(cluster, "stream", run_id)
    entered = cluster.dir / "entered-block-1"
    wait_until(entered.exists, "the block tool to start on a worker",
               wake=run_change(runner, run_id))
    assert runner.status(run_id).state == "running"
    _finish(_client(cluster, "steer", "block-1", "steered"))
    (cluster.dir / "gate-block-1").touch()
    lines = [json.loads(line) for line in _finish(streamer).splitlines()]
    types = [line["type"] for line in lines if line["type"] != "idle"]
    assert types[0] == "agent_start" and types[-1] == "agent_end"
    assert types.count("agent_start") == 1
    assert runner.wait(run_id, SLOW_WAIT) and runner.status(run_id).state == "done"
    assert _users(cluster, "block-1") == ["go", "steered"]
    texts = [line["text"] for line in lines if line["type"] == "message_end"]
    assert texts[-1] == "echo steered"

    (cluster.dir / "gate-block-1").unlink()
    (cluster.dir / "expect-steer-block-1").unlink()
    entered.unlink()
    second = runner.start("block-1", "again")
    wait_until(entered.exists, "the block tool to start again", wake=run_change(runner, second))
    _finish(_client(cluster, "abort", second, "stopped from elsewhere"))
    assert runner.wait(second, SLOW_WAIT)
    info = runner.status(second)
    assert (info.state, info.error_message) == ("aborted", "stopped from elsewhere")
    assert [e.type for e in runner.events(second, timeout=SLOW_WAIT)][-1] == "agent_end"


@pytest.mark.parametrize("attempt", range(20))
def test_steers_sent_here_reach_the_workers_run_at_its_poll_point(cluster: Cluster,
                                                                 attempt: int) -> None:
    """Three batches on a worker; before each is let go, two steers sent from this process
    have returned: each pair is in the transcript right after its batch, exactly once."""
    runner = cluster.runner
    session_id = f"steer3-{attempt}"
    run_id = runner.start(session_id, "go")
    expected = ["user:go"]
    for n in (1, 2, 3):
        entered = cluster.dir / f"entered-{session_id}-{n}"
        wait_until(entered.exists, f"batch {n} to start on a worker",
                   wake=run_change(runner, run_id))
        runner.steer(session_id, f"b{n}-a")
        runner.steer(session_id, f"b{n}-b")
        (cluster.dir / f"gate-{session_id}-{n}").touch()
        expected += [f"assistant:batch {n}", f"toolResult:gate {n}", f"user:b{n}-a",
                     f"user:b{n}-b"]
    assert runner.wait(run_id, SLOW_WAIT) and runner.status(run_id).state == "done"
    seen = []
    for m in cluster.app.store.load(session_id)[1:]:  # type: ignore[union-attr]
        if m.role == "assistant":
            seen.append(f"assistant:batch {m.tool_calls[0].arguments['n']}" if m.tool_calls
                        else f"assistant:{m.text}")
        else:
            seen.append(f"{m.role}:{m.text}")
    assert seen == [*expected, "assistant:done"]


def test_a_worker_killed_mid_tool_has_its_run_finished_by_the_other(cluster: Cluster) -> None:
    cluster.ensure("w1", "w2")
    runner = cluster.runner
    with _traced_request() as request:  # the recovered run continues this trace
        run_id = runner.start("kill-1", "do both")
    events: list[Any] = []
    reader = threading.Thread(target=lambda: events.extend(
        e for e in runner.events(run_id, timeout=SLOW_WAIT) if e is not None))
    reader.start()
    ran = cluster.dir / "ran-kill-1"

    def both_started() -> bool:
        return ran.exists() and len(ran.read_text().split("\n")) >= 3

    wait_until(both_started, "look and charge to start on a worker",
               wake=run_change(runner, run_id))
    victim = int(ran.read_text().split()[1])
    assert victim in _worker_pids(cluster)
    name = cluster.kill(victim)
    assert runner.wait(run_id, SLOW_WAIT * 3), f"not recovered; logs:\n{cluster.log('w1')}\n" \
                                          f"{cluster.log('w2')}"
    reader.join(SLOW_WAIT)
    assert not reader.is_alive()
    info = runner.status(run_id)
    assert info.state == "done", info
    rows = [line.split() for line in ran.read_text().splitlines()]
    assert sorted(tool for tool, _ in rows) == ["charge", "look", "look"]  # safe ran again
    assert {int(pid) for tool, pid in rows[2:]} != {victim}  # on the other worker
    results = {m.tool_call_id: m for m in cluster.app.store.load("kill-1")  # type: ignore[union-attr]
               if isinstance(m, ToolResultMessage)}
    assert results["c-look"].text == "looked" and not results["c-look"].is_error
    assert results["c-charge"].is_error and "not run again" in results["c-charge"].text
    assert events[-1].type == "agent_end"
    ids = [e.id for e in events]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    runs = [s for s in _spans(cluster, request) if s["name"] == "invoke_agent"]
    assert len(runs) == 1  # the recovering worker's (the killed one never ended its own)
    assert runs[0]["parent_id"] == f"{request.get_span_context().span_id:016x}"
    cluster.ensure(name)


def test_fifty_sessions_across_two_workers_lose_nothing(cluster: Cluster) -> None:
    cluster.ensure("w1", "w2")
    runner = cluster.runner
    sessions = [f"echo-many-{i}" for i in range(50)]

    def one_round(prompt: str) -> dict[str, list[str]]:
        run_ids = {s: runner.start(s, f"{prompt} {s}") for s in sessions}

        def read(session: str) -> list[str]:
            texts = []
            for item in runner.events(run_ids[session], timeout=SLOW_WAIT):
                assert item is not None, f"{session}: no event within {SLOW_WAIT} s"
                if item.type == "message_end":
                    message = item.event["message"]
                    texts.append("".join(b.get("text", "") for b in message["content"]))
            return texts

        with ThreadPoolExecutor(max_workers=10) as pool:
            seen = dict(zip(sessions, pool.map(read, sessions), strict=True))
        for s in sessions:
            assert runner.wait(run_ids[s], SLOW_WAIT) and runner.status(run_ids[s]).state == "done"
        return seen

    first = one_round("one")
    second = one_round("two")
    for s in sessions:
        assert first[s] == [f"one {s}", f"echo one {s}"]
        assert second[s] == [f"two {s}", f"echo two {s}"]
        texts = [getattr(m, "text", "") for m in cluster.app.store.load(s)  # type: ignore[union-attr]
                 if m.role != "system"]
        assert texts == [f"one {s}", f"echo one {s}", f"two {s}", f"echo two {s}"]


class _Proxy:
    """A TCP relay to ``port`` on 127.0.0.1 that the test can cut (every connection at once)."""

    def __init__(self, port: int) -> None:
        self.target = port
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.sockets: list[socket.socket] = []  # guarded by _lock, as closed
        self.closed = False
        self._lock = threading.Lock()
        self.threads = [threading.Thread(target=self._accept, daemon=True)]
        self.threads[0].start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target))
            with self._lock:
                if self.closed:
                    client.close()
                    upstream.close()
                    return
                self.sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                thread = threading.Thread(target=self._pump, args=(a, b), daemon=True)
                self.threads.append(thread)
                thread.start()

    @staticmethod
    def _pump(a: socket.socket, b: socket.socket) -> None:
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass  # the test cut the relay
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # closed already

    def cut(self) -> None:
        with self._lock:
            self.closed = True
        self.server.close()
        with self._lock:
            for s in self.sockets:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass  # closed already
                s.close()
        for thread in self.threads:
            thread.join(SLOW_WAIT)


def test_a_store_that_goes_away_gives_the_reader_a_clear_error(cluster: Cluster) -> None:
    dsn = cluster.env["PIAGENT_TEST_POSTGRES"]
    port = int(dsn.rsplit(":", 1)[1].split("/")[0]) if dsn.count(":") >= 2 else 5432
    proxy = _Proxy(port)
    via = dsn.replace(f":{port}/", f":{proxy.port}/")
    store = PostgresStore(via, schema=cluster.env["PIAGENT_TEST_SCHEMA"], timeout=2.0)
    reader = QueuedRunner(store, cluster.app.make_agent, lambda r, p: None)  # type: ignore[union-attr]
    (cluster.dir / "entered-block-gone").unlink(missing_ok=True)
    run_id = cluster.runner.start("block-gone", "go")
    events = reader.events(run_id, timeout=SLOW_WAIT)
    assert next(events) is not None
    proxy.cut()
    with pytest.raises(ConnectionError, match="PostgreSQL at .* is unavailable"):
        for _ in events:
            pass
    store.close()  # (pytest-timeout fails a reader that hangs instead)
    cluster.runner.abort(run_id, "done with it")
    assert cluster.runner.wait(run_id, SLOW_WAIT)


def test_a_store_that_goes_away_from_the_worker_fails_the_run_clearly(
        cluster: Cluster) -> None:
    """The worker's store connection is cut mid-tool: the worker logs the store's error,
    stays up, and the run (whose lease it cannot renew) reads ``lost`` or is taken over by
    another worker's recovery."""
    from celery import Celery  # type: ignore[import-untyped]

    from piagent.celery import CeleryRunner

    dsn = cluster.env["PIAGENT_TEST_POSTGRES"]
    port = int(dsn.rsplit(":", 1)[1].split("/")[0])
    proxy = _Proxy(port)
    queue = f"{cluster.queue}-cut"
    worker = cluster.start("w-cut", PIAGENT_TEST_QUEUE=queue,
                           PIAGENT_TEST_POSTGRES=dsn.replace(f":{port}/", f":{proxy.port}/"))
    sender = Celery("sender", broker=cluster.env["PIAGENT_TEST_REDIS"])
    runner = CeleryRunner(sender, cluster.app.store, cluster.app.make_agent,  # type: ignore[union-attr]
                          queue=queue, lease_s=2.0)
    try:
        run_id = runner.start("block-cut", "go")
        wait_until((cluster.dir / "entered-block-cut").exists, "the tool to start",
                   wake=run_change(runner, run_id))
        proxy.cut()
        # the lease (2 s) runs out once the worker cannot renew it: the run reads lost,
        # unless another worker of the cluster (each calls recover_lost() every few
        # seconds) saw the lapsed lease first and took the run over, as it should
        def lost_or_taken_over() -> bool:
            return runner.status(run_id).state == "lost" or any(
                f"run {run_id}: its executor's lease ran out" in cluster.log(name)
                for name in list(cluster.workers) if name != "w-cut")

        wait_until(lost_or_taken_over, "the run to read lost or be taken over",
                   wake=run_change(runner, run_id), timeout=SLOW_WAIT)
        wait_until(lambda: "is unavailable" in cluster.log("w-cut"),
                   "the worker to log the store's error", wake=exit_of(worker))
        assert "PostgreSQL at" in cluster.log("w-cut")
        assert worker.poll() is None  # the worker is still up
    finally:
        (cluster.dir / "gate-block-cut").touch()
        cluster.stop("w-cut")


def test_a_broker_that_is_down_makes_start_fail_clearly(cluster: Cluster) -> None:
    from celery import Celery  # type: ignore[import-untyped]
    from kombu.exceptions import OperationalError  # type: ignore[import-untyped]

    from piagent.celery import CeleryRunner

    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there now
    app = Celery("down", broker=f"redis://127.0.0.1:{port}/0")
    app.conf.update(broker_connection_timeout=1, broker_connection_retry=False,
                    broker_connection_max_retries=0, task_publish_retry=False)
    runner = CeleryRunner(app, cluster.app.store, cluster.app.make_agent,  # type: ignore[union-attr]
                          name="piagent.run-down")
    with pytest.raises(OperationalError):
        runner.start("echo-down", "hello")
    # the failed run is recorded and frees the session
    run_id = cluster.runner.start("echo-down", "hello again")
    assert cluster.runner.wait(run_id, SLOW_WAIT)
    assert cluster.runner.status(run_id).state == "done"


@contextmanager
def _traced_request() -> Iterator[Any]:
    """A web request's span, current inside the block, with ``piagent.otel`` on here."""
    provider = TracerProvider()
    otel.instrument(provider)
    try:
        with provider.get_tracer("web").start_as_current_span("POST /chat") as request:
            yield request
    finally:
        otel.uninstrument()


def _spans(cluster: Cluster, request: Any) -> list[dict[str, Any]]:
    """The spans the workers exported in ``request``'s trace (tests/celery/app.py)."""
    trace_id = f"{request.get_span_context().trace_id:032x}"
    return [span for path in cluster.dir.glob("spans-*.jsonl")
            for span in map(json.loads, path.read_text().splitlines())
            if span["trace_id"] == trace_id]


def test_a_workers_run_joins_the_trace_of_the_request_that_started_it(
        cluster: Cluster) -> None:
    """The web side (this process) starts a run inside its request span; the worker's
    ``invoke_agent`` span is that span's child, in the same trace (docs/observability.md)."""
    with _traced_request() as request:
        run_id = cluster.runner.start("echo-traced", "hello")
    assert cluster.runner.wait(run_id, SLOW_WAIT)
    assert cluster.runner.status(run_id).state == "done"
    request_id = f"{request.get_span_context().span_id:016x}"
    # the worker ends (and exports) its spans before it records the run's end
    found = _spans(cluster, request)
    run = [s for s in found if s["name"] == "invoke_agent"]
    assert len(run) == 1 and run[0]["parent_id"] == request_id
    assert run[0]["attributes"]["piagent.stop_reason"] == "stop"
    chats = [s for s in found if s["name"] == "chat scripted"]
    assert len(chats) == 1 and chats[0]["parent_id"] == run[0]["span_id"]
