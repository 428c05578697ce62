"""pi-ai's ``transformMessages``: make a transcript safe to replay to one model.

Every adapter runs it before converting messages to its wire format (docs/providers.md).
It does not know any wire format; the adapters own that. It also holds the small
system-message helpers the adapters share (leading prompt vs in-place updates).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from typing import Any

from ..messages import (
    AgentMessage,
    AssistantMessage,
    ImageContent,
    SystemMessage,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from ..models import Model
from ..transcript import (
    get_current_system_message,
    get_system_message_text,
    render_system_message_update,
)
from ._keep import ByOwner, cache_mode, caching, check_same
from ._snapshot import Snapshot
from ._wire import shared_prefix

__all__ = [
    "NO_RESULT_TEXT",
    "is_same_model",
    "leading_system_text",
    "system_update_text",
    "transform_messages",
]

NO_RESULT_TEXT = "No result provided"
_IMAGE_OMITTED = "(image omitted: model does not support images)"
_TOOL_IMAGE_OMITTED = "(tool image omitted: model does not support images)"


def is_same_model(message: AssistantMessage, model: Model) -> bool:
    """pi's "same model": same provider, api and model id."""
    return (message.provider == model.provider and message.api == model.api
            and message.model == model.id)


def transform_messages(messages: Sequence[AgentMessage], model: Model,
                       normalize_tool_call_id: Callable[[str], str] | None = None, *,
                       foreign_thinking_as_text: bool = False) -> list[AgentMessage]:
    """The transcript as ``model`` can take it (new objects only where something changed).

    * errored or aborted assistant messages are dropped (replaying half a response breaks
      most APIs; the model goes on from the last good state);
    * a tool call with no result before the next assistant, user or system message (or the
      end) gets a synthetic error result ``"No result provided"``;
    * from another model: thinking is dropped, as pi-ai's ``transformMessages`` drops it
      (``foreign_thinking_as_text=True`` keeps it as plain text, redacted and empty thinking
      still dropped), signatures are stripped and tool-call ids pass through
      ``normalize_tool_call_id`` (their results follow the rename);
    * images become a text placeholder when the model takes no image input.
    """
    images_ok = "image" in model.input
    renamed: dict[str, str] = {}
    out: list[AgentMessage] = []
    pending: list[ToolCall] = []  # tool calls still waiting for their results
    answered: set[str] = set()

    def flush_orphans() -> None:
        if not pending:
            answered.clear()  # a stray result must not answer a later call with its id
            return
        for call in pending:
            if call.id not in answered:
                out.append(ToolResultMessage(
                    tool_call_id=call.id, tool_name=call.name,
                    content=[TextContent(NO_RESULT_TEXT)], is_error=True,
                    timestamp=0))
        pending.clear()
        answered.clear()

    for message in messages:
        if isinstance(message, AssistantMessage):
            flush_orphans()
            if message.stop_reason in ("error", "aborted"):
                continue
            message = _transform_assistant(message, model, normalize_tool_call_id, renamed,
                                           foreign_thinking_as_text)
            for block in message.content:
                if isinstance(block, ToolCall):
                    pending.append(block)
            out.append(message)
        elif isinstance(message, ToolResultMessage):
            new_id = renamed.get(message.tool_call_id)
            if new_id is not None or (not images_ok and _has_image(message.content)):
                message = ToolResultMessage(
                    tool_call_id=new_id or message.tool_call_id, tool_name=message.tool_name,
                    content=message.content if images_ok else
                    _without_images(message.content, _TOOL_IMAGE_OMITTED),
                    details=message.details, usage=message.usage, is_error=message.is_error,
                    duration_ms=message.duration_ms, timestamp=message.timestamp)
            answered.add(message.tool_call_id)
            out.append(message)
        elif isinstance(message, (UserMessage, SystemMessage)):
            flush_orphans()
            if (isinstance(message, UserMessage) and not images_ok
                    and not isinstance(message.content, str) and _has_image(message.content)):
                message = UserMessage(content=_without_images(message.content, _IMAGE_OMITTED),
                                      timestamp=message.timestamp)
            out.append(message)
        else:
            out.append(message)  # an application message convert_to_llm let through
    flush_orphans()
    return out


