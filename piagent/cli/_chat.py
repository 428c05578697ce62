"""``piagent chat``: the REPL over an Agent, and how a model is chosen from the flags."""

from __future__ import annotations

import argparse
import logging
import os
import sqlite3
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from ..agent import Agent
    from ..loop import Limits
    from ..models import Model

from ..compaction import Compaction
from ..mcp import MCPError, refresh_tools
from ..sessions import SessionCorruptError, SQLiteStore
from ._approve import Asker, chat_tools, settle, terminal_ask, undecided
from ._mcp import close_all, first_duplicate, open_mcp_servers
from ._output import AnswerPrinter, CliError, EventPrinter, Style, words_for
from ._sessions import (
    attach_session,
    check_session_name,
    conversation_length,
    open_session_store,
    sessions_db_path,
)

__all__ = ["CliError", "chat_loop", "cmd_chat"]

_EXIT_USAGE = 2

_CHAT_HELP = """\
Type a message and press Enter. While the agent works, what you type becomes a steering
message (delivered after the current tool batch, or when the model's current reply ends
if no tool runs). Ctrl-C aborts the current run.
Commands: /follow-up TEXT   queue TEXT for when the agent would stop
          /clear            drop queued steering and follow-up messages (they outlive
                            a Ctrl-C abort and would otherwise go with your next message)
          /compact [FOCUS]  summarise the older part of the conversation now (it is
                            also done by itself before the model's window fills)
          /reset            forget the conversation (keeps the system prompt and tools;
                            with --session it clears the stored session too)
          /help             this text
          /quit             leave (also Ctrl-D)"""


def chat_loop(agent: Agent, read_line: Callable[[], str], printer: EventPrinter, *,
              wait_each: bool = False) -> int:
    """The chat REPL: ``read_line`` blocks on the main thread while runs go on in the
    background. It returns the exit code; ``EOFError`` from ``read_line`` ends the chat.

    ``wait_each`` finishes each run before reading the next line (for piped input, where
    the next line is not something typed while the agent worked).
    """
    from ..errors import AgentBusyError

    style = printer.style
    say = printer.line
    asker = Asker(agent, printer)  # tool calls that wait for approval: y/N (cli/_approve.py)

    def prompt_marker(event: Any, signal: Any) -> None:
        if event.type == "agent_end":
            if asker.ask_at_end():
                return
            if agent.has_queued_messages():  # typed just after the loop's last poll
                say(style.dim("(queued messages will go with your next message; /clear drops "
                              "them)"))
            printer.write(style.user("you> "))

    def start(text: str) -> None:
        try:
            agent.prompt(text, block=False)
        except AgentBusyError:  # a run started between the check and now
            agent.steer(text)
            return
        if wait_each:
            try:
                while not agent.wait_for_idle(0.05):
                    pass
            except KeyboardInterrupt:
                agent.abort("Aborted by the user (Ctrl-C)")
                agent.wait_for_idle(30)

    unsubscribe_asker = agent.subscribe(asker.listener)
    unsubscribe = agent.subscribe(prompt_marker)
    if not asker.ask():
        printer.write(style.user("you> "))
    try:
        while True:
            try:
                line = read_line()
            except EOFError:
                printer.write("\n")
                agent.wait_for_idle(30)
                return 0
            except KeyboardInterrupt:
                if agent.state.is_streaming:
                    agent.abort("Aborted by the user (Ctrl-C)")
                    agent.wait_for_idle(30)
                else:
                    say(style.dim("(Ctrl-C aborts a run; type /quit to leave)"))
                    if not asker.ask():
                        printer.write(style.user("you> "))
                continue
            text = line.strip()
            if not text.startswith("/") and asker.waiting():
                if asker.answer(text) is not None and wait_each:
                    agent.wait_for_idle(30)  # piped input: the run that goes on, then the next line
                continue
            busy = agent.state.is_streaming
            if not text:
                if not busy:
                    printer.write(style.user("you> "))
                continue
            if text.startswith("/"):
                command, _, rest = text.partition(" ")
                rest = rest.strip()
                if command in ("/quit", "/exit"):
                    if busy:
                        agent.abort("The user quit")
                        agent.wait_for_idle(30)
                    return 0
                if command == "/help":
                    say(_CHAT_HELP)
                elif command == "/clear":
                    dropped = agent.take_queued_messages(lambda message: True)
                    say(style.dim(f"(dropped {len(dropped)} queued message"
                                  f"{'' if len(dropped) == 1 else 's'})"))
                elif command == "/reset":
                    if busy:
                        agent.abort("Reset by the user")
                        agent.wait_for_idle(30)
                    try:
                        agent.reset()
                    except Exception as exc:  # noqa: BLE001 - the session store refused it
                        say(style.error(f"could not clear session {agent.session_id}: "
                                        f"{type(exc).__name__}: {exc} (the conversation "
                                        "goes on unchanged)"))
                    else:
                        kept = f"; session {agent.session_id} cleared too" \
                            if agent.store is not None else ""
                        say(style.dim(f"(conversation cleared{kept})"))
                elif command == "/compact":
                    _compact(agent, rest, busy, say, style)
                elif command in ("/follow-up", "/followup"):
                    if not rest:
                        say(style.dim("usage: /follow-up TEXT"))
                    elif busy:
                        agent.follow_up(rest)
                        say(style.dim("(follow-up queued: sent when the agent would stop)"))
                        continue
                    else:
                        start(rest)
                        continue
                else:
                    say(style.dim(f"unknown command {command}; type /help"))
                if not agent.state.is_streaming and not asker.ask():
                    printer.write(style.user("you> "))
                continue
            if busy:
                agent.steer(text)
                when = ("after the current tool batch" if agent.state.pending_tool_calls
                        else "when the model's current reply ends")
                say(style.dim(f"(steering message queued: delivered {when})"))
                continue
            start(text)
    finally:
        unsubscribe()
        unsubscribe_asker()


