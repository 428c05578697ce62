"""The wire pieces an adapter handles: ``SSERequest``, ``SSEEvent`` and JSON encoding.

``ChunkSource`` feeds sseclient-py large ``read1`` chunks and keeps the bytes after the last
event boundary; ``json_dumps`` / ``arguments_json`` / ``parse_event_json`` are the shared
encoders and the decoder with a readable error.
"""

from __future__ import annotations

import bisect
import json
import operator
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import urllib3.response

from ..errors import ProviderResponseError
from ..messages import sanitize_surrogates
from ..stream import ProviderResponse
from ._errors import clip
from ._keep import ByOwner, cache_mode, caching, check_same

__all__ = ["DEFAULT_TIMEOUT", "ChunkSource", "PrefixEncoder", "SSEEvent", "SSERequest",
           "arguments_json", "json_dumps", "parse_event_json", "shared_prefix"]

DEFAULT_TIMEOUT: tuple[float, float] = (10.0, 600.0)
"""(connect, read) seconds; the read timeout is the longest silence between two reads."""

_READ_SIZE = 65536  # one read1() call; large reads keep sseclient's buffering linear


@dataclass
class SSERequest:
    """One streaming POST. ``body`` (a dict) is encoded with ``json_dumps`` unless bytes."""

    url: str
    body: Mapping[str, Any] | bytes
    headers: Mapping[str, str | None] = field(default_factory=dict)
    """Over the transport's defaults; a ``None`` value removes the header of that name."""
    timeout: tuple[float, float] = DEFAULT_TIMEOUT
    max_retries: int | None = None
    """``None``: ``StreamOptions.max_retries`` if set, else ``DEFAULT_MAX_RETRIES`` (2)."""
    on_response: Callable[[ProviderResponse], None] | None = None
    """Called with the accepted response's status and headers before ``start`` is pushed
    (``ProviderCall.request`` sets it from ``StreamOptions.on_response``)."""
    accept: str = "text/event-stream"
    """The content type asked for and required of the answer (Bedrock's is
    ``application/vnd.amazon.eventstream``, read with ``SSEResponse.chunks``)."""


@dataclass(slots=True)
class SSEEvent:
    """One server-sent event. ``truncated``: the body ended before its blank line."""

    event: str
    data: str
    truncated: bool = False


_BOUNDARIES = (b"\n\n", b"\r\r", b"\r\n\r\n")  # what ends an event
_PENDING_LIMIT = 64  # chunks kept before they are cut at their last boundary


class ChunkSource:
    """Feeds sseclient whole chunks: each HTTP chunk as urllib3's ``read_chunked`` yields it
    (a chunked body, the usual event stream), else large ``read1`` chunks (not
    ``Response.__iter__``'s 128 bytes).

    Also remembers the bytes after the last event boundary, which sseclient drops when they
    are not SSE fields (Gemini's bare JSON error tail, an HTML error page). That costs one
    ``endswith`` per chunk: only chunks that do not end an event are kept.
    """

    def __init__(self, raw: urllib3.response.HTTPResponse) -> None:
        self._raw = raw
        self.exhausted = False
        self._pending: list[bytes] = []  # the chunks since the last one that ended an event
        self._chunks: Iterator[bytes] | None = None

    def __iter__(self) -> Iterator[bytes]:
        raw = self._raw
        self._chunks = chunks = (raw.read_chunked(decode_content=True)
                                 if raw.chunked and raw.supports_chunked_reads()
                                 else self._read1_chunks())
        pending = self._pending
        for chunk in chunks:
            if not chunk.endswith(_BOUNDARIES):
                pending.append(chunk)
                if len(pending) > _PENDING_LIMIT:
                    self._pending = pending = [self.tail]
            elif pending:
                pending.clear()
            yield chunk
        self.exhausted = True

    def drain(self, max_chunks: int) -> bool:
        """Read the rest of the body (after the terminal event: usually just the chunked
        terminator), which hands the connection back to the pool; False if more than
        ``max_chunks`` chunks were still coming. Raises what a read raises (a timeout when
        the server keeps the stream open)."""
        chunks = self._chunks
        if chunks is None:
            chunks = self._chunks = iter(self)
        for count, _ in enumerate(chunks):
            if count >= max_chunks:
                return False
        self.exhausted = True
        return True

    def _read1_chunks(self) -> Iterator[bytes]:
        read1 = self._raw.read1
        while True:
            chunk = read1(_READ_SIZE, decode_content=True)
            if not chunk:
                return
            yield chunk

    @property
    def tail(self) -> bytes:
        """What followed the last blank line ("" when the stream ended on an event)."""
        joined = b"".join(self._pending)
        cut = 0
        for sep in _BOUNDARIES:
            at = joined.rfind(sep)
            if at >= 0:
                cut = max(cut, at + len(sep))
        return joined[cut:]

    def close(self) -> None:
        return None  # the response is closed by SSEResponse


_BODY_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
_ARGUMENTS_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))  # compact, as pi


def arguments_json(arguments: Any) -> str:
    """A tool call's arguments as JSON text (one shared encoder: ``json.dumps`` with
    non-default options builds a new encoder per call, a cost per historical tool call)."""
    return _ARGUMENTS_ENCODER.encode(arguments)


def json_dumps(value: Any) -> bytes:
    """Compact UTF-8 JSON, the encoding used for every request body; a lone surrogate
    (which UTF-8 cannot encode) is removed, as pi-ai's ``sanitizeSurrogates`` does."""
    text = _BODY_ENCODER.encode(value)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # raw in the JSON text: removing it there removes it from the value
        return sanitize_surrogates(text).encode("utf-8")


