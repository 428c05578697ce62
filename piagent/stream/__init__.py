"""Event streams and the stream-function contract (the layer every model client plugs into).

- ``EventStream``: a thread-safe stream of events with a final ``result()``, pushed by a
  producer thread or pulled by the consumer's thread; ``AssistantMessageEventStream`` is the
  one a stream function returns, complete on ``done`` or ``error``.
- The assistant events (``StartEvent`` … ``ErrorEvent``), each with pi's ``type`` string.
- ``Context``, ``StreamOptions`` (with ``ClientIdentity``, ``ClientAttribution`` and
  ``ProviderResponse``), ``StreamFn`` and the process-wide default stream function.
- ``parse_streaming_json``: incomplete JSON (tool arguments as they stream) to a dict.
- ``StreamingJsonParser``: the same read incrementally, each piece once (pi-ai 1.6.1's rules).
- ``runs_in_progress``, ``run_started``, ``run_ended``, ``when_no_runs``: the loop's runs
  going on in this process; the connection pools close their idle connections when none is.
"""

from __future__ import annotations

from ._events import (
    AssistantMessageEvent,
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
)
from ._eventstream import EventStream
from ._options import (
    ClientAttribution,
    ClientIdentity,
    Context,
    ProviderResponse,
    StreamFn,
    StreamOptions,
    get_default_stream_fn,
    reset_default_stream_fn,
    set_default_stream_fn,
)
from ._partial_json import parse_streaming_json
from ._runs import run_ended, run_started, runs_in_progress, when_no_runs
from ._streaming_json import Snapshot, StreamingJsonParser

__all__ = [
    "AssistantMessageEvent",
    "AssistantMessageEventStream",
    "ClientAttribution",
    "ClientIdentity",
    "Context",
    "DoneEvent",
    "ErrorEvent",
    "EventStream",
    "ProviderResponse",
    "Snapshot",
    "StartEvent",
    "StreamFn",
    "StreamOptions",
    "StreamingJsonParser",
    "TextDeltaEvent",
    "TextEndEvent",
    "TextStartEvent",
    "ThinkingDeltaEvent",
    "ThinkingEndEvent",
    "ThinkingStartEvent",
    "ToolCallDeltaEvent",
    "ToolCallEndEvent",
    "ToolCallStartEvent",
    "get_default_stream_fn",
    "parse_streaming_json",
    "reset_default_stream_fn",
    "run_ended",
    "run_started",
    "runs_in_progress",
    "set_default_stream_fn",
    "when_no_runs",
]
