"""The ``piagent`` command: ``demo`` (offline), ``chat`` (a real provider) and ``proxy``.

Output is plain text that reads well in a dumb terminal, a log file and a notebook; colour
is added only on a TTY, and never with ``NO_COLOR`` set or ``TERM=dumb``. ``EventPrinter``
is the listener that turns agent events into that text; the demo and the chat share it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from .._version import __version__

if TYPE_CHECKING:
    from ..abort import AbortSignal
    from ..agent import Agent
    from ..models import Model

__all__ = ["EventPrinter", "Style", "chat_loop", "main"]

_EXIT_USAGE = 2


# --- output ------------------------------------------------------------------------------


class Style:
    """ANSI styling that is a no-op when disabled."""

    _CODES = {"bold": "1", "dim": "2", "red": "31", "green": "32", "yellow": "33",
              "blue": "34", "magenta": "35", "cyan": "36"}

    def __init__(self, enabled: bool = False) -> None:
        self.enabled = enabled

    @classmethod
    def for_stream(cls, stream: TextIO) -> Style:
        """Colour only on a TTY, and not with ``NO_COLOR`` set or ``TERM=dumb``."""
        isatty = getattr(stream, "isatty", None)
        enabled = bool(isatty and isatty())
        if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
            enabled = False
        return cls(enabled)

    def paint(self, text: str, *names: str) -> str:
        if not self.enabled or not text:
            return text
        codes = ";".join(self._CODES[name] for name in names)
        return f"\x1b[{codes}m{text}\x1b[0m"

    def dim(self, text: str) -> str:
        return self.paint(text, "dim")

    def user(self, text: str) -> str:
        return self.paint(text, "bold", "green")

    def assistant(self, text: str) -> str:
        return self.paint(text, "bold", "cyan")

    def tool(self, text: str) -> str:
        return self.paint(text, "yellow")

    def error(self, text: str) -> str:
        return self.paint(text, "bold", "red")


def _one_line(text: str, limit: int = 100) -> str:
    lines = text.strip().splitlines()
    first = lines[0] if lines else ""
    more = len(lines) - 1
    if len(first) > limit:
        first = first[: limit - 3] + "..."
    return first + (f" (+{more} more line{'s' if more != 1 else ''})" if more > 0 else "")


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = []
    for block in content or ():
        if getattr(block, "type", None) == "text":
            parts.append(block.text)
        elif getattr(block, "type", None) == "image":
            parts.append("[image]")
    return "".join(parts)


def _format_args(args: Any, limit: int = 120) -> str:
    if not isinstance(args, dict):
        text = json.dumps(args, ensure_ascii=False, default=str)
    else:
        text = ", ".join(f"{key}={json.dumps(value, ensure_ascii=False, default=str)}"
                         for key, value in args.items())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class EventPrinter:
    """A listener that prints a run as plain text: streamed text, tool calls, progress.

    ``echo_prompt`` also prints the run's own prompt messages (the chat does not, since
    the user just typed them); messages that arrive later in a run (steering and follow-up
    messages) are always printed, where the loop inserts them.

    Thread safety: events arrive on the run's worker thread, one at a time; other threads
    that write to the same stream should hold ``lock``.
    """

    def __init__(self, out: TextIO, *, style: Style | None = None, echo_prompt: bool = False,
                 show_thinking: bool = True, show_usage: bool = False) -> None:
        self.out = out
        self.style = style or Style()
        self.echo_prompt = echo_prompt
        self.show_thinking = show_thinking
        self.show_usage = show_usage
        self.lock = threading.RLock()  # guards the terminal: one writer at a time
        self._at_line_start = True
        self._seen_assistant = False
        self._streamed_text = False
        self._tool_numbers: dict[str, int] = {}  # this batch's call ids -> display numbers
        self._tool_count = 0
        self._batch_started: float | None = None  # monotonic time of the batch's first start
        self._batch_durations: list[int] = []

    # plumbing

    def write(self, text: str) -> None:
        """Write and flush, remembering whether the cursor is at the start of a line."""
        if not text:
            return
        with self.lock:
            self.out.write(text)
            self.out.flush()
            self._at_line_start = text.endswith("\n")

    def line(self, text: str) -> None:
        """Write ``text`` on a line of its own."""
        with self.lock:
            if not self._at_line_start:
                self.write("\n")
            self.write(text + "\n")

    def _end_line(self) -> None:
        if not self._at_line_start:
            self.write("\n")

    # the listener

    def __call__(self, event: Any, signal: AbortSignal | None = None) -> None:
        handler = getattr(self, "_on_" + event.type, None)
        if handler is not None:
            with self.lock:
                handler(event)

    def _on_agent_start(self, event: Any) -> None:
        self._seen_assistant = False
        self._tool_count = 0

    def _on_turn_start(self, event: Any) -> None:
        self._tool_numbers = {}  # call ids need only be unique within one message
        self._batch_started = None
        self._batch_durations = []

    def _on_turn_end(self, event: Any) -> None:
        durations = self._batch_durations
        if self._batch_started is None or len(durations) < 2:
            return
        wall = (time.monotonic() - self._batch_started) * 1000
        if sum(durations) > wall:  # worth saying only when running them together saved time
            self.line(self.style.dim(
                f"  ({len(durations)} tools in {wall:.0f} ms; one after another they would "
                f"take {sum(durations)} ms)"))

    def _on_message_start(self, event: Any) -> None:
        if getattr(event.message, "role", None) == "assistant":
            self._seen_assistant = True
            self._streamed_text = False

    def _on_message_update(self, event: Any) -> None:
        update = event.assistant_message_event
        kind = update.type
        style = self.style
        if kind == "text_start":
            self._end_line()
            self.write(style.assistant("assistant> "))
            self._streamed_text = True
        elif kind == "text_delta":
            self.write(update.delta)
        elif kind == "text_end":
            self._end_line()
        elif kind == "thinking_start" and self.show_thinking:
            self._end_line()
            self.write(style.dim("(thinking) "))
        elif kind == "thinking_delta" and self.show_thinking:
            self.write(style.dim(update.delta))
        elif kind == "thinking_end" and self.show_thinking:
            self._end_line()

    def _on_message_end(self, event: Any) -> None:
        message = event.message
        role = getattr(message, "role", None)
        style = self.style
        if role == "user":
            if self.echo_prompt or self._seen_assistant:
                label = "you> " if not self._seen_assistant else "you (queued, delivered now)> "
                self.line(style.user(label) + _content_text(message.content))
        elif role == "assistant":
            text = _content_text(message.content)
            if text and not self._streamed_text:  # a stream function that sent no deltas
                self.line(style.assistant("assistant> ") + text)
            self._end_line()
            if message.stop_reason == "error":
                self.line(style.error("error: ") + (message.error_message or "unknown error"))
            elif message.stop_reason == "aborted":
                self.line(style.error("aborted: ") + (message.error_message or "Operation aborted"))
            elif message.stop_reason == "length":
                self.line(style.dim("(the response hit the output token limit)"))
            usage = message.usage
            if self.show_usage and (usage.input or usage.output):
                cost = f", ${usage.cost.total:.4f}" if usage.cost.total else ""
                self.line(style.dim(f"({usage.input} tokens in, {usage.output} out{cost})"))
        elif role == "system":
            parts = []
            if message.tools_added:
                parts.append("tools added: " + ", ".join(t.name for t in message.tools_added))
            if message.tools_removed:
                parts.append("tools removed: " + ", ".join(message.tools_removed))
            if message.content:
                parts.append("instructions: " + _one_line(message.content, 60))
            if message.sections:
                parts.append("sections: " + ", ".join(message.sections))
            if parts:
                self.line(style.dim("[system] " + "; ".join(parts)))
        elif role not in ("toolResult", None):
            self.line(style.dim(f"[{role} message]"))

    def _number(self, tool_call_id: str) -> int:
        if tool_call_id not in self._tool_numbers:
            self._tool_count += 1
            self._tool_numbers[tool_call_id] = self._tool_count
        return self._tool_numbers[tool_call_id]

    def _on_tool_execution_start(self, event: Any) -> None:
        if self._batch_started is None:
            self._batch_started = time.monotonic()
        number = self._number(event.tool_call_id)
        self.line(self.style.tool(f"  [{number}] {event.tool_name}({_format_args(event.args)})"))

    def _on_tool_execution_update(self, event: Any) -> None:
        number = self._number(event.tool_call_id)
        partial = event.partial_result
        content = getattr(partial, "content", None)
        text = _content_text(content) if content is not None else str(partial)
        self.line(self.style.dim(f"  [{number}] {event.tool_name}: {_one_line(text, 80)}"))

    def _on_tool_execution_end(self, event: Any) -> None:
        if event.duration_ms is not None:
            self._batch_durations.append(event.duration_ms)
        number = self._number(event.tool_call_id)
        result = event.result
        text = _one_line(_content_text(getattr(result, "content", None)), 80)
        took = f" in {event.duration_ms} ms" if event.duration_ms is not None else ""
        if event.is_error:
            self.line(self.style.error(f"  [{number}] {event.tool_name} failed{took}: ") + text)
        else:
            self.line(self.style.tool(f"  [{number}] {event.tool_name} done{took}")
                      + (f": {text}" if text else ""))


# --- chat --------------------------------------------------------------------------------

_CHAT_HELP = """\
Type a message and press Enter. While the agent works, what you type becomes a steering
message (delivered after the current tool batch). Ctrl-C aborts the current run.
Commands: /follow-up TEXT   queue TEXT for when the agent would stop
          /reset            forget the conversation (keeps the system prompt and tools)
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

    def prompt_marker(event: Any, signal: Any) -> None:
        if event.type == "agent_end":
            if agent.has_queued_messages():  # typed just after the loop's last poll
                say(style.dim("(queued messages will go with your next message)"))
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

    unsubscribe = agent.subscribe(prompt_marker)
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
                    printer.write(style.user("you> "))
                continue
            text = line.strip()
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
                elif command == "/reset":
                    if busy:
                        agent.abort("Reset by the user")
                        agent.wait_for_idle(30)
                    agent.reset()
                    say(style.dim("(conversation cleared)"))
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
                if not agent.state.is_streaming:
                    printer.write(style.user("you> "))
                continue
            if busy:
                agent.steer(text)
                say(style.dim("(steering message queued: delivered after the current tool batch)"))
                continue
            start(text)
    finally:
        unsubscribe()