def _transform_assistant(message: AssistantMessage, model: Model,
                         normalize: Callable[[str], str] | None,
                         renamed: dict[str, str], thinking_as_text: bool) -> AssistantMessage:
    if is_same_model(message, model):
        for b in message.content:  # the common case: nothing to drop, keep the object
            if isinstance(b, ThinkingContent) and not b.thinking and not b.thinking_signature:
                break
        else:
            return message
        content: list[Any] = [b for b in message.content if not (
            isinstance(b, ThinkingContent) and not b.thinking and not b.thinking_signature)]
    else:
        content = []
        for block in message.content:
            if isinstance(block, ThinkingContent):
                if block.redacted or not block.thinking.strip() or not thinking_as_text:
                    continue
                content.append(TextContent(block.thinking))
            elif isinstance(block, TextContent):
                content.append(TextContent(block.text) if block.text_signature else block)
            elif isinstance(block, ToolCall):
                new_id = normalize(block.id) if normalize is not None else block.id
                if new_id != block.id:
                    renamed[block.id] = new_id
                if new_id != block.id or block.thought_signature:
                    block = ToolCall(id=new_id, name=block.name, arguments=block.arguments)
                content.append(block)
            else:
                content.append(block)
    return AssistantMessage(content=content, api=message.api, provider=message.provider,
                            model=message.model, usage=message.usage,
                            stop_reason=message.stop_reason,
                            error_message=message.error_message,
                            thinking_level=message.thinking_level,
                            provider_thinking_level=message.provider_thinking_level,
                            timestamp=message.timestamp)


def _has_image(content: Sequence[Any]) -> bool:
    return any(isinstance(b, ImageContent) for b in content)


def _without_images(content: Sequence[Any], placeholder: str) -> list[Any]:
    out: list[Any] = []
    for block in content:
        if isinstance(block, ImageContent):
            if out and isinstance(out[-1], TextContent) and out[-1].text == placeholder:
                continue  # consecutive images collapse into one placeholder
            out.append(TextContent(placeholder))
        else:
            out.append(block)
    return out


# --- system messages --------------------------------------------------------------------------


def leading_system_text(messages: Sequence[AgentMessage]) -> tuple[str, int]:
    """The prompt of the leading run of system messages, and how many there are.

    Later system messages are mid-conversation updates (``system_update_text``).
    """
    count = 0
    for message in messages:
        if not isinstance(message, SystemMessage):
            break
        count += 1
    if count == 0:
        return "", 0
    if count == 1:
        first = messages[0]
        return get_system_message_text(first if isinstance(first, SystemMessage) else None), 1
    return get_system_message_text(get_current_system_message(messages[:count])), count


def leading_prompt(messages: Sequence[AgentMessage], model: Model,
                   normalize_tool_call_id: Callable[[str], str] | None = None) -> str:
    """The system prompt of the leading system messages, as ``leading_system_text`` gives it
    for the transformed transcript; only the head before the first segment is transformed."""
    end = next((i for i, m in enumerate(messages) if i and _starts_segment(m)), len(messages))
    return leading_system_text(transform_messages(messages[:end], model,
                                                  normalize_tool_call_id))[0]


def system_update_text(message: SystemMessage) -> str:
    """What a mid-conversation system message tells the model ("" for tool-only changes)."""
    text = message.text
    parts = [text] if text else []
    if message.sections:
        parts.append(render_system_message_update(message))
    return "\n\n".join(parts)