class PrefixEncoder:
    """Request bodies like ``json_dumps`` makes them, re-encoding only what is new in the list.

    A conversation re-sends its whole transcript every turn. ``encode(body, field)`` keeps
    the items of ``body[field]`` encoded, per conversation (found by the list's first item),
    in runs: the items new in one request are encoded together (one encoder call), and a
    later request reuses the runs within its leading items that are the very objects
    encoded before: a turn encodes its new messages only. The items are the adapters'
    converted messages, which nothing mutates once built: the conversion caches give an
    old object again only while its source message is unchanged (``Snapshot``), and
    ``on_payload`` is given a copy of the body (``ProviderCall.request``).

    Thread safety: every method may be called from any thread (``ByOwner``'s). Bounded by
    the conversations alive: given an ``owner`` (an object the conversation keeps for its
    whole life, e.g. its first transcript message), the entry lives as long as that object;
    without one (or one that cannot be weakly referenced), conversations are found by their
    first item and the latest ``size`` are kept.
    """

    def __init__(self, size: int = 8) -> None:
        # owner (or first item) -> (the items, the JSON of runs of them without the
        # brackets, the item count at the end of each run)
        self._kept: ByOwner[tuple[tuple[Any, ...], list[bytes], list[int]]] = ByOwner(size)

    def encode(self, body: Mapping[str, Any], field: str, owner: object = None) -> bytes:
        """``json_dumps(body)``, byte for byte; ``body[field]`` must be a list. ``owner``:
        what the conversation's entry is kept by (see the class)."""
        mode = cache_mode()
        if field not in body or not caching(mode, len(body[field])):  # off, or short
            return json_dumps(body)
        if mode == "check":
            encoded = self._encode(body, field, owner)
            check_same(encoded, json_dumps(body), "PrefixEncoder")
            return encoded
        return self._encode(body, field, owner)

    def _encode(self, body: Mapping[str, Any], field: str, owner: object) -> bytes:
        before: dict[Any, Any] = {}
        after: dict[Any, Any] = {}
        side = before
        for key, value in body.items():
            if key == field:
                side = after
            else:
                side[key] = value
        encode = _BODY_ENCODER.encode
        # the keys around the list, each side in one call: '{"a":1,' + '"field":[' ... ']}'
        head = encode(before)[:-1] + "," if before else "{"
        tail = "," + encode(after)[1:] if after else "}"
        try:
            return b"".join(((head + encode(field) + ":[").encode("utf-8"),
                             self._encoded_items(body[field], owner),
                             ("]" + tail).encode("utf-8")))
        except UnicodeEncodeError:  # a lone surrogate: json_dumps removes it; nothing kept
            return json_dumps(body)

    def _encoded_items(self, items: Sequence[Any], owner: object) -> bytes:
        items = tuple(items)
        if not items:
            return b""
        if owner is None:
            owner = items[0]
        kept = self._kept.get(owner)
        runs: list[bytes] = []
        ends: list[int] = []
        done = 0
        if kept is not None:  # reused up to the first item that is not that very object
            old_items, old_runs, old_ends = kept
            count = bisect.bisect_right(old_ends, shared_prefix(old_items, items))
            runs, ends = old_runs[:count], old_ends[:count]
            done = ends[-1] if ends else 0
        if done < len(items):
            runs.append(_BODY_ENCODER.encode(list(items[done:]))[1:-1].encode("utf-8"))
            ends.append(len(items))
        self._kept.put(owner, (items, runs, ends))
        return b",".join(runs)


def shared_prefix(a: tuple[Any, ...], b: tuple[Any, ...]) -> int:
    """How many leading elements are the same objects."""
    if len(a) <= len(b) and all(map(operator.is_, a, b)):
        return len(a)
    for index, same in enumerate(map(operator.is_, a, b)):
        if not same:
            return index
    return min(len(a), len(b))


def _int_or_float(text: str) -> int | float:
    try:
        return int(text)
    except ValueError:  # more digits than int() converts: a float (inf past 1e308)
        return float(text)


_BIG_INT_DECODER = json.JSONDecoder(parse_int=_int_or_float)  # the rare retry only


# json.loads's decoder, its scanner called directly: the usual event (one JSON value, no
# surrounding whitespace) is decoded without json.loads's three Python-level calls
_scan_once: Callable[[str, int], tuple[Any, int]] = (
    json.JSONDecoder().scan_once)  # type: ignore[attr-defined]  # set in __init__ (CPython, PyPy)


def parse_event_json(event: SSEEvent, label: str) -> Any:
    """The event's data as JSON, or a ``ProviderResponseError`` saying what went wrong."""
    data = event.data
    try:
        value, end = _scan_once(data, 0)
    except (StopIteration, ValueError, RecursionError):
        pass  # json.loads decides, and says what is wrong
    else:
        if end == len(data):
            return value
    try:
        return json.loads(data)
    except RecursionError as exc:
        msg = (f"{label} sent an event whose JSON is nested too deeply to decode "
               f"({len(event.data)} characters).")
        raise ProviderResponseError(msg) from exc
    except ValueError as exc:
        if "digits" in str(exc):  # an integer longer than int() converts: read it as JS does
            try:
                return _BIG_INT_DECODER.decode(event.data)
            except (ValueError, RecursionError):
                pass
        excerpt = clip(event.data, 200)
        if event.truncated:
            msg = (f"The {label} stream was cut off in the middle of an event "
                   f"(incomplete data {excerpt!r}). Retry the request.")
        else:
            msg = (f"{label} sent an event whose data is not valid JSON ({exc}): {excerpt!r}. "
                   "Check that base_url points at a server that speaks this API.")
        raise ProviderResponseError(msg) from exc

