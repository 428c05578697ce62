"""What every folder of the suite shares: the wait bound, thread checks, the event recorder.

The tests mirror the package: ``tests/<layer>/`` tests ``piagent/<layer>/`` and its
``conftest.py`` holds that layer's helpers; the tests of the top-level modules live here.
Import helpers as ``from tests.conftest import WAIT, Recorder`` (or ``from .conftest import
...`` for a folder's own).

* ``WAIT``: the bound of every wait in the suite (seconds); nothing sleeps. ``SLOW_WAIT``:
  the bound of a wait on other processes starting (workers, web servers) on a busy machine.
* ``wait_until(predicate, what, wake=...)``: re-checks ``predicate`` each time ``wake``
  returns (``wake`` blocks on a real source: a process's exit, a run's next event), bounded.
* ``Recorder``: every event, the thread it arrived on, and (given an Agent) the state then.
  As a loop ``emit``: ``Recorder()`` or ``Recorder(on_event=f)``; as an Agent listener:
  ``Recorder(agent)``, which subscribes itself.
* ``piagent_threads()`` / ``join_piagent_threads()``: the live ``piagent-*`` threads (the
  second joins them first, each join bounded by ``WAIT``).
* ``user(text)``: a ``UserMessage`` of one text block.
* ``store_of(kind, tmp_path)``: a fresh session store of ``kind`` ("memory", "sqlite",
  "jsonl", "postgres": a schema of its own, dropped after), closed when the block ends.
* ``hold_new_threads(function, at=...)``: hold threads started meanwhile when they call
  (or return from) ``function`` until released: a moment of the code under test, made wide.
* ``read_child_line(proc)``: a child process's next stdout line, bounded by ``SLOW_WAIT``.
* ``serving_wsgi(app, name)``: a WSGI app served (werkzeug, threaded) on 127.0.0.1; its URL.
* ``gunicorn_server(folder, app, env, workers=N)``: a real gunicorn (``Gunicorn``: URL,
  worker pids, log), stopped on exit.
* ``StreamingHandler``: a quiet HTTP/1.1 request handler without Nagle delay, the base of
  the suite's scripted model servers.
* ``Gate(name)``: a tool that says it started, then waits for the test to open it (or for
  the run's abort, which sets ``aborted``).
* ``EXAMPLES``, ``load_example(path, name)``: the examples folder, and one of its files
  imported as module ``name``; ``CHAT_COOKIE``: the web chat examples' session cookie.
* Lone surrogates: ``ASTRAL_TEXT`` (a hypothesis strategy: text with astral characters),
  ``utf16_units(text)``, ``js_sanitized(text)`` (pi-ai's ``sanitizeSurrogates``, an
  independent reference), ``every_prefix(text)`` (every code-unit prefix joined, and
  sanitized), ``assert_utf8(value)`` (its JSON holds no lone surrogate).
* Fixtures: ``no_gc`` (the cyclic collector off), ``no_thread_leak``,
  ``piagent_threads_back_to_baseline``, ``no_piagent_threads``; ``sigint_raises`` (Python's
  own SIGINT handler for the test: a suite started as a background job ignores SIGINT, so
  ``interrupt_main`` would do nothing and a child process would inherit the ignoring);
  and, for every test, no proxy variables in the environment (so 127.0.0.1 is never
  routed through a proxy).
"""

from __future__ import annotations

import gc
import importlib.util
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any

import pytest
from hypothesis import strategies as st

# Every request the suite builds is built twice, with the request caches and without, and a
# difference fails the test (piagent/providers/_keep.py); the variable reaches subprocesses.
os.environ.setdefault("PIAGENT_REQUEST_CACHES", "check")

from piagent import (
    AbortSignal,
    Agent,
    AgentEvent,
    AgentTool,
    AgentToolResult,
    TextContent,
    ToolResultMessage,
    UserMessage,
    tool,
)
from piagent.sessions import JsonlStore, MemoryStore, PostgresStore, SessionStore, SQLiteStore
from tests.sessions.pg import drop_schema, postgres_dsn, unique_schema

WAIT = 10.0
SLOW_WAIT = 20.0
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
CHAT_COOKIE = "piagent_chat_session"

PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY",
                   "http_proxy", "https_proxy", "all_proxy", "no_proxy")


