"""Shared helpers for the ``Agent`` tests (``tests/agent/``). ``WAIT``, ``Recorder`` and the
thread checks are the whole suite's, in ``tests/conftest.py``.

* ``GateTool``: a tool whose calls each set ``started[call_id]`` and then wait for
  ``release[call_id]`` (or, with ``until_abort=True``, for the run's signal).
* ``summary(events)``: the whole event sequence as readable tuples, with each run of
  ``message_update`` events collapsed into one ``("message_update*", role)`` entry.
* ``kill_child(tmp_path, script, args, read)``: runs ``script`` as a child Python process (this
  checkout first on its path), reads its lines with ``read(proc)``, kills it with SIGKILL.
  ``child_script(body)`` puts ``open_store`` and ``say`` before a child's body; the ``place``
  fixture is where a session lives as a child is told it, ``open_store(*place)`` (or
  ``with opened(place)``) opens it here.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import signal as signals
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from piagent import (
    AbortSignal,
    Agent,
    AgentEvent,
    AgentTool,
    AgentToolResult,
    AssistantMessage,
    SystemMessage,
    TextContent,
    ToolResultMessage,
)
from piagent.sessions import JsonlStore, PostgresStore, SQLiteStore
from piagent.testing import ScriptedResponse, ScriptedStreamFn
from tests.conftest import WAIT
from tests.sessions.pg import drop_schema, postgres_dsn, unique_schema
from tests.tools.conftest import NO_PARAMS, make_tool, ok


def text_of(message: Any) -> str:
    """A short label for a message's content (user/assistant text, tool result text)."""
    content = getattr(message, "content", "")
    if isinstance(content, str):
        return content
    parts = []
    for block in content:
        if isinstance(block, TextContent):
            parts.append(block.text)
        elif getattr(block, "type", None) == "toolCall":
            parts.append(f"call:{block.id}")
    return "|".join(parts)


def label(message: Any) -> tuple[str, str]:
    """``(role, text)``; assistant messages add their stop reason."""
    role = getattr(message, "role", "?")
    if isinstance(message, AssistantMessage):
        return role, f"{message.stop_reason}:{text_of(message)}"
    if isinstance(message, ToolResultMessage):
        return role, f"{message.tool_call_id}:{text_of(message)}"
    return role, text_of(message)


def summary(events: Iterable[AgentEvent]) -> list[tuple[Any, ...]]:
    """The event sequence as tuples; consecutive ``message_update`` events become one."""
    out: list[tuple[Any, ...]] = []
    for event in events:
        kind = event.type
        if kind == "message_update":
            entry: tuple[Any, ...] = ("message_update*", event.message.role)  # type: ignore[union-attr]
            if out and out[-1] == entry:
                continue
        elif kind in ("message_start", "message_end"):
            message = event.message  # type: ignore[union-attr]
            if isinstance(message, AssistantMessage) and kind == "message_start":
                entry = (kind, "assistant")  # the partial: its content is still growing
            else:
                entry = (kind, *label(message))
        elif kind == "turn_end":
            entry = (kind, *label(event.message),  # type: ignore[union-attr]
                     tuple(r.tool_call_id for r in event.tool_results))  # type: ignore[union-attr]
        elif kind in ("tool_execution_start", "tool_execution_end"):
            entry = (kind, event.tool_call_id)  # type: ignore[union-attr]
        elif kind == "agent_end":
            entry = (kind, tuple(label(m) for m in event.messages))  # type: ignore[union-attr]
        else:
            entry = (kind,)
        out.append(entry)
    return out


def labels(messages: Iterable[Any]) -> list[tuple[str, str]]:
    return [label(m) for m in messages]


