"""``MessageBuilder``: the partial assistant message and pi's event sequence for it.

An adapter reports what arrives on the wire (a text block opened, a delta, a tool call's
argument fragment, usage, the end); the builder keeps the partial message and pushes the
matching ``start``/``*_start``/``*_delta``/``*_end``/``done``/``error`` events.
"""

from __future__ import annotations

import re
import threading
import weakref
from typing import Any, TypeVar

from ..messages import (
    AssistantMessage,
    AssistantMessageDiagnostic,
    StopReason,
    TextContent,
    ThinkingContent,
    ToolCall,
    sanitize_surrogates,
    sanitize_surrogates_in,
)
from ..models import Model, calculate_cost
from ..stream import (
    AssistantMessageEventStream,
    DoneEvent,
    ErrorEvent,
    StartEvent,
    TextDeltaEvent,
    TextEndEvent,
    TextStartEvent,
    ThinkingDeltaEvent,
    ThinkingEndEvent,
    ThinkingStartEvent,
    ToolCallDeltaEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
    parse_streaming_json,
)
from ._streamed_args import PartialToolCall, StreamedArguments, settle

__all__ = ["MessageBuilder"]


_Block = TypeVar("_Block", TextContent, ThinkingContent, ToolCall)

# A surrogate code point; in argument JSON also an escape of one (\\uD800 to \\uDFFF); the
# start of an escape at the end of a fragment (the rest may come with the next one); and the
# three at once, the one search an argument fragment gets on the usual path
_SURROGATE = re.compile("[\ud800-\udfff]")
_ESCAPED_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]|[\ud800-\udfff]")
_OPEN_ESCAPE = re.compile(r"\\(?:u[dD]?)?\Z")
_WATCH = re.compile(r"\\u[dD][89a-fA-F]|[\ud800-\udfff]|\\(?:u[dD]?)?\Z")


