"""``piagent chat`` asks before a tool call that needs approval runs (docs/approvals.md).

A call to a tool marked ``needs_approval`` (``write_file`` among ``--tools``) ends the run
waiting; the chat then asks ``Run write_file(path="a.txt", content="hi")? [y/N]`` for each
waiting call, and the answer to the last one lets the run go on: ``y`` approves, anything
else denies (the model reads that the user said no). ``Asker`` is the REPL's side of it;
``settle`` the one-shot form's, which asks on the terminal, or, with no terminal to ask on,
denies each call saying why.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from ..tools import AgentTool, tool
from ._demo import _inside, make_demo_tools
from ._output import _format_args

if TYPE_CHECKING:
    from ..agent import Agent, AgentRun
    from ..loop import PendingApproval
    from ._output import EventPrinter

__all__ = ["DENIED_REASON", "NO_TERMINAL_REASON", "Asker", "call_text", "chat_tools", "make_write_file_tool",
           "question", "settle", "terminal_ask", "undecided"]

_MAX_ARGS = 400  # characters of the arguments shown in the question
_YES = frozenset({"y", "yes"})
_SETTLE_S = 30.0  # how long an answer waits for the run that asked to settle

DENIED_REASON = "the user answered no at the terminal"
NO_TERMINAL_REASON = ("piagent chat had no terminal to ask on (a one-shot question with stdin "
                      "not a terminal), so the call was not approved")


def chat_tools(root: str | Path) -> list[AgentTool]:
    """The built-in tools ``--tools`` gives a chat (the demo's and ``write_file``), confined
    to ``root``; a resumed session gets back the ones it had from here too."""
    return [*make_demo_tools(root), make_write_file_tool(root)]


def make_write_file_tool(root: str | Path) -> AgentTool:
    """``write_file(path, content)`` confined to ``root``, marked ``needs_approval``: the
    chat asks before each call runs."""
    base = Path(root).resolve()

    @tool(needs_approval=True)
    def write_file(path: str, content: str) -> str:
        """Write a UTF-8 text file (replacing it if it exists). The user is asked first.

        Args:
            path: The file's path, relative to the working folder.
            content: The whole text of the file.
        """
        target = _inside(base, path)
        if not target.parent.is_dir():
            msg = f"No folder {str(Path(path).parent)!r} in {base} to write {path!r} in."
            raise FileNotFoundError(msg)
        target.write_text(content, encoding="utf-8")
        return f"Wrote {len(content.encode())} bytes to {path}."

    return write_file


def call_text(name: str, args: Any) -> str:
    """``name(key="value", ...)``, as the chat prints a call (long arguments cut at
    ``_MAX_ARGS`` characters): how a waiting call is shown."""
    return f"{name}({_format_args(args, _MAX_ARGS)})"


def question(pending: PendingApproval) -> str:
    """``Run <tool>(<args>)? [y/N] ``."""
    return f"Run {call_text(pending.tool_name, pending.args)}? [y/N] "


def undecided(agent: Agent) -> list[PendingApproval]:
    """The agent's waiting calls that have no decision yet."""
    return [p for p in agent.pending_approvals() if p.decision is None]


def _decide(agent: Agent, pending: PendingApproval, yes: bool,
            reason: str) -> AgentRun | None:
    if yes:
        return agent.approve(pending.call_key or pending.tool_call_id, digest=pending.digest)
    return agent.deny(pending.call_key or pending.tool_call_id, reason=reason,
                      digest=pending.digest)


class Asker:
    """The REPL's questions: when a run ends waiting, the chat asks about each waiting call
    and the next line typed answers it. Subscribe ``listener`` to the agent."""

    def __init__(self, agent: Agent, printer: EventPrinter) -> None:
        self.agent = agent
        self.printer = printer
        # the current run's approval requests (name, args); the Agent's worker thread only
        self._requested: list[tuple[str, Any]] = []
        self._asked = threading.Event()  # set by the worker when it asked at agent_end

    def listener(self, event: Any, signal: Any) -> None:
        if event.type == "tool_approval_request":
            self._requested.append((event.tool_name, event.args))

    def ask_at_end(self) -> bool:
        """At ``agent_end`` (on the worker): print the question for the run's first waiting
        call; False when the run asked for none."""
        if not self._requested:
            return False
        name, args = self._requested[0]
        self._requested.clear()
        self._write(f"Run {call_text(name, args)}? [y/N] ")
        self._asked.set()
        return True

    def ask(self) -> bool:
        """When no run is going: print the question for the next waiting call (a session
        that was left waiting); False when none waits."""
        pending = [] if self.agent.state.is_streaming else undecided(self.agent)
        if pending:
            self._write(question(pending[0]))
        return bool(pending)

    def _write(self, text: str) -> None:
        self.printer.write(self.printer.style.user(text))

    def waiting(self) -> bool:
        """Whether the line just typed answers a waiting call (it waits for the run that
        asked to settle, bounded, first)."""
        if self._asked.is_set():  # the question is out: the run that asked is settling
            self._asked.clear()
            self.agent.wait_for_idle(_SETTLE_S)
        elif self.agent.state.is_streaming:  # a line typed during a run steers it
            return False
        return bool(undecided(self.agent))

    def answer(self, text: str) -> AgentRun | None:
        """Decide the next waiting call: ``y``/``yes`` approves, anything else (Enter too)
        denies. The run that goes on when this was the last answer of the batch, else
        ``None`` (and the next question is printed)."""
        pending = undecided(self.agent)
        if not pending:
            return None
        yes = text.strip().lower() in _YES
        run = _decide(self.agent, pending[0], yes, DENIED_REASON)
        if run is None:
            self.ask()
        return run


def settle(agent: Agent, run: AgentRun, ask: Callable[[str], str] | None) -> AgentRun:
    """The one-shot form: while ``run`` ended waiting, decide each waiting call (``ask``
    shows the question and returns the answer; ``None``: no terminal, deny saying so) and
    wait for the run that goes on; the last run."""
    while run.waiting:
        next_run = None
        for pending in undecided(agent):
            if ask is None:
                next_run = _decide(agent, pending, False, NO_TERMINAL_REASON)
            else:
                yes = ask(question(pending)).strip().lower() in _YES
                next_run = _decide(agent, pending, yes, DENIED_REASON)
        if next_run is None:
            return run
        next_run.wait()
        run = next_run
    return run


def terminal_ask(err: TextIO) -> Callable[[str], str]:
    """How the one-shot form asks on the terminal: the question on ``err`` (stdout is the
    answer alone), the answer from stdin (end of input: no)."""

    def ask(text: str) -> str:
        err.write(text)
        err.flush()
        try:
            return input()
        except EOFError:
            return ""

    return ask
