"""Named conversations on the terminal: ``piagent chat --session NAME`` and ``piagent sessions``.

Every session lives in one ``SQLiteStore`` file: ``--sessions-db PATH``, else
``$PIAGENT_SESSIONS_DB``, else ``sessions.db`` in the user data folder (``user_data_dir``).
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from ..messages import AgentMessage, AssistantMessage, SystemMessage, UserMessage
from ..sessions import MAX_SESSION_ID_LENGTH, SessionCorruptError, SQLiteStore
from ._output import CliError, EventPrinter, Style

if TYPE_CHECKING:
    from ..agent import Agent

__all__ = [
    "attach_session",
    "check_session_name",
    "cmd_sessions",
    "conversation_length",
    "keep_session_tools",
    "open_session_store",
    "sessions_db_path",
    "user_data_dir",
]

SESSIONS_DB_ENV = "PIAGENT_SESSIONS_DB"


def user_data_dir() -> Path:
    """piagent's folder for user data: ``$XDG_DATA_HOME/piagent`` (default
    ``~/.local/share/piagent``) on Linux and other Unixes, ``~/Library/Application
    Support/piagent`` on macOS, ``%APPDATA%\\piagent`` on Windows."""
    if sys.platform == "win32":
        appdata = os.environ.get("APPDATA")
        base = Path(appdata) if appdata else Path.home() / "AppData" / "Roaming"
    elif sys.platform == "darwin":
        base = Path.home() / "Library" / "Application Support"
    else:
        xdg = os.environ.get("XDG_DATA_HOME")
        # the XDG spec: a relative value is invalid and is ignored
        base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".local" / "share"
    return base / "piagent"


def sessions_db_path(flag: str | None) -> tuple[Path, bool]:
    """The sessions file and whether it is the default one (``--sessions-db`` first, then
    ``$PIAGENT_SESSIONS_DB``, then the user data folder)."""
    if flag:
        return Path(flag).expanduser(), False
    env = os.environ.get(SESSIONS_DB_ENV)
    if env:
        return Path(env).expanduser(), False
    return user_data_dir() / "sessions.db", True


def check_session_name(name: str, flag: str = "--session") -> str:
    """``name`` when a store accepts it; otherwise a ``CliError`` in the CLI's words
    (``flag`` is the option that gave it)."""
    if not name:
        msg = (f"{flag} NAME: the name is empty; give 1 to {MAX_SESSION_ID_LENGTH} "
               f"characters, for example {flag} work.")
        raise CliError(msg)
    if len(name) > MAX_SESSION_ID_LENGTH:
        msg = (f"{flag} NAME: the name has {len(name)} characters; the most is "
               f"{MAX_SESSION_ID_LENGTH}.")
        raise CliError(msg)
    return name


def open_session_store(path: Path, *, default: bool) -> SQLiteStore:
    """The store at ``path``, checked by reading it once. The default file's folder is
    created; a folder named by ``--sessions-db`` or the environment must exist."""
    where = "" if default else f" (from --sessions-db or ${SESSIONS_DB_ENV})"
    if default:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            msg = f"cannot create the folder for the sessions database {path}: {exc}"
            raise CliError(msg) from exc
    elif not path.parent.is_dir():
        msg = f"the sessions database {path}{where}: the folder {path.parent} does not exist."
        raise CliError(msg)
    store = SQLiteStore(path)
    try:
        store.session_ids()
    except sqlite3.Error as exc:
        store.close()
        msg = f"cannot use the sessions database {path}{where}: {exc}"
        raise CliError(msg) from exc
    return store


def conversation_length(messages: list[AgentMessage]) -> int:
    """How many messages a session holds, system messages not counted."""
    return sum(1 for m in messages if not isinstance(m, SystemMessage))


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def _short(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _assistant_text(message: AssistantMessage) -> str:
    text = "".join(block.text for block in message.content if block.type == "text")
    if not text and message.tool_calls:
        text = "[called " + ", ".join(call.name for call in message.tool_calls) + "]"
    return text


def _last_exchange(messages: list[AgentMessage]) -> list[tuple[str, str]]:
    """The last user message and the assistant's last words after it, as (who, text)."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, UserMessage):
            shown = [("you", message.text)]
            answers = [m for m in messages[index + 1:] if isinstance(m, AssistantMessage)]
            if answers:
                last = answers[-1]
                text = _assistant_text(last)
                if last.stop_reason in ("error", "aborted"):
                    text = f"({last.stop_reason}: {last.error_message or 'no reply'})"
                shown.append(("assistant", text))
            return shown
    return []