class WireCache:
    """Converted (wire) forms of single transcript messages, reused across requests.

    A conversation re-sends its whole history every turn; converting each old message again
    makes a turn's cost grow with the transcript. An entry is reused only for the same
    message object, converted for the same ``variant``, whose ``Snapshot`` shows it holding
    what it held then at every depth: an in-place edit anywhere converts it again. A
    message no snapshot covers (an application type) is converted every time. Entries go
    away with their messages. Cached values are shared: callers must not mutate them (the
    adapters never do; ``on_payload`` is given a copy of the body).

    Thread safety: every method may be called from any thread (``ByOwner``'s; an entry
    goes when its message is collected, without taking a lock, so a collection that starts
    while a thread is inside the cache cannot deadlock it).
    """

    def __init__(self) -> None:
        # message -> (the variant, its snapshot, its wire form)
        self._entries: ByOwner[tuple[Any, Snapshot, Any]] = ByOwner()

    def get(self, message: Any, variant: Any, build: Callable[[Any], Any]) -> Any:
        """``build(message)``, or the value built earlier for this message and ``variant``
        if the message is unchanged since."""
        mode = cache_mode()
        if mode == "off":
            return build(message)
        entry = self._entries.get(message)
        if entry is not None and entry[0] == variant and entry[1].unchanged((message,), 1):
            if mode == "check":
                check_same(entry[2], build(message), "WireCache")
            return entry[2]
        snapshot = Snapshot()  # taken first: an edit racing the build cannot be missed
        covered = snapshot.extend((message,))
        value = build(message)
        if covered:
            self._entries.put(message, (variant, snapshot, value))
        return value


class SegmentCache:
    """Converts a transcript, reusing the conversion of the prefix an earlier request shared.

    A conversation re-sends its whole history every turn. ``transform_messages`` followed by
    an adapter's conversion is a left-to-right fold that starts afresh at every user or
    sent assistant message (orphan tool calls are answered and tool-result images flushed
    there), so converting ``[:k]`` and ``[k:]`` separately at such a message gives the same
    wire messages as converting the whole. The cache keeps the last few conversions with
    the very message objects they came from; a request that starts with the same objects
    reuses the output up to the last segment start inside that prefix and converts only the
    rest: a turn then costs what its new messages cost. A kept message is reused only while
    the conversion's ``Snapshot`` shows it holding what it held, at every depth: an in-place
    edit of any message converts the transcript again from that message's segment on (the
    edit is in the very next request). A message no snapshot covers ends the reusable part.

    Thread safety: every method may be called from any thread (``ByOwner``'s). Bounded by
    the conversations alive: each conversation's latest conversion is found by its first
    message and kept until that message is collected (the entry holds the rest of the
    transcript, not the first message), so any number of conversations in flight each reuse
    their own; a request is checked against that one only. A first message that cannot be
    weakly referenced shares a fallback of the latest ``size`` conversations.
    """

    def __init__(self, size: int = 8) -> None:
        # first message -> its conversation's latest conversion
        self._kept: ByOwner[_Conversion] = ByOwner(size)

    def convert(self, messages: Sequence[AgentMessage], variant: Any,
                convert: Callable[[Sequence[AgentMessage]], list[Any]],
                renames: Callable[[Sequence[AgentMessage]], bool],
                convert_new: Callable[[Sequence[AgentMessage]], list[Any]] | None = None
                ) -> list[Any]:
        """``convert(messages)``, the shared prefix reused from an earlier request.

        ``convert(part)`` converts whole segments; ``renames(part)`` says whether a part
        renames tool-call ids (another model's calls), which later results follow: after
        such a part, and for a tool result whose call came earlier, the transcript is
        converted whole. ``convert_new`` (default ``convert``) converts the segments this
        cache keeps: their conversion is kept here, so it need not keep per-message ones
        (``WireCache``) too; ``convert`` is for what is converted whole.
        """
        mode = cache_mode()
        if not caching(mode, len(messages)):  # off, or a short transcript (_keep.py)
            return (convert_new or convert)(messages)
        messages = tuple(messages)
        starts: list[int] = [0]  # segment starts converted so far (the last: where to go on)
        ends: list[int] = [0]  # len(out) at each start
        flags: list[bool] = [False]  # at each start: did anything before rename call ids?
        out: list[Any] = []
        rest = messages[1:]  # what an entry keeps (its key, the first message, it does not)
        base = self._best_prefix(messages, rest, variant)
        if base is not None:
            starts, ends, flags, out, snapshot = base
        else:
            snapshot = Snapshot()
        convert_segment = convert if convert_new is None else convert_new
        # the new messages' snapshot before they are converted (an edit racing the
        # conversion then shows as a change next time)
        snapshot.extend(messages[len(snapshot):])
        position = starts[-1]
        count = len(messages)
        for index in range(position + 1, count + 1):
            if index < count and not _starts_segment(messages[index]):
                continue
            segment = messages[position:index]
            if flags[-1] or not _self_contained(segment):
                return convert(messages)  # this depends on what came before: all of it, whole
            out.extend(convert_segment(segment))
            starts.append(index)
            ends.append(len(out))
            flags.append(flags[-1] or renames(segment))
            position = index
        if mode == "check":
            check_same(out, (convert_new or convert)(messages), "SegmentCache")
        if messages:
            self._kept.put(messages[0], _Conversion(variant, rest, starts, ends, flags,
                                                    list(out), snapshot))
        return out

    def _best_prefix(self, messages: tuple[Any, ...], rest: tuple[Any, ...], variant: Any
                     ) -> tuple[list[int], list[int], list[bool], list[Any], Snapshot] | None:
        """The longest reusable start: segment starts, output ends, flags, output, and the
        snapshot of the messages verified unchanged."""
        if not messages:
            return None
        kept = self._kept.get(messages[0])  # the same first object, not an equal one
        if kept is None or kept.variant != variant:
            return None
        snapshot = kept.take_snapshot()
        if snapshot is None:  # another request of this conversation is using it
            return None
        shared = 1 + shared_prefix(kept.rest, rest)
        # of those very objects, the ones that still hold what they held when converted
        shared = snapshot.unchanged(messages, shared)
        # the last segment start within the shared prefix that also starts a segment of
        # this request (the old list's end may be followed by more of its last segment)
        k = bisect.bisect_right(kept.starts, shared) - 1
        while k > 0 and kept.starts[k] < len(messages) and not _starts_segment(
                messages[kept.starts[k]]):
            k -= 1
        if k <= 0:
            return None
        snapshot.truncate(shared)
        return (kept.starts[:k + 1], kept.ends[:k + 1], kept.flags[:k + 1],
                kept.output[:kept.ends[k]], snapshot)