# --- threads ---------------------------------------------------------------------------------


def piagent_threads() -> list[str]:
    """The names of the live ``piagent-*`` threads, sorted."""
    return sorted(t.name for t in threading.enumerate() if t.name.startswith("piagent"))


def join_piagent_threads() -> list[str]:
    """Join every ``piagent-*`` thread (each bounded by ``WAIT``); return the names still alive."""
    for thread in threading.enumerate():
        if thread.name.startswith("piagent-"):
            thread.join(WAIT)
    return [t.name for t in threading.enumerate() if t.name.startswith("piagent-")]


@pytest.fixture(autouse=True)
def _no_proxy_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def no_gc() -> Iterator[None]:
    """The cyclic garbage collector off for the test (after one collection), so whatever
    it frees was freed by reference counting alone."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.fixture
def no_thread_leak() -> Iterator[None]:
    """Fail the test if it leaves more threads alive than it found."""
    before = {t.ident for t in threading.enumerate()}
    yield
    leaked = [t.name for t in threading.enumerate() if t.ident not in before and t.is_alive()]
    assert leaked == [], f"threads left running: {leaked}"


@pytest.fixture
def piagent_threads_back_to_baseline() -> Iterator[None]:
    """Fail the test if the thread count changed or a ``piagent*`` thread is still alive."""
    baseline = threading.active_count()
    yield
    alive = [t.name for t in threading.enumerate() if t.name.startswith("piagent")]
    assert alive == []
    assert threading.active_count() == baseline


@pytest.fixture
def sigint_raises() -> Iterator[None]:
    """SIGINT raises ``KeyboardInterrupt`` for the test's duration, then back as it was.
    Started from a shell that ignores SIGINT (a background job), Python keeps ignoring it:
    ``_thread.interrupt_main()`` does nothing and a child process inherits the ignoring;
    a handler of Python's own is reset to the default in a child, which then has its own."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.fixture
def no_piagent_threads() -> Iterator[None]:
    """Every run the test started has settled and its ``piagent-*`` threads are gone."""
    yield
    assert join_piagent_threads() == []


def wait_until(predicate: Callable[[], bool], what: str, *, wake: Callable[[float], object],
               timeout: float = WAIT) -> None:
    """Wait until ``predicate()`` holds; fail after ``timeout`` seconds, naming ``what``.

    ``wake(seconds)`` blocks until something that may change the answer happens (a process
    exits, a run records an event, ...) or ``seconds`` pass; ``predicate`` is checked again
    after each. It waits on that real source, never on an Event nothing sets. Within one
    process, prefer an Event or Condition the code under test sets.
    """
    deadline = time.monotonic() + timeout
    while not predicate():
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        wake(min(left, 0.05))


