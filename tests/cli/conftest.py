"""Helpers for the command-line tests: a fake TTY and a scripted typist for ``chat_loop``.

* ``Tty``: a ``StringIO`` that says it is a terminal.
* ``Typist(agent, steps)``: ``chat_loop``'s input function; each step is a line, an
  exception to raise, or a callable giving one (``when_idle``/``after`` wait, bounded, first).
* ``chat(agent, steps)``: run the chat over ``steps``; returns ``(exit code, output)``.
"""

from __future__ import annotations

import io

from piagent.cli import EventPrinter, chat_loop
from tests.conftest import WAIT


class Tty(io.StringIO):
    def isatty(self):
        return True


class Typist:
    """Feeds chat_loop one line at a time; each step may first wait for a condition."""

    def __init__(self, agent, steps):
        self.agent = agent
        self.steps = list(steps)

    def __call__(self):
        if not self.steps:
            raise EOFError
        step = self.steps.pop(0)
        if callable(step):
            step = step()
        if isinstance(step, BaseException):
            raise step
        return step


def when_idle(agent, then):
    """A step that waits (bounded) for the agent to be idle, then types ``then``."""
    def step():
        assert agent.wait_for_idle(WAIT)
        return then
    return step


def after(event, then):
    """A step that waits (bounded) for ``event``, then types ``then``."""
    def step():
        assert event.wait(WAIT)
        return then
    return step


def chat(agent, steps):
    """Run ``chat_loop`` over ``steps`` with an ``EventPrinter``: (exit code, output)."""
    out = io.StringIO()
    printer = EventPrinter(out)
    agent.subscribe(printer)
    code = chat_loop(agent, Typist(agent, steps), printer)
    return code, out.getvalue()