def _compact(agent: Agent, focus: str, busy: bool, say: Callable[[str], None],
             style: Style) -> None:
    """``/compact [FOCUS]``: a compaction now; the printer shows its notes."""
    if busy:
        say(style.dim("(wait for the agent to finish, or Ctrl-C, before /compact)"))
        return
    try:
        agent.compact(focus or None)
    except Exception as exc:  # noqa: BLE001 - CompactionError, or the agent got busy
        say(style.dim(f"(nothing compacted: {exc})"))


def _missing_key(provider: str, explicit: str | None) -> list[str] | None:
    """The environment variables to set when ``provider`` needs a key and has none."""
    from ..providers.kit import key_env_vars, resolve_api_key

    names = key_env_vars(provider)
    if not names or resolve_api_key(provider, explicit):
        return None
    return list(names)


OLLAMA_BASE_URL = "http://localhost:11434/v1"
"""Where ``--model ollama/MODEL`` goes without ``--base-url``: Ollama's default address
(``resolve_model``'s, as ``Agent(model="ollama/MODEL")``)."""


def _resolve_model(spec: str, base_url: str | None, api: str) -> Model:
    provider, sep, model_id = spec.partition("/")
    if not sep or not provider or not model_id:
        msg = f"--model must be PROVIDER/MODEL (for example openai/gpt-4o-mini), got {spec!r}."
        raise CliError(msg)
    from ..providers import resolve_model

    try:
        # a catalogued model keeps its prices (and limits) at another address; --api names
        # the wire (default openai-completions, what local servers speak)
        with warnings.catch_warnings():  # --base-url said it: no Python warning on screen
            warnings.simplefilter("ignore", UserWarning)
            return resolve_model(spec, base_url=base_url or None,
                                 api=api if base_url or provider == "ollama" else None)
    except ValueError as exc:
        raise CliError(str(exc).replace("get_model(base_url=...)", "--base-url")) from None
    except LookupError:
        raise CliError(_unknown_model_text(provider, model_id)) from None


def _unknown_model_text(provider: str, model_id: str) -> str:
    """The unknown-model error in the CLI's words (flags, commands), said once."""
    from ..providers import get_models, get_providers

    local = ("; for a model on another server add --base-url URL (an OpenAI-compatible "
             "server), or use ollama/MODEL for Ollama")
    providers = get_providers()
    if provider not in providers:
        return (f"--model {provider}/{model_id}: the catalogue has no provider {provider!r} "
                f"(it has {', '.join(providers)}){local}.")
    known = ", ".join(m.id for m in get_models(provider))
    return (f"--model {provider}/{model_id}: {provider} has no model {model_id!r} in the "
            f"catalogue (it has {known}; see 'piagent models {provider}'){local}.")


DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant."