class MessageBuilder:
    """Builds the partial ``AssistantMessage`` and pushes pi's event sequence for it.

    ``partial`` in every event is the one mutable message being built (as in pi's real
    adapters); the final ``done``/``error`` event carries the same object. Block indexes
    are positions in ``message.content``.

    Thread safety: called by the worker thread; ``fail`` may also be called from the
    aborting thread. ``_lock`` serialises them, and once the stream has ended every
    further call is a no-op, so a late worker never changes a delivered final message.

    The builder holds its stream weakly: the stream owns the adapter's generator, which
    owns the builder, so a strong reference back would be a cycle, and a stream its
    consumer abandoned would keep its socket open until the cyclic garbage collector ran.
    Held weakly, the stream dies with its last reference; closing its generator closes
    the response. Events for a stream nobody holds any more are dropped.
    """

    # block index → a high surrogate that ended the last delta and the length of the block's
    # text when it was held back: the next delta may bring its low half (left here when none
    # does: it is never sent, so an unpaired one at the end is dropped)
    _held: dict[int, tuple[str, int]] | None = None
    # tool-call indexes whose argument text holds a surrogate or an escape of one: their
    # parsed arguments are cleaned of unpaired surrogates
    _suspect: frozenset[int] = frozenset()
    # tool-call indexes whose next fragment is checked with the text before it: the suspect
    # ones, and those whose text ends where an escape may begin
    _watch: frozenset[int] = frozenset()

    def __init__(self, model: Model, stream: AssistantMessageEventStream, *, api: str) -> None:
        self.model = model
        self.message = AssistantMessage(api=api, provider=model.provider, model=model.id)
        self._stream_ref = weakref.ref(stream)
        # guards _ended, _started, _open, _held, _suspect, _watch and message mutation
        self._lock = threading.Lock()
        self._ended = False
        self._started = False
        self._open: dict[int, str] = {}  # index → "text" | "thinking" | "toolCall", in order
        # tool-call index → its argument text and streaming parser, until the call ends
        self._calls: dict[int, StreamedArguments] = {}
        # tool-call index → the complete JSON text its ``arguments`` were parsed from (that
        # very string object: replace_tool_arguments), so it is not parsed again at the end
        self._parsed: dict[int, str] = {}
        # _held, _suspect and _watch: the class's empty defaults until a surrogate comes

    @property
    def ended(self) -> bool:
        """True once ``finish`` or ``fail`` has delivered the final event."""
        return self._ended

    def start(self) -> None:
        """Push ``start`` (once)."""
        with self._lock:
            if self._ended or self._started:
                return
            self._started = True
            self._push(StartEvent(self.message))

    def block(self, index: int) -> Any:
        """The content block at ``index``."""
        return self.message.content[index]

    def is_open(self, index: int) -> bool:
        """True while the block at ``index`` has had no ``*_end``."""
        return index in self._open

    def _block(self, index: int, kind: type[_Block]) -> _Block:
        """The content block at ``index``, which the adapter says is a ``kind``."""
        block = self.message.content[index]
        if type(block) is not kind and not isinstance(block, kind):
            msg = (f"Block {index} of the message is a {type(block).__name__}, not a "
                   f"{kind.__name__}: the adapter used the index of another block.")
            raise TypeError(msg)
        return block

    # text and thinking ------------------------------------------------------------------

    def open_text(self, signature: str | None = None) -> int:
        """Append a text block and push ``text_start``; returns its index."""
        return self._open_block(TextContent(text="", text_signature=signature), "text")

    def add_text(self, index: int, delta: str) -> None:
        """Append to a text block and push ``text_delta``."""
        with self._lock:
            if self._ended:
                return
            block = self.message.content[index]
            if type(block) is not TextContent:
                block = self._block(index, TextContent)  # a subclass, or the adapter's mistake
            if not delta.isascii() and _SURROGATE.search(delta):
                delta = self._whole(index, delta, len(block.text))
            block.text += delta
            stream = self._stream_ref()  # _push, inline: this runs per chunk
            if stream is not None:
                event = TextDeltaEvent(index, delta, self.message)
                handed = stream.step_events
                if handed is not None:
                    handed.append(event)
                else:
                    stream.push(event)

    def open_thinking(self, signature: str | None = None, *, redacted: bool = False) -> int:
        """Append a thinking block and push ``thinking_start``; returns its index."""
        block = ThinkingContent(thinking="", thinking_signature=signature, redacted=redacted)
        return self._open_block(block, "thinking")

    def add_thinking(self, index: int, delta: str) -> None:
        """Append to a thinking block and push ``thinking_delta``."""
        with self._lock:
            if self._ended:
                return
            block = self._block(index, ThinkingContent)
            if not delta.isascii() and _SURROGATE.search(delta):
                delta = self._whole(index, delta, len(block.thinking))
            block.thinking += delta
            self._push(ThinkingDeltaEvent(index, delta, self.message))

    # tool calls ---------------------------------------------------------------------------

    def open_tool_call(self, call_id: str, name: str, arguments_json: str = "") -> int:
        """Append a tool call (arguments parsed from ``arguments_json``); ``toolcall_start``."""
        call = StreamedArguments()
        block = PartialToolCall(id=call_id, name=name, arguments={})
        watched = bool(arguments_json) and _WATCH.search(arguments_json) is not None
        if arguments_json:
            if watched:
                arguments_json = sanitize_surrogates(arguments_json)
            call.add(arguments_json)
        block.show(call)
        index = self._open_block(block, "toolCall")
        with self._lock:
            content = self.message.content
            if index < len(content) and content[index] is block:
                self._calls[index] = call
                if watched and self._watched(index, arguments_json, 0):
                    block.mark_clean(call)
        return index

    def add_tool_arguments(self, index: int, fragment: str) -> None:
        """Append argument JSON, read it into the partial ``arguments``; ``toolcall_delta``.

        The partial arguments are pi-ai 1.6.1's (its streaming parser), built when someone
        reads them: each fragment is read once, and not at all when nobody looks before
        the call ends (then its text is parsed once). An empty fragment changes nothing.
        """
        with self._lock:
            if self._ended:
                return
            block = self.message.content[index]
            if type(block) is not PartialToolCall:
                block = self._block(index, ToolCall)  # closed, or the adapter's mistake
            if fragment:
                call = self._calls.get(index)
                if call is None:
                    call = self._calls[index] = StreamedArguments()
                if _WATCH.search(fragment) or (self._watch and index in self._watch):
                    fragment = self._add_watched_arguments(block, index, call, fragment)
                else:
                    call.add(fragment)
                if type(block) is PartialToolCall:
                    if block.__dict__["_src"] is not call:
                        block.show(call)
                else:  # a plain block (the adapter's mistake): built now
                    block.arguments = call.partial()
            stream = self._stream_ref()  # _push, inline: this runs per chunk
            if stream is not None:
                event = ToolCallDeltaEvent(index, fragment, self.message)
                handed = stream.step_events
                if handed is not None:
                    handed.append(event)
                else:
                    stream.push(event)

    def _add_watched_arguments(self, block: ToolCall, index: int, call: StreamedArguments,
                               fragment: str) -> str:
        """``add_tool_arguments`` where the fragment holds a surrogate, an escape of one or
        the start of an escape, or where the call is watched: a high surrogate at the
        fragment's end is held back (``_whole``). Returns the fragment the event carries.
        ``_lock`` held."""
        if not fragment.isascii() and _SURROGATE.search(fragment):
            fragment = self._whole(index, fragment, call.length)
        tail = call.tail()
        call.add(fragment)
        if self._watched(index, tail + fragment, len(tail)):
            if type(block) is PartialToolCall:
                block.mark_clean(call)
            else:
                call.clean = True
        return fragment

    def _watched(self, index: int, text: str, new: int) -> bool:
        """Whether the call's arguments are to be cleaned of unpaired surrogates: its text
        (``text``, new from ``new`` on) holds a surrogate or an escape of one (an escape may
        straddle two fragments: the search starts 5 characters before ``new``; a negative
        start is 0); and whether the next fragment is watched. ``_lock`` held."""
        if index in self._suspect or _ESCAPED_SURROGATE.search(text, new - 5):
            self._suspect = self._suspect | {index}
            self._watch = self._watch | {index}
            return True
        if _OPEN_ESCAPE.search(text, len(text) - 3):
            self._watch = self._watch | {index}
        elif index in self._watch:
            self._watch = self._watch - {index}
        return False

    def replace_tool_arguments(self, index: int, arguments_json: str) -> None:
        """Set the complete argument JSON (a provider's final ``.done``); no event."""
        with self._lock:
            if self._ended:
                return
            block = self._block(index, ToolCall)
            arguments_json = sanitize_surrogates(arguments_json)
            call = self._calls[index] = StreamedArguments()
            call.add(arguments_json)
            self._parsed[index] = arguments_json
            arguments = parse_streaming_json(arguments_json)
            if self._watched(index, arguments_json, 0):
                arguments = sanitize_surrogates_in(arguments)
            block.arguments = arguments

    def set_signature(self, index: int, signature: str, *, append: bool = False) -> None:
        """Set (or extend) the provider signature of the block at ``index``; no event.

        Text: ``text_signature``; thinking: ``thinking_signature``; tool call:
        ``thought_signature``.
        """
        with self._lock:
            if self._ended:
                return
            block = self.message.content[index]
            attr = ("text_signature" if isinstance(block, TextContent) else
                    "thinking_signature" if isinstance(block, ThinkingContent) else
                    "thought_signature")
            if append:
                signature = (getattr(block, attr) or "") + signature
            setattr(block, attr, signature)

    def tool_arguments_json(self, index: int) -> str:
        """The argument JSON accumulated so far for the tool call at ``index``."""
        call = self._calls.get(index)
        return call.text() if call is not None else ""

    # ends ---------------------------------------------------------------------------------

    def close_block(self, index: int) -> None:
        """Push the ``*_end`` of an open block (a tool call's arguments are re-parsed)."""
        with self._lock:
            if self._ended:
                return
            kind = self._open.pop(index, None)
            block = self.message.content[index]
            if kind is None:
                return
            if isinstance(block, TextContent):
                self._push(TextEndEvent(index, block.text, self.message))
            elif isinstance(block, ThinkingContent):
                self._push(ThinkingEndEvent(index, block.thinking, self.message))
            elif isinstance(block, ToolCall):
                call = self._calls.pop(index, None)
                text = call.text() if call is not None else ""
                if self._parsed.pop(index, None) is text or (
                        type(block) is PartialToolCall and block.assigned):
                    settle(block)  # replaced, or set by the caller: final already
                else:  # the one full parse of the complete text
                    arguments = parse_streaming_json(text)
                    if index in self._suspect or _ESCAPED_SURROGATE.search(text):
                        arguments = sanitize_surrogates_in(arguments)
                    settle(block, arguments)
                self._push(ToolCallEndEvent(index, block, self.message))

    def close_open_blocks(self) -> None:
        """``close_block`` for every block still open, in index order."""
        for index in sorted(self._open):
            self.close_block(index)

    def set_usage(self, *, input: int, output: int, cache_read: int = 0, cache_write: int = 0,
                  total_tokens: int | None = None, billed: float | None = None,
                  reasoning: int = 0, cache_write_1h: int | None = None) -> None:
        """Replace the usage counters and recompute the cost from the model's prices;
        ``billed``: the total the provider reports it charged, which replaces the estimated
        ``cost.total`` (``cost.total_from_provider``); ``reasoning``: the reasoning tokens
        within ``output`` (0: not reported); ``cache_write_1h``: the part of ``cache_write``
        written with 1-hour retention (priced at twice the input price)."""
        with self._lock:
            if self._ended:
                return
            usage = self.message.usage
            usage.input, usage.output = input, output
            usage.cache_read, usage.cache_write = cache_read, cache_write
            usage.reasoning = reasoning or None
            if cache_write_1h is not None:
                usage.cache_write_1h = cache_write_1h
            usage.total_tokens = (total_tokens if total_tokens is not None
                                  else input + output + cache_read + cache_write)
            calculate_cost(self.model, usage)
            if billed is not None:
                usage.cost.total = billed
                usage.cost.total_from_provider = True
            elif usage.cost.total_from_provider:
                usage.cost.total_from_provider = False

    def set_response(self, *, response_id: str | None = None, model: str | None = None,
                     raw_stop_reason: str | None = None) -> None:
        """Record the provider's id of the response, the model it says answered (kept only
        when it is not the requested model's id) and its stop reason before mapping."""
        with self._lock:
            if self._ended:
                return
            message = self.message
            if response_id:
                message.response_id = response_id
            if model and model != message.model:
                message.response_model = model
            if raw_stop_reason:
                message.raw_stop_reason = raw_stop_reason

    def add_diagnostic(self, diagnostic: AssistantMessageDiagnostic) -> None:
        """Note something the adapter did while answering (a fallback, a recovered error)
        in ``message.diagnostics``."""
        with self._lock:
            if self._ended:
                return
            message = self.message
            message.diagnostics = [*(message.diagnostics or ()), diagnostic]

    def finish(self, stop_reason: StopReason) -> None:
        """Push ``done`` with ``stop_reason`` ("stop", "length" or "toolUse")."""
        with self._lock:
            if self._ended:
                return
            self._ended = True
            self.message.stop_reason = stop_reason
            self._settle_calls()
            self._push(DoneEvent(stop_reason, self.message), end=True)

    def fail(self, error_message: str, *, aborted: bool = False) -> None:
        """Push ``error`` (partial content and usage kept); no-op once ended."""
        with self._lock:
            if self._ended:
                return
            self._ended = True
            reason: StopReason = "aborted" if aborted else "error"
            self.message.stop_reason = reason
            self.message.error_message = error_message
            self._open.clear()
            self._settle_calls()
            self._push(ErrorEvent(reason, self.message), end=True)

    def _settle_calls(self) -> None:
        """Calls still streaming keep the partial arguments they show. ``_lock`` held."""
        content = self.message.content
        for index in self._calls:
            settle(content[index])
        self._calls.clear()
        self._parsed.clear()

    def _whole(self, index: int, delta: str, length: int) -> str:
        """``delta`` (which holds a surrogate) made whole: a high surrogate held back from
        the previous delta of the block (``length``: the block's text is as long as when it
        was held) goes in front, pairs side by side become their character, a high surrogate
        at the end is held back for the next delta, and the rest of the unpaired ones are
        removed (pi-ai's ``sanitizeSurrogates``). ``_lock`` held."""
        if self._held is None:
            self._held = {}
        held = self._held.pop(index, None)
        if held is not None and held[1] == length:
            delta = held[0] + delta
        last = delta[-1]
        if "\ud800" <= last <= "\udbff":
            delta = sanitize_surrogates(delta[:-1])
            self._held[index] = (last, length + len(delta))
            return delta
        return sanitize_surrogates(delta)

    def _push(self, event: Any, *, end: bool = False) -> None:
        """Push to the stream if anyone still holds it (``_lock`` held). On the thread
        running a pulled step (this builder's worker), an event that does not end the
        stream goes into the step's ``step_events``: no lock, no queue."""
        stream = self._stream_ref()
        if stream is None:
            return
        if end:
            stream.push(event)
            stream.end()
            return
        handed = stream.step_events
        if handed is not None:
            handed.append(event)
        else:
            stream.push(event)

    def _open_block(self, block: Any, kind: str) -> int:
        with self._lock:
            content = self.message.content
            if self._ended:
                return len(content)  # a late worker: nothing is delivered any more
            index = len(content)
            content.append(block)
            self._open[index] = kind
            if kind == "text":
                self._push(TextStartEvent(index, self.message))
            elif kind == "thinking":
                self._push(ThinkingStartEvent(index, self.message))
            else:
                self._push(ToolCallStartEvent(index, self.message))
            return index
