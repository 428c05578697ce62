"""A streaming tool call's arguments: each fragment read once, the partial value built when read.

``StreamedArguments`` keeps one call's argument text (as fragments, joined when the call ends)
and a ``StreamingJsonParser`` (pi-ai 1.6.1's partial values). While the call streams, its
content block is a ``PartialToolCall``: ``arguments`` is the parser's snapshot at the last
fragment, built (its open string joined) only when someone reads it, so a large argument
costs linear time however it is split. When the call ends (or the stream does) the block
becomes a plain ``ToolCall`` again with its final arguments.
"""

from __future__ import annotations

from typing import Any

from ..messages import ToolCall, sanitize_surrogates_in
from ..stream import Snapshot, StreamingJsonParser

__all__ = ["PartialToolCall", "StreamedArguments", "settle"]


class StreamedArguments:
    """One call's argument fragments and its parser. Owned by the builder (under its lock)."""

    __slots__ = ("fragments", "length", "parser", "snapshot", "tail")

    def __init__(self) -> None:
        self.fragments: list[str] = []
        self.parser = StreamingJsonParser()
        self.snapshot: Snapshot | None = None
        self.tail = ""  # the text's last 5 characters (an escape may straddle fragments)
        self.length = 0  # of the text

    def append(self, fragment: str) -> Snapshot | None:
        """Read ``fragment``; the parser's snapshot, or ``None`` while it is unchanged."""
        self.fragments.append(fragment)
        self.length += len(fragment)
        self.tail = (self.tail + fragment)[-5:]
        self.parser.append(fragment)
        snapshot = self.parser.snapshot()
        if snapshot is self.snapshot:
            return None
        self.snapshot = snapshot
        return snapshot

    def text(self) -> str:
        """The argument text so far (joined once, then kept as one fragment)."""
        fragments = self.fragments
        if len(fragments) > 1:
            fragments[:] = ["".join(fragments)]
        return fragments[0] if fragments else ""


class PartialToolCall(ToolCall):
    """A tool call whose arguments are still streaming; ``arguments`` is built on read.

    Equal to, copied and pickled as the plain ``ToolCall`` it stands for."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.__dict__["_source"] = None
        self.__dict__["_clean"] = False
        super().__init__(*args, **kwargs)
        self.__dict__["_assigned"] = False

    @property
    def arguments(self) -> dict[str, Any]:
        state = self.__dict__
        source: Snapshot | None = state["_source"]
        if source is not None:
            state["_source"] = None
            value: dict[str, Any] = source.value if source.is_object else {}
            if state["_clean"]:
                value = sanitize_surrogates_in(value)
            state["_arguments"] = value
        return state["_arguments"]  # type: ignore[no-any-return]

    @arguments.setter
    def arguments(self, value: dict[str, Any]) -> None:
        self.__dict__["_source"] = None
        self.__dict__["_arguments"] = value
        self.__dict__["_assigned"] = True  # final: not replaced by a parse at the end

    def show(self, snapshot: Snapshot, clean: bool) -> None:
        """The arguments are ``snapshot``'s value (without unpaired surrogates: ``clean``)."""
        self.__dict__["_source"] = snapshot
        self.__dict__["_clean"] = clean
        self.__dict__["_assigned"] = False

    @property
    def assigned(self) -> bool:
        """Someone set ``arguments`` after the last fragment (the proxy's final call)."""
        return bool(self.__dict__["_assigned"])

    def mark_clean(self) -> None:
        """From now on the arguments shown are cleaned of unpaired surrogates."""
        state = self.__dict__
        if not state["_clean"]:
            state["_clean"] = True
            if state["_source"] is None:
                state["_arguments"] = sanitize_surrogates_in(state["_arguments"])

    def plain(self) -> ToolCall:
        return ToolCall(self.id, self.name, self.arguments, self.thought_signature,
                        namespace=self.namespace, arguments_error=self.arguments_error,
                        extra=self.extra)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ToolCall):
            return self.plain() == (other.plain() if isinstance(other, PartialToolCall)
                                    else other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # as the dataclass

    def __reduce_ex__(self, protocol: Any) -> Any:
        return _same_call, (self.plain(),)


def _same_call(call: ToolCall) -> ToolCall:
    """Unpickling or copying a ``PartialToolCall`` gives the plain ``ToolCall``."""
    return call


def settle(block: Any, arguments: dict[str, Any] | None = None) -> None:
    """Make a ``PartialToolCall`` a plain ``ToolCall`` again, with ``arguments`` (default:
    what it shows now)."""
    if type(block) is not PartialToolCall:
        if arguments is not None:
            block.arguments = arguments
        return
    value = block.arguments if arguments is None else arguments
    state = block.__dict__
    state.pop("_source", None)
    state.pop("_clean", None)
    state.pop("_assigned", None)
    state.pop("_arguments", None)
    block.__class__ = ToolCall  # type: ignore[assignment]
    state["arguments"] = value