def cmd_chat(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from ..agent import Agent

    try:
        if args.session is not None:
            check_session_name(args.session)
        model = _resolve_model(args.model, args.base_url, args.api)
    except CliError as exc:
        err.write(f"piagent chat: {exc}\n")
        return _EXIT_USAGE
    limits = _limits(args)
    unreachable = None if limits is None else limits.unreachable_cost(model)
    if unreachable is not None:
        err.write(f"piagent chat: --max-cost: {unreachable.split(': ', 1)[1]}; limit "
                  f"requests instead (--max-requests N).\n")
        return _EXIT_USAGE
    api_key = os.environ.get(args.api_key_env) if args.api_key_env else None
    local = bool(args.base_url) or model.provider == "ollama"
    missing = None if local else _missing_key(model.provider, api_key)
    if missing:
        err.write(f"piagent chat: no API key for {model.provider}: set "
                  f"{' or '.join(missing)} in the environment (or pass --api-key-env NAME).\n")
        return _EXIT_USAGE
    tools = []
    if args.tools:
        tools = chat_tools(Path.cwd())
    try:
        servers = open_mcp_servers(args.mcp)
    except CliError as exc:
        err.write(f"piagent chat: {exc}\n")
        return 1
    try:
        mcp_tools = [tool for server in servers for tool in server.tools()]
    except MCPError as exc:
        close_all(servers)
        err.write(f"piagent chat: --mcp: {exc}\n")
        return 1
    clash = first_duplicate([t.name for t in (*tools, *mcp_tools)])
    if clash is not None:
        close_all(servers)
        err.write(f"piagent chat: --mcp: two tools are named {clash!r}; give each server "
                  f"once, or leave --tools out.\n")
        return _EXIT_USAGE
    tools = [*tools, *mcp_tools]
    question = " ".join(args.question)
    if question == "-":
        question = sys.stdin.read().strip()
        if not question:
            err.write("piagent chat: '-' reads the question from stdin, which was empty.\n")
            return _EXIT_USAGE
    store = None
    if args.session is not None:
        try:
            path, default = sessions_db_path(args.sessions_db)
            store = open_session_store(path, default=default)
        except CliError as exc:
            err.write(f"piagent chat: {exc}\n")
            return _EXIT_USAGE
    agent = Agent(system_prompt=args.system if args.system is not None else DEFAULT_SYSTEM_PROMPT,
                  model=model, tools=tools,
                  thinking_level=args.thinking, temperature=args.temperature,
                  max_tokens=args.max_tokens,
                  get_api_key=(lambda provider: api_key) if api_key else None,
                  prepare_next_turn=refresh_tools(*servers) if servers else None,
                  limits=limits,
                  compaction=None if args.no_compaction else Compaction())
    interactive = _isatty(sys.stdin) and _isatty(out)
    printer: EventPrinter
    if question:  # one-shot: stdout is the answer alone, everything else goes to stderr
        printer = AnswerPrinter(out, err, style=Style.for_stream(err))
    else:
        printer = EventPrinter(out, style=Style.for_stream(out), show_usage=True,
                               show_waiting=interactive)
    printer.words = words_for(model, args.base_url)
    agent.subscribe(printer)
    hide_notices = show_notices(printer)
    try:
        return _chat_or_ask(agent, args, question, printer, out, err, store)
    except SessionCorruptError as exc:  # only loading the session can raise it
        if store is None:
            raise
        err.write(f"piagent chat: --session {args.session}: {exc} (in {store.path}; "
                  f"'piagent sessions --delete {args.session}' removes the session).\n")
        return 1
    except sqlite3.Error as exc:  # e.g. the file stayed locked past the busy timeout
        if store is None:
            raise
        err.write(f"piagent chat: --session {args.session}: the sessions database "
                  f"{store.path} failed: {type(exc).__name__}: {exc}\n")
        return 1
    finally:
        hide_notices()
        close_all(servers)
        if store is not None:
            store.close()


def _join_session(agent: Agent, store: SQLiteStore, args: argparse.Namespace,
                  printer: EventPrinter, *, recap: bool) -> None:
    """Keep the chat in ``store`` as ``--session NAME``; a run the last process left in the
    middle of a tool batch is finished first (``agent.resume()``)."""
    name = args.session
    unfinished = attach_session(agent, store, name, printer, recap=recap)
    if args.system is not None and conversation_length(agent.state.messages) \
            and agent.state.system_prompt != args.system:
        printer.line(printer.style.dim(f"(--system is ignored: session {name} keeps the system "
                                       "prompt it started with)"))
    if unfinished and not undecided(agent):  # waiting calls: the chat asks about them
        try:
            agent.resume()
        except KeyboardInterrupt:
            printer.line(printer.style.dim("(finishing the last run was interrupted)"))


def _chat_or_ask(agent: Agent, args: argparse.Namespace, question: str,
                 printer: EventPrinter, out: TextIO, err: TextIO,
                 store: SQLiteStore | None = None) -> int:
    style = printer.style
    model = agent.state.model
    assert model is not None  # cmd_chat resolved it
    tools = agent.state.tools
    if question:
        if store is not None:  # the session's notes go to stderr: stdout is the answer
            notes = EventPrinter(err, style=Style.for_stream(err))
            notes.words = printer.words
            _join_session(agent, store, args, notes, recap=False)
        return _one_shot(agent, question, printer, err,
                         ask=terminal_ask(err) if _isatty(sys.stdin) else None)
    where = f" at {model.base_url}" if model.base_url != _catalogue_url(model) else ""
    names = f" (tools: {', '.join(t.name for t in tools)})" if tools else ""
    printer.line(style.dim(f"piagent chat with {model.provider}/{model.id}{where}{names}"
                           ". /help for commands, /quit to leave."))
    if store is not None:
        _join_session(agent, store, args, printer, recap=True)
    save_history = _readline_history() if _isatty(sys.stdin) else None

    def read_line() -> str:
        return input()

    try:
        code = chat_loop(agent, read_line, printer, wait_each=not _isatty(sys.stdin))
    finally:
        if save_history is not None:
            save_history()
        summary = printer.session_summary()
        if summary:
            printer.line(style.dim(summary))
    if code == 0 and not _isatty(sys.stdin) and agent.state.error_message:
        return 1  # piped input: a failed last run fails the command, as in the one-shot form
    return code


class _NoticeHandler(logging.Handler):
    """Warnings from piagent's loggers (a tool still running after an abort) on the terminal."""

    def __init__(self, printer: EventPrinter) -> None:
        super().__init__(logging.WARNING)
        self._printer = printer

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "piagent_run_failed", False):
            return  # the chat says a failed run itself
        try:
            self._printer.line(self._printer.style.dim(f"({self._printer.words(record.getMessage())})"))
        except Exception:  # noqa: BLE001 - the logging module's own contract
            self.handleError(record)