class GateTool:
    """A tool whose calls wait: for ``release[call_id]``, or for the signal (``until_abort``).

    ``started[call_id]`` is set when a call begins, ``finished[call_id]`` when it returns.
    ``on_start(call_id, signal)`` runs first, on the tool's pool thread.
    """

    def __init__(self, name: str = "read", *, until_abort: bool = False,
                 on_start: Callable[[str, AbortSignal], None] | None = None) -> None:
        self._lock = threading.Lock()
        self._events: dict[tuple[str, str], threading.Event] = {}
        self.until_abort = until_abort
        self.on_start = on_start
        self.tool = AgentTool(
            name=name, description=f"The {name} tool.",
            parameters={"type": "object", "properties": {"path": {"type": "string"}}},
            execute=self._execute)

    def _event(self, kind: str, call_id: str) -> threading.Event:
        with self._lock:
            return self._events.setdefault((kind, call_id), threading.Event())

    def started(self, call_id: str) -> threading.Event:
        return self._event("started", call_id)

    def release(self, call_id: str) -> threading.Event:
        return self._event("release", call_id)

    def finished(self, call_id: str) -> threading.Event:
        return self._event("finished", call_id)

    def _execute(self, call_id: str, params: dict[str, Any], signal: AbortSignal,
                 on_update: Any) -> AgentToolResult:
        try:
            if self.on_start is not None:
                self.on_start(call_id, signal)
            self.started(call_id).set()
            if self.until_abort:
                got = signal.wait(WAIT)
                return AgentToolResult(content=[TextContent("stopped" if got else "timed out")])
            got = self.release(call_id).wait(WAIT)
            path = params.get("path", "")
            return AgentToolResult(content=[TextContent(f"{path}:{'ok' if got else 'timed out'}")])
        finally:
            self.finished(call_id).set()


def quick_tool(name: str = "noop") -> AgentTool:
    """A tool that returns "done" at once."""
    return make_tool(name, lambda *args: ok("done"), description="Returns at once.",
                     parameters=NO_PARAMS)


def make_agent(responses: Iterable[ScriptedResponse] = (), **kwargs: Any
               ) -> tuple[Agent, ScriptedStreamFn]:
    fn = ScriptedStreamFn(responses)
    kwargs.setdefault("model", fn.model)
    return Agent(stream_fn=fn, **kwargs), fn


def non_system(messages: Iterable[Any]) -> list[Any]:
    return [m for m in messages if not isinstance(m, SystemMessage)]


def texts(messages: list[Any]) -> list[str]:
    """The text of each message, as ``label`` gives it."""
    return [label(m)[1] for m in messages]


# --- a child process killed with SIGKILL -------------------------------------------------

REPO = Path(__file__).resolve().parents[2]
UNKNOWN = "The process stopped while tool"  # how a resumed call of unknown outcome begins
posix_only = pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL is POSIX")


@pytest.fixture(params=["sqlite", "postgres", "jsonl"])
def place(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """Where a session lives, as a child process is told it: (kind, where). A test narrows
    the kinds with ``@pytest.mark.parametrize("place", [...], indirect=True)``."""
    if request.param == "sqlite":
        yield "sqlite", str(tmp_path / "s.db")
    elif request.param == "jsonl":
        yield "jsonl", str(tmp_path / "jsonl")
    else:
        dsn, schema = postgres_dsn(), unique_schema()
        try:
            yield "postgres", f"{dsn}|{schema}"
        finally:
            drop_schema(dsn, schema)


def open_store(kind: str, where: str) -> Any:
    """The store at a ``place``; a child script has this function too (``child_script``)."""
    if kind == "sqlite":
        return SQLiteStore(where)
    if kind == "jsonl":
        return JsonlStore(where)
    dsn, schema = where.split("|")
    return PostgresStore(dsn, schema=schema)


@contextlib.contextmanager
def opened(place: tuple[str, str]) -> Iterator[Any]:
    """``open_store(*place)``, closed after (the stores that have ``close``)."""
    store = open_store(*place)
    try:
        yield store
    finally:
        if hasattr(store, "close"):
            store.close()


def say(line: str) -> None:
    """A child's line to the test: one write, so lines arrive whole."""
    os.write(1, (line + "\n").encode())


def child_script(body: str) -> str:
    """A child's script: its imports, ``open_store`` and ``say``, then ``body`` (dedented)."""
    return "\n".join([
        "from __future__ import annotations", "import os, sys",
        "from piagent.sessions import JsonlStore, PostgresStore, SQLiteStore",
        inspect.getsource(open_store), inspect.getsource(say), textwrap.dedent(body)])


def kill_child(tmp_path: Path, script: str, args: Sequence[str],
               read: Callable[[subprocess.Popen[bytes]], list[str]]) -> list[str]:
    """Run ``script`` (written to ``tmp_path/child.py``) with ``args`` and this checkout first
    on its path; when ``read(proc)`` has its lines, SIGKILL it; those lines. The child is
    gone when this returns, whatever happened."""
    path = tmp_path / "child.py"
    path.write_text(script)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, str(path), *args], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        lines = read(proc)
        os.kill(proc.pid, signals.SIGKILL)
        assert proc.wait(WAIT) == -signals.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=WAIT)
    return lines
