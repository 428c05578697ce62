"""A streaming tool call's arguments: each fragment read once, the partial value built when read.

``StreamedArguments`` keeps one call's argument text (as fragments, joined when the call ends)
and a ``StreamingJsonParser`` (pi-ai 1.6.1's partial values). While the call streams, its
content block is a ``PartialToolCall``: ``arguments`` is the parser's snapshot at the last
fragment, built (its open string joined) only when someone reads it, so a large argument
costs linear time however it is split. When the call ends (or the stream does) the block
becomes a plain ``ToolCall`` again with its final arguments.
"""

from __future__ import annotations

import threading
from typing import Any

from ..messages import ToolCall, sanitize_surrogates_in
from ..stream import Snapshot, StreamingJsonParser

__all__ = ["PartialToolCall", "StreamedArguments", "settle"]


# guards the parser state (parser, fed, snapshot, arguments) of every StreamedArguments:
# partial arguments are read rarely, from any thread; one lock for all costs nothing per call
_READ_LOCK = threading.Lock()


class StreamedArguments:
    """One call's argument fragments, and its parser fed with them when someone reads the
    partial arguments (each fragment once). Fragments are added by the builder's worker
    (under the builder's lock); ``partial`` may run on any thread that reads."""

    __slots__ = ("arguments", "clean", "fed", "fragments", "length", "parser", "snapshot")

    def __init__(self) -> None:
        self.fragments: list[str] = []
        self.length = 0  # of the text
        self.clean = False  # the partial arguments are cleaned of unpaired surrogates
        self.parser: StreamingJsonParser | None = None
        self.fed = 0  # fragments the parser has read
        self.snapshot: Snapshot | None = None
        self.arguments: dict[str, Any] = {}

    def add(self, fragment: str) -> None:
        self.fragments.append(fragment)
        self.length += len(fragment)

    def tail(self) -> str:
        """The text's last 5 characters (each fragment holds at least one)."""
        return "".join(self.fragments[-5:])[-5:]

    def partial(self) -> dict[str, Any]:
        """The partial arguments after the last fragment, as pi-ai's
        ``ToolCallArgumentsStream.append`` returns them (a snapshot after every fragment)."""
        with _READ_LOCK:
            parser = self.parser
            if parser is None:
                parser = self.parser = StreamingJsonParser()
            fragments, n = self.fragments, len(self.fragments)
            for k in range(self.fed, n):
                parser.append(fragments[k])
                if k < n - 1:
                    parser.skip_snapshot()
            self.fed = n
            snapshot = parser.snapshot()
            if snapshot is not self.snapshot:
                self.snapshot = snapshot
                value = snapshot.value if snapshot is not None and snapshot.is_object else {}
                self.arguments = sanitize_surrogates_in(value) if self.clean else value
            return self.arguments

    def text(self) -> str:
        """The argument text so far."""
        fragments = self.fragments
        return fragments[0] if len(fragments) == 1 else "".join(fragments)


class PartialToolCall(ToolCall):
    """A tool call whose arguments are still streaming; ``arguments`` is built on read
    (``_src``: the call's ``StreamedArguments``, ``None`` once someone set the arguments;
    ``_args``: the last built; ``_seen``: how many fragments it was built from).

    Equal to, copied and pickled as the plain ``ToolCall`` it stands for."""

    @property
    def arguments(self) -> dict[str, Any]:
        state = self.__dict__
        source: StreamedArguments | None = state["_src"]
        if source is not None and state["_seen"] != len(source.fragments):
            state["_seen"] = len(source.fragments)
            state["_args"] = source.partial()
        return state["_args"]  # type: ignore[no-any-return]

    @arguments.setter
    def arguments(self, value: dict[str, Any]) -> None:
        state = self.__dict__
        state["_src"] = None  # final: not replaced by a parse at the end
        state["_args"] = value

    def show(self, source: StreamedArguments) -> None:
        """The arguments are ``source``'s partial ones, built when read."""
        state = self.__dict__
        state["_src"] = source
        state["_seen"] = -1

    @property
    def assigned(self) -> bool:
        """Someone set ``arguments`` after the last fragment (the proxy's final call)."""
        return self.__dict__["_src"] is None

    def mark_clean(self, source: StreamedArguments) -> None:
        """From now on the arguments shown are cleaned of unpaired surrogates."""
        if source.clean:
            return
        source.clean = True
        state = self.__dict__
        if state["_src"] is None:
            state["_args"] = sanitize_surrogates_in(state["_args"])
        else:
            with _READ_LOCK:
                source.snapshot = None  # built again, cleaned, on the next read
            state["_seen"] = -1

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
    block.__class__ = ToolCall  # type: ignore[assignment]
    del state["_src"], state["_args"]
    state.pop("_seen", None)
    state["arguments"] = value