def attach_session(agent: Agent, store: SQLiteStore, name: str, printer: EventPrinter, *,
                   recap: bool = True) -> bool:
    """Keep ``agent``'s conversation in ``store`` as ``name`` and say whether it is new or
    resumed (with the last exchange when ``recap``). True when the stored transcript ends
    in tool calls that never got results (the process stopped mid-batch)."""
    from ..loop import unanswered_tool_calls

    agent.attach_store(store, name)
    style = printer.style
    messages = agent.state.messages
    count = conversation_length(messages)
    if not count:
        printer.line(style.dim(f"(new session {name})"))
        return False
    printer.line(style.dim(f"(resumed session {name}: {_plural(count, 'message')})"))
    if recap:
        for who, text in _last_exchange(messages):  # dim: the past, not a live prompt
            printer.line(style.dim(f"{who}> {_short(printer.words(text), 200)}"))
    keep_session_tools(agent, name, printer)
    unfinished = unanswered_tool_calls(messages)
    if unfinished is None:
        return False
    calls = unfinished[1]
    if any(p.decision is None for p in agent.pending_approvals()):
        printer.line(style.dim("(the last run waits for your approval)"))
        return True
    printer.line(style.dim(f"(the last run stopped before {_plural(len(calls), 'tool call')} "
                           f"finished ({', '.join(call.name for call in calls)}); finishing "
                           "them now)"))
    return True


def keep_session_tools(agent: Agent, name: str, printer: EventPrinter) -> None:
    """A resumed session keeps the tools its transcript declares: the built-in ones it had
    come back without ``--tools`` (else the first run would write "tools removed" into its
    history); one this chat cannot give (an MCP server's without that ``--mcp``) is named."""
    from ..transcript import get_current_tools
    from ._approve import chat_tools

    have = {tool.name for tool in agent.state.tools}
    missing = [d.name for d in get_current_tools(agent.state.messages) if d.name not in have]
    if not missing:
        return
    built_in = {tool.name: tool for tool in chat_tools(Path.cwd())}
    kept = [built_in[tool_name] for tool_name in missing if tool_name in built_in]
    if kept:
        agent.state.tools = [*agent.state.tools, *kept]
        printer.line(printer.style.dim(f"(session {name} keeps its tools: "
                                       f"{', '.join(tool.name for tool in kept)})"))
    gone = [tool_name for tool_name in missing if tool_name not in built_in]
    if gone:
        printer.line(printer.style.dim(
            f"(session {name} had tools this chat does not give: {', '.join(gone)}; pass "
            "the same --mcp to keep them, or the model is told they are gone)"))


# --- piagent sessions ------------------------------------------------------------------------


def _when(epoch: float | None) -> str:
    if epoch is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(epoch))


def _first_user_text(messages: list[AgentMessage]) -> str:
    for message in messages:
        if isinstance(message, UserMessage):
            return message.text
    return ""


def cmd_sessions(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``piagent sessions [--delete NAME] [--sessions-db PATH]``."""
    path, default = sessions_db_path(args.sessions_db)
    style = Style.for_stream(out)
    try:
        if args.delete is not None:
            check_session_name(args.delete, "--delete")
        # listing or deleting never creates the file
        store = open_session_store(path, default=default) if path.exists() else None
    except CliError as exc:
        err.write(f"piagent sessions: {exc}\n")
        return 2
    if store is None:
        if args.delete is not None:
            err.write(f"piagent sessions: no session {args.delete!r} in {path}\n")
            return 1
        out.write(f"no sessions in {path}\n")
        return 0
    with store:
        names = store.session_ids()
        if args.delete is not None:
            if args.delete not in names:
                err.write(f"piagent sessions: no session {args.delete!r} in {path}\n")
                return 1
            store.delete(args.delete)
            out.write(f"deleted session {args.delete} from {path}\n")
            return 0
        if not names:
            out.write(f"no sessions in {path}\n")
            return 0
        rows = []
        for name in names:
            try:
                messages = store.load(name)
            except SessionCorruptError as exc:
                rows.append((name, "unreadable", _when(store.last_activity(name)),
                             f"({exc})"))
                continue
            first = _first_user_text(messages)
            rows.append((name, _plural(conversation_length(messages), "message"),
                         _when(store.last_activity(name)),
                         repr(_short(first, 50)) if first else ""))
    out.write(style.dim(f"{_plural(len(names), 'session')} in {path}") + "\n")
    width = max(len(row[0]) for row in rows)
    count_width = max(len(row[1]) for row in rows)
    for name, count, when, first in rows:
        out.write(f"{name:<{width}}  {count:>{count_width}}  {when}"
                  f"{'  ' + first if first else ''}\n")
    return 0