def _missing_key(provider: str, explicit: str | None) -> list[str] | None:
    """The environment variables to set when ``provider`` needs a key and has none."""
    from ..providers._keys import ENV_VARS, resolve_api_key

    names = ENV_VARS.get(provider)
    if not names or resolve_api_key(provider, explicit):
        return None
    return list(names)


class _CliError(Exception):
    """A problem to report in one line, with exit code 2."""


def _resolve_model(spec: str, base_url: str | None, api: str) -> Model:
    provider, sep, model_id = spec.partition("/")
    if not sep or not provider or not model_id:
        msg = f"--model must be PROVIDER/MODEL (for example openai/gpt-4o-mini), got {spec!r}."
        raise _CliError(msg)
    if base_url:
        from ..models import Model

        return Model(id=model_id, api=api, provider=provider, base_url=base_url)
    from ..providers import get_model

    try:
        return get_model(provider, model_id)
    except LookupError as exc:
        detail = exc.args[0] if exc.args else str(exc)
        msg = (f"Unknown model {spec!r}. {detail} For an OpenAI-compatible server, pass "
               "--base-url URL (for example http://localhost:11434/v1).")
        raise _CliError(msg) from None


def _cmd_chat(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from ..agent import Agent

    try:
        model = _resolve_model(args.model, args.base_url, args.api)
    except _CliError as exc:
        err.write(f"piagent chat: {exc}\n")
        return _EXIT_USAGE
    api_key = os.environ.get(args.api_key_env) if args.api_key_env else None
    missing = None if args.base_url else _missing_key(model.provider, api_key)
    if missing:
        err.write(f"piagent chat: no API key for {model.provider}: set "
                  f"{' or '.join(missing)} in the environment (or pass --api-key-env NAME).\n")
        return _EXIT_USAGE
    tools = []
    if args.tools:
        from ._demo import make_demo_tools

        tools = make_demo_tools(Path.cwd())
    agent = Agent(system_prompt=args.system, model=model, tools=tools,
                  get_api_key=(lambda provider: api_key) if api_key else None)
    style = Style.for_stream(out)
    printer = EventPrinter(out, style=style, show_usage=True)
    agent.subscribe(printer)
    where = f" at {model.base_url}" if args.base_url else ""
    printer.line(style.dim(f"piagent chat with {model.provider}/{model.id}{where}"
                           f"{' (tools: read_file, list_folder, calculator, current_time)' if tools else ''}"
                           ". /help for commands, /quit to leave."))

    def read_line() -> str:
        return input()

    return chat_loop(agent, read_line, printer, wait_each=not sys.stdin.isatty())


# --- proxy -------------------------------------------------------------------------------


def _cmd_proxy(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    token = args.token or os.environ.get("PIAGENT_PROXY_TOKEN")
    if not token:
        err.write("piagent proxy: pass --token T (or set PIAGENT_PROXY_TOKEN); clients send it "
                  "as 'Authorization: Bearer T'.\n")
        return _EXIT_USAGE
    from ..proxy import ProxyApp, serve_proxy

    def ready(url: str) -> None:
        out.write(f"piagent proxy on {url}/api/stream (clients send 'Authorization: Bearer "
                  "<token>'; provider keys come from this process's environment; Ctrl-C "
                  "stops it)\n")
        out.flush()

    app = ProxyApp(auth_tokens=[token])
    try:
        serve_proxy(app, args.host, args.port, ready=ready)
    except KeyboardInterrupt:
        out.write("\nproxy stopped\n")
    except OSError as exc:
        err.write(f"piagent proxy: cannot serve on {args.host}:{args.port}: {exc.strerror or exc}\n")
        return 1
    return 0


# --- demo --------------------------------------------------------------------------------


def _cmd_demo(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from ._demo import run_demo

    delay = 0.0 if args.fast else args.delay
    pause = 0.0 if args.fast else 0.08
    return run_demo(out, delay=delay, pause=pause, color=Style.for_stream(out).enabled)


# --- entry point ---------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="piagent", description="A synchronous, thread-based agent loop for LLMs.")
    parser.add_argument("--version", action="version", version=f"piagent {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    demo = commands.add_parser(
        "demo", help="run an agent offline on a scripted model, with real tools",
        description="Run a real Agent with real tools on a scripted model: no network, no key.")
    demo.add_argument("--delay", type=float, default=0.02, metavar="SECONDS",
                      help="pause between streamed chunks (default 0.02)")
    demo.add_argument("--fast", action="store_true", help="no pauses at all")

    chat = commands.add_parser(
        "chat", help="chat with a real model (key from the environment)",
        description="A REPL against a real provider. Text typed while the agent works "
                    "becomes a steering message; Ctrl-C aborts the current run.")
    chat.add_argument("--model", required=True, metavar="PROVIDER/MODEL",
                      help="for example openai/gpt-4o-mini or anthropic/claude-sonnet-4-5")
    chat.add_argument("--base-url", metavar="URL",
                      help="an OpenAI-compatible server (Ollama, vLLM, llama.cpp, ...)")
    chat.add_argument("--api", default="openai-completions",
                      help="the wire API for --base-url (default openai-completions)")
    chat.add_argument("--api-key-env", metavar="NAME",
                      help="read the API key from this environment variable")
    chat.add_argument("--tools", action="store_true",
                      help="give the model read_file, list_folder (current folder), "
                           "calculator and current_time")
    chat.add_argument("--system", default="You are a helpful assistant.", metavar="TEXT",
                      help="the system prompt")

    proxy = commands.add_parser(
        "proxy", help="serve the provider proxy (keys stay on this machine)",
        description="Serve piagent.proxy.ProxyApp with the standard library's WSGI server.")
    proxy.add_argument("--port", type=int, default=8787, help="default 8787; 0 picks a free port")
    proxy.add_argument("--host", default="127.0.0.1")
    proxy.add_argument("--token", help="the bearer token clients must send "
                                       "(default: $PIAGENT_PROXY_TOKEN)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``piagent`` command line; returns the exit code."""
    parser = _parser()
    args = parser.parse_args(argv)
    out, err = sys.stdout, sys.stderr
    handlers = {"demo": _cmd_demo, "chat": _cmd_chat, "proxy": _cmd_proxy}
    if args.command is None:
        parser.print_help(out)
        return 0
    try:
        return handlers[args.command](args, out, err)
    except KeyboardInterrupt:
        err.write("\ninterrupted\n")
        return 130
    except BrokenPipeError:  # e.g. `piagent demo | head`: stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