class _Conversion:
    """One converted transcript: ``rest`` its messages after the first (the key, not held
    here), ``starts[i]`` a segment start, ``ends[i]`` the output length before it,
    ``flags[i]`` whether anything before it renamed tool-call ids; ``snapshot`` what its
    leading messages held when converted (it ends at the first it cannot cover), taken
    by the next request of the conversation, which extends it in place: one request owns
    it at a time (``list.pop`` hands it over atomically; a request that finds it taken
    converts afresh)."""

    __slots__ = ("_snapshot", "ends", "flags", "output", "rest", "starts", "variant")

    def __init__(self, variant: Any, rest: tuple[Any, ...], starts: list[int],
                 ends: list[int], flags: list[bool], output: list[Any],
                 snapshot: Snapshot) -> None:
        self._snapshot = [snapshot]
        self.variant = variant
        self.rest = rest
        self.starts = starts
        self.ends = ends
        self.flags = flags
        self.output = output

    def take_snapshot(self) -> Snapshot | None:
        """The snapshot, now the caller's alone; ``None`` if another request took it."""
        try:
            return self._snapshot.pop()
        except IndexError:
            return None


def _starts_segment(message: Any) -> bool:
    # a user message, or an assistant message that is sent (failed ones are dropped, and a
    # system message after one could then still belong to the leading prompt)
    kind = type(message)
    return kind is UserMessage or (
        kind is AssistantMessage and message.stop_reason not in ("error", "aborted"))


def renames_tool_call_ids(segment: Sequence[Any], model: Model,
                          normalize: Callable[[str], str] | None) -> bool:
    """True if transforming ``segment`` for ``model`` renames a tool call (another model's)."""
    if normalize is None:
        return False
    for message in segment:
        if type(message) is AssistantMessage and not is_same_model(message, model):
            for block in message.content:
                if type(block) is ToolCall and normalize(block.id) != block.id:
                    return True
    return False


def _self_contained(segment: Sequence[Any]) -> bool:
    """True unless a tool result answers a call made before the segment."""
    calls: set[str] = set()
    for message in segment:
        if type(message) is AssistantMessage:
            calls.update(block.id for block in message.content if type(block) is ToolCall)
        elif type(message) is ToolResultMessage and message.tool_call_id not in calls:
            return False
    return True
