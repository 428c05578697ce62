"""Ctrl-C while a tool that ignores its signal holds the run (a notebook's "Interrupt kernel").

A real process blocks on its main thread in ``prompt()`` (or ``run.wait()``) while a tool
waits on a ``threading.Event`` and never looks at the run's signal. The test sends SIGINT:
within a second one line on stderr names the tool that has not returned. A second SIGINT
stops the waiting with a ``KeyboardInterrupt`` naming ``agent.wait_for_idle()``; a prompt
meanwhile gets an ``AgentBusyError`` naming the tool; once the tool returns,
``wait_for_idle()`` is True and the next prompt works. A tool that does watch its signal
gets no notice at all.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

CHILD = r"""
import signal, sys, threading
signal.signal(signal.SIGINT, signal.default_int_handler)  # a background job ignores it
from piagent import AbortSignal, Agent, AgentBusyError, tool
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls

mode = sys.argv[1]
release = threading.Event()

def started():
    # say STARTED once the main thread waits for the run: a SIGINT that lands inside
    # Thread.start() (the worker can reach the tool first) hits a CPython 3.11 bug there
    for _ in range(2000):  # bounded: 10 s
        frame = sys._current_frames().get(threading.main_thread().ident)
        while frame is not None and frame.f_code.co_name != "_wait":
            frame = frame.f_back
        if frame is not None:
            break
        threading.Event().wait(0.005)
    print("STARTED", flush=True)

@tool
def slow() -> str:
    "Works on, whatever the run's signal says."
    started()
    release.wait(60)
    return "slow done"

@tool
def polite(signal: AbortSignal) -> str:
    "Stops when the run is aborted."
    started()
    signal.wait(60)
    return "stopped"

scripted = ScriptedStreamFn([assistant_tool_calls(("polite", {})),
                             assistant_tool_calls(("slow", {})),
                             assistant_text("second answer")])
agent = Agent(model=scripted.model, tools=[slow, polite], stream_fn=scripted)
try:
    agent.prompt("first")  # the polite tool: aborted and settled at once, nothing said
except KeyboardInterrupt:
    print("POLITE", agent.state.is_streaming, flush=True)
try:
    if mode == "prompt":
        agent.prompt("go")
    else:
        agent.prompt("go", block=False).wait()
except KeyboardInterrupt as exc:
    print("SECOND", str(exc), flush=True)
try:
    agent.prompt("again")
except AgentBusyError as exc:
    print("BUSY", str(exc), flush=True)
release.set()
print("IDLE", agent.wait_for_idle(10), flush=True)
print("NEXT", agent.prompt("again").text, flush=True)
"""

NOTICE = ("piagent: aborting; waiting for tool 'slow' to return (it does not watch its "
          "signal). Interrupt again to stop waiting; the agent stays busy until it returns "
          "— agent.wait_for_idle().")
SECOND = ("SECOND Stopped waiting for the aborted run: tool 'slow' has not returned (it does "
          "not watch its signal). The agent stays busy until it returns; "
          "agent.wait_for_idle() waits for it.")
BUSY = ("BUSY Agent is already processing a prompt. Use steer() or follow_up() to queue "
        "messages, or wait for completion. The previous run was aborted, but tool 'slow' has "
        "not returned yet (it does not watch its signal); the agent is busy until it does. "
        "agent.wait_for_idle() waits for it.")


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", ["prompt", "wait"])
def test_a_tool_that_ignores_its_signal_is_named_and_a_second_interrupt_says_how_to_wait(
        mode: str) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               PYTHONIOENCODING="utf-8")
    with subprocess.Popen([sys.executable, "-c", CHILD, mode], cwd=REPO, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          encoding="utf-8") as proc:
        assert proc.stdout is not None and proc.stderr is not None
        try:
            assert proc.stdout.readline().strip() == "STARTED"
            proc.send_signal(signal.SIGINT)
            assert proc.stdout.readline().strip() == "POLITE False"

            assert proc.stdout.readline().strip() == "STARTED"
            sent = time.monotonic()
            proc.send_signal(signal.SIGINT)
            notice = proc.stderr.readline().strip()
            waited = time.monotonic() - sent
            assert notice == NOTICE  # the first line on stderr: the polite tool said nothing
            assert waited < 1.0, waited

            proc.send_signal(signal.SIGINT)
            assert proc.stdout.readline().strip() == SECOND
            assert proc.stdout.readline().strip() == BUSY
            assert proc.stdout.readline().strip() == "IDLE True"
            assert proc.stdout.readline().strip() == "NEXT second answer"
            assert proc.wait(30) == 0
            assert proc.stderr.read() == ""  # the notice was said once
        finally:
            if proc.poll() is None:
                proc.kill()
