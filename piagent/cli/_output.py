"""How the CLI prints: ``Style`` (ANSI colour, only on a TTY) and ``EventPrinter`` (the
listener that turns agent events into text; the demo and the chat share it)."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TextIO

from ..errors import PiAgentError

if TYPE_CHECKING:
    from ..abort import AbortSignal
    from ..models import Model

__all__ = ["AnswerPrinter", "CliError", "EventPrinter", "Style", "cli_words", "server_words", "words_for"]


class CliError(PiAgentError):
    """A problem to report in one line, in the CLI's words, with exit code 2."""


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


def _dollars(amount: float) -> str:
    """``$0.0021``; an amount under a hundredth of a cent shows six places (``$0.000004``)."""
    return f"${amount:.4f}" if amount >= 0.0001 else f"${amount:.6f}"


# Library error texts name Python parameters; on the terminal the same thing is a flag.
_CLI_WORDS = (
    ("Check base_url.", "Check --base-url."),
    ("Pass StreamOptions(api_key=...) or", "Pass --api-key-env NAME or"),
)


def cli_words(text: str) -> str:
    """``text`` (an error or notice from the library) in the CLI's terms: flags, not
    Python parameter names."""
    for python_words, flag_words in _CLI_WORDS:
        text = text.replace(python_words, flag_words)
    return text


def server_words(label: str, url: str) -> Callable[[str], str]:
    """``cli_words`` for a model served at ``url`` (``--base-url``) that is not the
    provider's own server: the library names it by the provider (``label``: "OpenAI API
    error", "Could not connect to local at ..."); on the terminal it is the server at
    ``url``, since that is what answered."""
    server = f"the server at {url}"
    rules = []
    for name in (f"{label} Responses", label):  # the Responses API's label first
        rules += [
            (f"{name} API error (", f"The server at {url} answered with an error ("),
            (f"Could not connect to {name} at ", "Could not connect to the server at "),
            (f"{name} request failed (", "The request failed ("),  # the reason names it
            (f"The connection to {name} broke", f"The connection to {server} broke"),
            (f"The {name} stream", f"The stream from {server}"),
            (f"{name} stream error", f"The server at {url} sent a stream error"),
            (f"{name} answered", f"The server at {url} answered"),
            (f"{name} sent", f"The server at {url} sent"),
        ]

    rules.append(("The provider had a server error", "The server had an error"))

    def words(text: str) -> str:
        for library_words, terminal_words in rules:
            text = text.replace(library_words, terminal_words)
        return cli_words(text)

    return words


# providers whose name is the name of the server program (at any address)
_SERVER_PROVIDERS = frozenset({"ollama", "vllm", "llamacpp", "lmstudio"})