def show_notices(printer: EventPrinter) -> Callable[[], None]:
    """Print piagent's warnings through ``printer`` until the returned function is called."""
    handler = _NoticeHandler(printer)
    logger = logging.getLogger("piagent")
    logger.addHandler(handler)
    return lambda: logger.removeHandler(handler)


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def _catalogue_url(model: Model) -> str | None:
    from ..providers import get_model

    try:
        return get_model(model.provider, model.id).base_url
    except LookupError:
        return None


def _limits(args: argparse.Namespace) -> Limits | None:
    """``--max-requests`` / ``--max-cost`` as the limits of every run, or ``None``."""
    requests, cost = getattr(args, "max_requests", None), getattr(args, "max_cost", None)
    if requests is None and cost is None:
        return None
    from ..loop import Limits

    return Limits(max_requests=requests, max_cost=cost)


def _one_shot(agent: Agent, question: str, printer: EventPrinter, err: TextIO,
              ask: Callable[[str], str] | None = None) -> int:
    """``piagent chat -m MODEL "question"``: one run, then exit 1 if it failed. A call that
    needs approval is asked about with ``ask`` (``None``: denied, saying why)."""
    try:
        run = settle(agent, agent.prompt(question), ask)
    except KeyboardInterrupt:
        err.write("piagent chat: interrupted\n")
        return 130
    if run.error_message:
        err.write(f"piagent chat: the run failed: {printer.words(run.error_message or '')}\n")
        return 1
    return 0


def history_path() -> Path:
    """Where ``piagent chat`` keeps its line history: ``$PIAGENT_HISTORY``, else
    ``~/.piagent_history``."""
    return Path(os.environ.get("PIAGENT_HISTORY") or Path.home() / ".piagent_history")


def _readline_history() -> Callable[[], None] | None:
    """Line editing and history for ``input()``; returns the function that saves it."""
    try:
        import readline
    except ImportError:  # e.g. Windows without pyreadline: plain input() still works
        return None
    path = history_path()
    try:
        readline.read_history_file(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        sys.stderr.write(f"piagent chat: cannot read the history file {path}: {exc}\n")
    readline.set_history_length(1000)

    def save() -> None:
        try:
            readline.write_history_file(path)
        except OSError as exc:
            sys.stderr.write(f"piagent chat: cannot save the history to {path}: {exc}\n")

    return save