@contextmanager
def hold_new_threads(function: str, *, file_suffix: str = "", at: str = "call"
                     ) -> Iterator[tuple[threading.Event, threading.Event]]:
    """Hold each thread started inside the block, when it calls ``function`` (a function of
    that name in a file ending with ``file_suffix``; ``at="return"``: when it returns from
    it), until ``release`` is set (bounded by ``WAIT``); ``reached`` is set when one is held.
    Yields ``(reached, release)``; on exit, tracing stops and held threads are released."""
    reached, release = threading.Event(), threading.Event()

    def hold() -> None:
        reached.set()
        release.wait(WAIT)

    def on_return(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "return":
            hold()
        return on_return

    def on_call(frame: FrameType, event: str, arg: Any) -> Any:
        code = frame.f_code
        if event != "call" or code.co_name != function or \
                not code.co_filename.endswith(file_suffix):
            return None
        if at == "return":
            return on_return
        hold()
        return None

    threading.settrace(on_call)
    try:
        yield reached, release
    finally:
        threading.settrace(None)
        release.set()
        sys.settrace(None)


@contextmanager
def headless_chromium() -> Iterator[Any]:
    """Debian's Chromium, headless, driven by selenium through chromedriver (a browser test
    module skips before this when either is missing: .ci/install-browser.sh installs them)."""
    import shutil
    import tempfile

    from selenium import webdriver

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or shutil.which("chromium-browser") or ""
    profile = tempfile.mkdtemp(prefix="piagent-chromium-")
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", f"--user-data-dir={profile}"):
        options.add_argument(flag)
    service = webdriver.ChromeService(executable_path=shutil.which("chromedriver") or "")
    driver = webdriver.Chrome(options=options, service=service)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def finish_child(proc: subprocess.Popen[bytes]) -> tuple[str, str]:
    """Wait (bounded) for a child process to end; kill it if it does not; its stdout and stderr."""
    try:
        out, err = proc.communicate(timeout=SLOW_WAIT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=SLOW_WAIT)
    return out.decode(), err.decode(errors="replace")


def logging_tool(name: str, log: list[str], needs_approval: Any = False) -> AgentTool:
    """A tool (any arguments) that appends its call id to ``log`` and answers "NAME ID ok"."""
    def execute(call_id: str, params: Any, *rest: Any) -> AgentToolResult:
        log.append(call_id)
        return AgentToolResult(content=[TextContent(f"{name} {call_id} ok")])

    return AgentTool(name=name, description=name, parameters={"type": "object"},
                     execute=execute, needs_approval=needs_approval)


def read_child_line(proc: subprocess.Popen[bytes], timeout: float = SLOW_WAIT) -> str:
    """The child's next stdout line (stripped), read within ``timeout`` one byte at a time
    (no buffer keeps a later line from the next call); fails with its stderr otherwise."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    deadline = time.monotonic() + timeout
    data = b""
    while not data.endswith(b"\n"):
        ready, _, _ = select.select([fd], [], [], max(deadline - time.monotonic(), 0.0))
        chunk = os.read(fd, 1) if ready else b""
        if not chunk:
            proc.kill()
            _, err = proc.communicate(timeout=timeout)
            pytest.fail(f"the child printed {data!r}, then "
                        f"{'ended' if ready else f'nothing for {timeout:g} s'}; "
                        f"stderr: {err.decode(errors='replace')}")
        data += chunk
    return data.decode().strip()


@contextmanager
def serving_wsgi(app: Any, name: str) -> Iterator[str]:
    """``app`` served by werkzeug's threaded server on 127.0.0.1 (a thread named ``name``);
    yields its URL (no trailing slash); shut down and joined (bounded) on exit."""
    from werkzeug.serving import make_server

    server = make_server("127.0.0.1", 0, app, threaded=True)
    # owner: this helper; stopped by server.shutdown() and joined below
    thread = threading.Thread(target=server.serve_forever, name=name,
                              kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join(WAIT)
        server.server_close()
        assert not thread.is_alive()


class StreamingHandler(BaseHTTPRequestHandler):
    """HTTP/1.1, no request log, and (like real servers) no Nagle delay between the small
    event writes of a stream."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        return None

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class Gate:
    """A tool ``name`` that sets ``started``, then waits (bounded) for the test to set
    ``opened``, or for the run's abort (then it sets ``aborted``)."""

    def __init__(self, name: str = "gate") -> None:
        self.started = threading.Event()
        self.opened = threading.Event()
        self.aborted = threading.Event()

        def execute(signal: AbortSignal) -> str:
            """Wait at the gate."""
            self.started.set()
            for _ in range(int(4 * WAIT / 0.05)):
                if self.opened.is_set():
                    return "through the gate"
                if signal.wait(0.05):  # woken by the abort, else looks at the gate again
                    self.aborted.set()
                    return "aborted at the gate"
            return "the gate never opened"

        self.tool = tool(execute, name=name)


def load_example(path: str, name: str) -> ModuleType:
    """``examples/<path>`` imported as module ``name`` (registered in ``sys.modules``)."""
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def user(text: str) -> UserMessage:
    return UserMessage([TextContent(text)])


@contextmanager
def store_of(kind: str, tmp_path: Path) -> Iterator[SessionStore]:
    """A fresh store of ``kind`` (files under ``tmp_path``; PostgreSQL in a schema of its
    own, skipped with the reason when unreachable), closed and dropped when the block ends."""
    if kind == "memory":
        yield MemoryStore()
    elif kind == "sqlite":
        with SQLiteStore(tmp_path / "sessions.db") as sqlite:
            yield sqlite
    elif kind == "jsonl":
        yield JsonlStore(tmp_path / "sessions")
    else:
        dsn, schema = postgres_dsn(), unique_schema()
        postgres = PostgresStore(dsn, schema=schema)
        try:
            yield postgres
        finally:
            postgres.close()
            drop_schema(dsn, schema)


# --- the event recorder ----------------------------------------------------------------------


@dataclass
class Seen:
    """What the recorder saw: the event, its thread, and (for an Agent) the state right then."""

    event: AgentEvent
    thread: threading.Thread
    signal: AbortSignal | None = None
    messages: list[Any] | None = None
    pending: frozenset[str] | None = None
    streaming: Any = None
    is_streaming: bool | None = None


class Recorder:
    """A loop ``emit`` or an Agent listener that keeps everything it is given (thread-safe)."""

    def __init__(self, agent: Agent | None = None, *,
                 on_event: Callable[[AgentEvent], None] | None = None) -> None:
        self.agent = agent
        self.on_event = on_event
        self._lock = threading.Lock()
        self.seen: list[Seen] = []
        self.unsubscribe = agent.subscribe(self) if agent is not None else None

    def __call__(self, event: AgentEvent, signal: AbortSignal | None = None) -> None:
        seen = Seen(event, threading.current_thread(), signal)
        if self.agent is not None:
            state = self.agent.state
            seen.messages = list(state.messages)
            seen.pending = state.pending_tool_calls
            seen.streaming = state.streaming_message
            seen.is_streaming = state.is_streaming
        with self._lock:
            self.seen.append(seen)
        if self.on_event is not None:
            self.on_event(event)

    @property
    def events(self) -> list[Any]:
        with self._lock:
            return [s.event for s in self.seen]

    @property
    def threads(self) -> list[threading.Thread]:
        with self._lock:
            return [s.thread for s in self.seen]

    def types(self) -> list[str]:
        return [e.type for e in self.events]

    def of(self, kind: str) -> list[Any]:
        return [e for e in self.events if e.type == kind]

    def rows(self) -> list[tuple[Any, ...]]:
        """Every event but ``message_update``, as a tuple: the kind, then for messages the
        role and the tool call id or stop reason, for tool events the tool call id."""
        out: list[tuple[Any, ...]] = []
        for e in self.events:
            if e.type == "message_update":
                continue
            if e.type in ("message_start", "message_end"):
                m = e.message
                out.append((e.type, m.role, getattr(m, "tool_call_id", None) or
                            getattr(m, "stop_reason", None) or ""))
            elif e.type.startswith("tool_execution_"):
                out.append((e.type, e.tool_call_id))
            else:
                out.append((e.type,))
        return out

    def tool_rows(self) -> list[tuple[str, str]]:
        """Tool events and tool-result message events, as (kind, tool call id)."""
        out = []
        for e in self.events:
            if e.type.startswith("tool_execution_"):
                out.append((e.type, e.tool_call_id))
            elif e.type in ("message_start", "message_end") and e.message.role == "toolResult":
                out.append((e.type, e.message.tool_call_id))
        return out

    def ends(self) -> dict[str, Any]:
        """The ``tool_execution_end`` events by tool call id."""
        return {e.tool_call_id: e for e in self.of("tool_execution_end")}

    def results(self) -> list[ToolResultMessage]:
        """The tool-result messages, in the order they ended."""
        return [e.message for e in self.of("message_end") if e.message.role == "toolResult"]


def configure_django() -> None:
    """Configure Django once for the tests that use it (skips when Django is missing)."""
    pytest.importorskip("django")
    import django
    from django.conf import settings

    if not settings.configured:  # the app piagent.contrib.django, this process's databases
        from tests.contrib import django_settings

        settings.configure(**{k: v for k, v in vars(django_settings).items() if k.isupper()})
        django.setup()


@pytest.fixture(scope="session")
def django_databases() -> Iterator[list[str]]:
    """The aliases of tests/contrib/django_settings.py's databases that tests prepared
    (``tests.contrib.conftest.prepare_django_database``): each dropped at the session's end."""
    prepared: list[str] = []
    yield prepared
    if prepared:
        from tests.contrib.conftest import drop_django_database

        for alias in prepared:
            drop_django_database(alias)


# Skips that stand for a missing component (node, a browser, a server) are fine on a
# developer's machine but not in CI: ``.ci/run`` sets PIAGENT_REQUIRE_ALL=1, which turns
# every skip into a failure except the documentation blocks marked ``<!-- no-run -->``.
_ALLOWED_SKIPS = ("marked no-run",)


def _require(report: pytest.TestReport | pytest.CollectReport) -> None:
    if (os.environ.get("PIAGENT_REQUIRE_ALL") == "1" and report.skipped
            and not hasattr(report, "wasxfail")):
        longrepr = report.longrepr
        reason = str(longrepr[2]) if isinstance(longrepr, tuple) else str(longrepr or "")
        if not any(allowed in reason for allowed in _ALLOWED_SKIPS):
            report.outcome = "failed"
            report.longrepr = f"skipped, but PIAGENT_REQUIRE_ALL=1 requires it to run: {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    _require(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Iterator[None]:
    outcome = yield
    _require(outcome.get_result())


# --- node projects of the suite (tests/reference, tests/mcp) ----------------------------------

NPM_CI_TIMEOUT_S = 300


def unavailable(reason: str) -> None:
    """Skip for a missing component, or fail when ``PIAGENT_REQUIRE_ALL=1`` (CI)."""
    if os.environ.get("PIAGENT_REQUIRE_ALL") == "1":
        pytest.fail(f"{reason} (PIAGENT_REQUIRE_ALL=1: nothing may skip for a missing component)")
    pytest.skip(reason)


def npm_installed(folder: Path, marker: str, what: str) -> Path:
    """``folder/node_modules``, installed with ``npm ci`` from the lock when ``marker`` (a
    path inside it) is missing; skips (fails in CI) without node and npm."""
    import shutil
    import subprocess

    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        unavailable(f"node and npm are needed for {what}")
    installed = folder / "node_modules" / marker
    if not installed.exists():
        try:
            done = subprocess.run([str(npm), "ci", "--no-audit", "--no-fund"], cwd=folder,
                                  capture_output=True, text=True, timeout=NPM_CI_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            unavailable(f"npm ci did not finish within {NPM_CI_TIMEOUT_S} s")
        if done.returncode != 0 or not installed.exists():
            unavailable(f"npm ci failed ({done.returncode}): {done.stderr[-2000:]}")
    return folder / "node_modules"


# --- gunicorn ------------------------------------------------------------------------------


@dataclass
class Gunicorn:
    """A gunicorn server started by ``gunicorn_server``: its URL, its worker pids, its log
    lines (gunicorn's stderr) so far, and its master process."""

    url: str
    pids: set[int]
    log: list[str]
    process: subprocess.Popen[bytes]

    def stop(self) -> None:
        """SIGTERM the master, then SIGKILL it if it has not exited in ``SLOW_WAIT``."""
        if self.process.poll() is None:
            self.process.terminate()
        try:
            self.process.wait(SLOW_WAIT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(SLOW_WAIT)


def _log_lines(stream: Any, lines: Any, log: list[str]) -> None:
    for raw in stream:
        line = raw.decode(errors="replace").rstrip("\n")
        log.append(line)
        lines.put(line)
    lines.put(None)


@contextmanager
def gunicorn_server(folder: Path, app: str, env: dict[str, str], *, workers: int,
                    args: tuple[str, ...] = ()) -> Iterator[Gunicorn]:
    """``gunicorn app`` (``-k gthread``, ``workers`` processes, on a free port of 127.0.0.1)
    run in ``folder`` with ``env`` added to the environment (and this repository first on
    ``PYTHONPATH``); yields once every worker booted (bounded by ``SLOW_WAIT``) and stops it
    (SIGTERM, then SIGKILL) on exit. ``args`` go on gunicorn's command line."""
    import queue
    import re

    root = Path(__file__).resolve().parent.parent
    full_env = {**os.environ, **env,
                "PYTHONPATH": os.pathsep.join([str(root), env.get("PYTHONPATH", ""),
                                               os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "gunicorn", "-w", str(workers), "-k", "gthread",
               "--threads", "4", "--graceful-timeout", "5", "-b", "127.0.0.1:0", *args, app]
    process = subprocess.Popen(command, cwd=folder, env=full_env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE)
    lines: queue.Queue[str | None] = queue.Queue()  # gunicorn's log lines, from the reader
    log: list[str] = []
    # owner: this helper; ends when gunicorn closes its stderr (after it exits), joined below
    reader = threading.Thread(target=_log_lines, args=(process.stderr, lines, log),
                              name="test-gunicorn-log", daemon=True)
    reader.start()
    server = Gunicorn("", set(), log, process)
    try:
        while not server.url or len(server.pids) < workers:
            try:
                line = lines.get(timeout=SLOW_WAIT)
            except queue.Empty:
                pytest.fail("gunicorn did not start its workers in time:\n" + "\n".join(log))
            if line is None:
                pytest.fail("gunicorn exited:\n" + "\n".join(log))
            if (found := re.search(r"Listening at: (http://127\.0\.0\.1:\d+)", line)):
                server.url = found.group(1)
            if (found := re.search(r"Booting worker with pid: (\d+)", line)):
                server.pids.add(int(found.group(1)))
        yield server
    finally:
        server.stop()
        reader.join(SLOW_WAIT)
        assert not reader.is_alive()
        assert process.stderr is not None
        process.stderr.close()


# --- the Django example project (examples/django_chat) -------------------------------------

DJANGO_EXAMPLE = EXAMPLES / "django_chat"


def django_example_env(folder: Path, database_url: str, settings: str = "") -> dict[str, str]:
    """The environment that runs ``examples/django_chat`` on ``database_url`` (its
    ``DATABASE_URL``) with a settings module of the test's own: ``test_settings`` in
    ``folder``, the project's settings followed by the Python lines ``settings``."""
    (folder / "test_settings.py").write_text(
        f"from chatsite.settings import *  # noqa: F403\n{settings}\n", encoding="utf-8")
    root = Path(__file__).resolve().parent.parent
    return {"DATABASE_URL": database_url, "DJANGO_SETTINGS_MODULE": "test_settings",
            "PYTHONPATH": os.pathsep.join([str(folder), str(DJANGO_EXAMPLE), str(root)])}


def manage(env: dict[str, str], *args: str, timeout: float = 120.0
           ) -> subprocess.CompletedProcess[str]:
    """``python manage.py ARGS`` of the Django example in a subprocess with ``env`` added."""
    return subprocess.run([sys.executable, "manage.py", *args], cwd=DJANGO_EXAMPLE,
                          env={**os.environ, **env}, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


# --- lone surrogates (issue 43 part 4) --------------------------------------------------
# Text with astral characters (emoji and the like: two UTF-16 code units each), whose every
# prefix in code units is a string a JSON decoder can produce when a model or server splits
# "\ud83d\ude00" between two chunks.
_BMP = st.characters(max_codepoint=0xFFFF, exclude_categories=("Cs", "Cc"))
_ASTRAL = st.characters(min_codepoint=0x10000)
ASTRAL_TEXT = st.tuples(st.text(_BMP | _ASTRAL, max_size=3), _ASTRAL,
                        st.text(_BMP | _ASTRAL, max_size=3)).map("".join)


def utf16_units(text: str) -> list[str]:
    """``text`` as JavaScript sees it: one str per UTF-16 code unit (an astral character
    becomes its high and its low surrogate)."""
    data = text.encode("utf-16-le")
    return [data[i:i + 2].decode("utf-16-le", "surrogatepass") for i in range(0, len(data), 2)]


def js_sanitized(text: str) -> str:
    """What pi-ai's ``sanitizeSurrogates`` makes of ``text`` read as UTF-16 code units (an
    independent reference: a pair side by side is its character, the rest is dropped)."""
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "ignore")


def every_prefix(text: str) -> tuple[str, str]:
    """Every code-unit prefix of ``text``, ``|``-joined (lone high surrogates among them),
    and what that becomes once sanitized."""
    units = utf16_units(text)
    prefixes = ["".join(units[:k]) for k in range(len(units) + 1)]
    return "|".join(prefixes), "|".join(js_sanitized(p) for p in prefixes)


def assert_utf8(value: Any, where: str = "") -> None:
    """``value``'s JSON can be written as UTF-8: it holds no lone surrogate."""
    try:
        json.dumps(value, ensure_ascii=False, default=str).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise AssertionError(f"a lone surrogate in {where or 'the value'}: {value!r}") from exc