def words_for(model: Model, base_url: str | None) -> Callable[[str], str]:
    """How the chat words library texts: with ``--base-url`` another server than the
    provider's answers, so errors name it by its address, not as "OpenAI API error"."""
    if not base_url or model.provider in _SERVER_PROVIDERS:
        return cli_words
    from ..providers.kit import provider_label

    return server_words(provider_label(model.provider), model.base_url)


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
                 show_thinking: bool = True, show_usage: bool = False,
                 show_waiting: bool = False) -> None:
        self.out = out
        self.style = style or Style()
        self.echo_prompt = echo_prompt
        self.show_thinking = show_thinking
        self.show_usage = show_usage
        self.show_errors = True  # an error stop as an "error: ..." line
        self.words: Callable[[str], str] = cli_words  # library texts in the terminal's terms
        self.lock = threading.RLock()  # guards the terminal: one writer at a time
        self._at_line_start = True
        self._seen_assistant = False
        self._streamed_text = False
        self._tool_numbers: dict[str, int] = {}  # this batch's call ids -> display numbers
        self._tool_count = 0
        self._batch_started: float | None = None  # monotonic time of the batch's first start
        self._batch_durations: list[int] = []
        self.show_waiting = show_waiting
        self._waiting = ""  # the waiting line on screen, erased by the first token
        self._pending_usage: str | None = None  # this turn's usage, printed after its tools
        self.session_input = 0  # tokens and dollars over every assistant message shown
        self.session_output = 0
        self.session_cost = 0.0

    def session_summary(self) -> str | None:
        """``session: N tokens in, M out, $X`` over everything printed, or ``None``."""
        if not (self.session_input or self.session_output):
            return None
        cost = f", {_dollars(self.session_cost)}" if self.session_cost else ""
        return f"session: {self.session_input} tokens in, {self.session_output} out{cost}"

    def _clear_waiting(self) -> None:
        if self._waiting:
            width = len(self._waiting)
            self._waiting = ""
            self.write("\r" + " " * width + "\r")
            self._at_line_start = True

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
        self._pending_usage = None
        if self.show_waiting:
            self._end_line()
            self._waiting = "(waiting for the model...)"
            self.write(self.style.dim(self._waiting))

    def _on_turn_end(self, event: Any) -> None:
        self._clear_waiting()
        self._batch_summary()
        if self._pending_usage is not None:
            self.line(self.style.dim(self._pending_usage))
            self._pending_usage = None

    def _batch_summary(self) -> None:
        durations = self._batch_durations
        if self._batch_started is None or len(durations) < 2:
            return
        wall = (time.monotonic() - self._batch_started) * 1000
        if sum(durations) > wall:  # worth saying only when running them together saved time
            self.line(self.style.dim(
                f"  ({len(durations)} tools in {wall:.0f} ms; one after another they would "
                f"take {sum(durations)} ms)"))

    def _on_compaction_start(self, event: Any) -> None:
        self._clear_waiting()
        self._end_line()
        why = {"threshold": "it nears the model's context window",
               "overflow": "the model refused it as too long",
               "manual": "you asked"}.get(event.reason, event.reason)
        self.line(self.style.dim(f"(compacting the conversation: {why}...)"))

    def _on_compaction_end(self, event: Any) -> None:
        if event.summary is not None:
            self.line(self.style.dim(
                f"(conversation compacted: about {event.tokens_before:,} -> "
                f"{event.tokens_after:,} tokens; the full history stays in the session)"))
        elif not event.aborted:
            self.line(self.style.dim(f"(compaction failed: {event.error_message})"))

    def _on_message_start(self, event: Any) -> None:
        if getattr(event.message, "role", None) == "assistant":
            self._seen_assistant = True
            self._streamed_text = False

    def _on_message_update(self, event: Any) -> None:
        self._clear_waiting()
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
            self._clear_waiting()
            text = _content_text(message.content)
            if text and not self._streamed_text:  # a stream function that sent no deltas
                self.line(style.assistant("assistant> ") + text)
            self._end_line()
            if message.stop_reason == "error" and self.show_errors:
                self.line(style.error("error: ") + self.words(message.error_message or "unknown error"))
            elif message.stop_reason == "aborted":
                self.line(style.error("aborted: ") + (message.error_message or "Operation aborted"))
            elif message.stop_reason == "length":
                self.line(style.dim("(the response hit the output token limit)"))
            usage = message.usage
            self.session_input += usage.input
            self.session_output += usage.output
            self.session_cost += usage.cost.total
            if self.show_usage and (usage.input or usage.output):
                cost = f", {_dollars(usage.cost.total)}" if usage.cost.total else ""
                # after this turn's tool lines (at turn_end), not between the reply and them
                self._pending_usage = f"({usage.input} tokens in, {usage.output} out{cost})"
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




class AnswerPrinter(EventPrinter):
    """One-shot output: the model's answer alone on ``answer`` (stdout), every other line
    (tools, usage, system notes, thinking) on ``out`` (stderr). A failed run's error is left
    to the caller, which says it once."""

    def __init__(self, answer: TextIO, notes: TextIO, *, style: Style | None = None) -> None:
        super().__init__(notes, style=style, show_usage=True)
        self.answer = answer
        self.show_errors = False  # the caller says a failed run's error, once
        self._answer_open = False  # answer text written since its last newline

    def _write_answer(self, text: str) -> None:
        if text:
            self.answer.write(text)
            self.answer.flush()
            self._answer_open = not text.endswith("\n")

    def _on_message_update(self, event: Any) -> None:
        update = event.assistant_message_event
        kind = update.type
        if kind == "text_start":
            self._streamed_text = True
            if self._answer_open:  # a later text block: its own line
                self._write_answer("\n")
        elif kind == "text_delta":
            self._write_answer(update.delta)
        elif kind != "text_end":
            super()._on_message_update(event)

    def _on_message_end(self, event: Any) -> None:
        message = event.message
        if getattr(message, "role", None) == "assistant":
            text = _content_text(message.content)
            if text and not self._streamed_text:  # a stream function that sent no deltas
                self._write_answer(text)
            self._streamed_text = True
        super()._on_message_end(event)

    def _on_agent_end(self, event: Any) -> None:
        if self._answer_open:
            self._write_answer("\n")
