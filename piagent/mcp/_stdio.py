"""The stdio transport: a server subprocess speaking newline-delimited JSON-RPC.

One reader thread per process reads its stdout and hands each answer to the caller waiting
for it (a ``threading.Event`` per request: a waiting caller costs nothing until its answer,
its timeout or its abort). Notifications and the server's own requests go to
``on_message`` on the reader thread.
"""

from __future__ import annotations

import json
import logging
import os
import signal as signal_module
import stat
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import IO, Any

from ..abort import AbortSignal
from ._errors import MCPConnectionError, MCPError, MCPTimeoutError, aborted_error

__all__ = ["StdioTransport"]

_log = logging.getLogger("piagent.mcp")
_CLOSE_STEP_S = 0.6  # close(): stdin closed, then terminate, then kill, each waited this long
_TAIL_BYTES, _TAIL_LINES = 4096, 10  # of a stderr file, said when the server exits


class _Slot:
    """One request waiting for its answer."""

    __slots__ = ("event", "message", "error")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.message: dict[str, Any] | None = None
        self.error: MCPError | None = None


class StdioTransport:
    """A started server process. ``send`` may be called from any number of threads at once."""

    def __init__(self, command: Sequence[str], *, env: Mapping[str, str] | None,
                 cwd: str | None, stderr: int | IO[Any] | None, label: str,
                 on_message: Callable[[dict[str, Any]], None]) -> None:
        self.label = label
        self._on_message = on_message
        # a regular file the server logs to: its tail is said when the server exits
        self._stderr_file = stderr if not isinstance(stderr, int) and _regular_file(stderr) \
            else None
        full_env = None if env is None else {**os.environ, **env}
        try:
            self._proc = subprocess.Popen(  # noqa: S603 - the user's own command
                list(command), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
                env=full_env, cwd=cwd, start_new_session=True)
        except OSError as exc:
            msg = f"Could not start the MCP server {label}: {exc}"
            raise MCPConnectionError(msg) from exc
        self._lock = threading.Lock()  # guards _pending and _closed_why
        self._pending: dict[Any, _Slot] = {}
        self._closed_why: str | None = None
        self._write_lock = threading.Lock()  # one writer at a time on the process's stdin
        self._reader = threading.Thread(target=self._read, name="piagent-mcp-stdio",
                                        daemon=True)
        self._reader.start()

    @property
    def alive(self) -> bool:
        return self._closed_why is None

    @property
    def pid(self) -> int:
        return self._proc.pid

    # --- sending -------------------------------------------------------------------------

    def send(self, message: dict[str, Any], *, timeout: float,
             signal: AbortSignal | None) -> dict[str, Any]:
        """Send a request and wait for its answer (the whole JSON-RPC response)."""
        slot = _Slot()
        id_ = message["id"]
        with self._lock:
            if self._closed_why is not None:
                raise MCPConnectionError(self._closed_why)
            self._pending[id_] = slot
        unregister = signal.on_abort(slot.event.set) if signal is not None else None
        try:
            self._write(message)
            if not slot.event.wait(timeout):
                raise MCPTimeoutError(f"The MCP server {self.label} did not answer "
                                      f"{message['method']} within {timeout:g} s.")
        finally:
            if unregister is not None:
                unregister()
            with self._lock:
                self._pending.pop(id_, None)
        if slot.error is not None:
            raise slot.error
        if slot.message is None:  # woken by the abort
            raise aborted_error(signal)
        return slot.message

    def notify(self, message: dict[str, Any]) -> None:
        self._write(message)

    def cancel(self, message: dict[str, Any]) -> None:
        """Send ``notifications/cancelled`` (a line on the server's stdin)."""
        self._write(message)

    def _write(self, message: dict[str, Any]) -> None:
        data = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
        stdin = self._proc.stdin
        assert stdin is not None
        try:
            with self._write_lock:
                stdin.write(data)
                stdin.flush()
        except (OSError, ValueError) as exc:  # the process is gone, or close() closed stdin
            raise MCPConnectionError(self._closed_why or
                                     f"The MCP server {self.label} stopped reading: {exc}"
                                     ) from exc

    # --- the reader thread ---------------------------------------------------------------

    def _read(self) -> None:
        stdout = self._proc.stdout
        assert stdout is not None
        try:
            with stdout:
                for line in stdout:
                    self._dispatch(line)
        except (OSError, ValueError):
            pass  # the pipe broke
        code = self._proc.poll()
        if code is None:
            try:
                code = self._proc.wait(_CLOSE_STEP_S)
            except subprocess.TimeoutExpired:
                code = None
        self._fail_all(f"The MCP server {self.label} closed its output"
                       + ("" if code is None else f" (exit code {code})") + "."
                       + self._stderr_tail())

    def _stderr_tail(self) -> str:
        """The last lines the server wrote to its stderr file ("" without one), read
        without moving the file's offset (the server's own descriptor shares it)."""
        if self._stderr_file is None:
            return ""
        try:
            fd = self._stderr_file.fileno()
            size = os.fstat(fd).st_size
            data = os.pread(fd, _TAIL_BYTES, max(0, size - _TAIL_BYTES))
        except (OSError, ValueError):  # closed by its owner meanwhile
            return ""
        lines = data.decode("utf-8", "replace").strip().splitlines()[-_TAIL_LINES:]
        return "".join(["\nIts last stderr lines:", *("\n  " + line for line in lines)]) \
            if lines else ""

    def _dispatch(self, line: bytes) -> None:
        if not line.strip():
            return
        try:
            message = json.loads(line)
        except ValueError:
            return  # a server's stray print; the spec says stdout is for messages only
        if not isinstance(message, dict):
            return
        if "method" not in message and "id" in message:
            with self._lock:
                slot = self._pending.get(message["id"])
            if slot is not None:
                slot.message = message
                slot.event.set()
            else:
                _log.debug("MCP server %s answered request %r, which nobody waits for any "
                           "more", self.label, message["id"])
            return
        self._on_message(message)

    def _fail_all(self, why: str) -> None:
        with self._lock:
            if self._closed_why is None:
                self._closed_why = why
            slots = list(self._pending.values())
        for slot in slots:
            slot.error = MCPConnectionError(why)
            slot.event.set()

    # --- closing -------------------------------------------------------------------------

    def close(self, timeout: float = 2.0) -> None:
        """Stop the process: stdin closed, then SIGTERM, then SIGKILL; bounded by ``timeout``."""
        deadline = time.monotonic() + timeout
        with self._lock:
            if self._closed_why is None:
                self._closed_why = f"The MCP server {self.label} was closed."
        proc = self._proc
        try:
            with self._write_lock:
                if proc.stdin is not None:
                    proc.stdin.close()
        except OSError:
            pass
        step = min(_CLOSE_STEP_S, timeout / 3)
        for sig in (None, signal_module.SIGTERM, signal_module.SIGKILL):
            if sig is not None:
                try:  # the whole group: a launcher (npx, uvx) and the server it started
                    os.killpg(proc.pid, sig)
                except OSError:
                    pass
            try:
                proc.wait(max(0.0, min(step, deadline - time.monotonic())))
                break
            except subprocess.TimeoutExpired:
                continue
        self._reader.join(max(0.05, min(step, deadline - time.monotonic())))
        if self._reader.is_alive():  # a grandchild still holds stdout open
            try:
                os.killpg(proc.pid, signal_module.SIGKILL)
            except OSError:
                pass
            self._reader.join(max(0.05, deadline - time.monotonic()))
        self._fail_all(self._closed_why or "closed")


def _regular_file(stderr: object) -> bool:
    """Whether ``stderr`` is an open regular file (a log file, a ``TemporaryFile``)."""
    fileno = getattr(stderr, "fileno", None)
    if fileno is None:
        return False
    try:
        return stat.S_ISREG(os.fstat(fileno()).st_mode)
    except (OSError, ValueError):
        return False
