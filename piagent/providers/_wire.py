"""The wire pieces an adapter handles: ``SSERequest``, ``SSEEvent`` and JSON encoding.

``ChunkSource`` feeds sseclient-py large ``read1`` chunks and keeps the bytes after the last
event boundary; ``json_dumps`` / ``arguments_json`` / ``parse_event_json`` are the shared
encoders and the decoder with a readable error.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import urllib3.response

from ..errors import ProviderResponseError
from ._errors import clip

__all__ = ["DEFAULT_TIMEOUT", "ChunkSource", "SSEEvent", "SSERequest", "arguments_json",
           "json_dumps", "parse_event_json"]

DEFAULT_TIMEOUT: tuple[float, float] = (10.0, 600.0)
"""(connect, read) seconds; the read timeout is the longest silence between two reads."""

_READ_SIZE = 65536  # one read1() call; large reads keep sseclient's buffering linear


@dataclass
class SSERequest:
    """One streaming POST. ``body`` (a dict) is encoded with ``json_dumps`` unless bytes."""

    url: str
    body: Mapping[str, Any] | bytes
    headers: Mapping[str, str] = field(default_factory=dict)
    timeout: tuple[float, float] = DEFAULT_TIMEOUT
    max_retries: int | None = None
    """``None``: ``StreamOptions.max_retries`` if set, else ``DEFAULT_MAX_RETRIES`` (2)."""


@dataclass(slots=True)
class SSEEvent:
    """One server-sent event. ``truncated``: the body ended before its blank line."""

    event: str
    data: str
    truncated: bool = False


class ChunkSource:
    """Feeds sseclient large ``read1`` chunks (not ``Response.__iter__``'s 128 bytes).

    Also remembers the bytes after the last event boundary, which sseclient drops when they
    are not SSE fields (Gemini's bare JSON error tail, an HTML error page).
    """

    def __init__(self, raw: urllib3.response.HTTPResponse) -> None:
        self._read1 = raw.read1
        self.exhausted = False
        self._tail: list[bytes] = []
        self._last = b""  # the last 3 bytes seen, to find boundaries split across chunks

    def __iter__(self) -> Iterator[bytes]:
        read1 = self._read1
        while True:
            chunk = read1(_READ_SIZE, decode_content=True)
            if not chunk:
                break
            self._track_tail(chunk)
            yield chunk
        self.exhausted = True

    def _track_tail(self, chunk: bytes) -> None:
        joined = self._last + chunk
        cut = -1
        for sep in (b"\n\n", b"\r\r", b"\r\n\r\n"):
            at = joined.rfind(sep)
            if at >= 0:
                cut = max(cut, at + len(sep))
        if cut >= 0:
            rest = joined[cut:]
            self._tail = [rest] if rest else []
        else:
            self._tail.append(chunk)
        self._last = joined[-3:]

    @property
    def tail(self) -> bytes:
        """What followed the last blank line ("" when the stream ended on an event)."""
        return b"".join(self._tail)

    def close(self) -> None:
        return None  # the response is closed by SSEResponse


_BODY_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
_ARGUMENTS_ENCODER = json.JSONEncoder(ensure_ascii=False)


def arguments_json(arguments: Any) -> str:
    """A tool call's arguments as JSON text (one shared encoder: ``json.dumps`` with
    non-default options builds a new encoder per call, a cost per historical tool call)."""
    return _ARGUMENTS_ENCODER.encode(arguments)


def json_dumps(value: Any) -> bytes:
    """Compact UTF-8 JSON, the encoding used for every request body."""
    return _BODY_ENCODER.encode(value).encode("utf-8")


def _int_or_float(text: str) -> int | float:
    try:
        return int(text)
    except ValueError:  # more digits than int() converts: a float (inf past 1e308)
        return float(text)


_BIG_INT_DECODER = json.JSONDecoder(parse_int=_int_or_float)  # the rare retry only


def parse_event_json(event: SSEEvent, label: str) -> Any:
    """The event's data as JSON, or a ``ProviderResponseError`` saying what went wrong."""
    try:
        return json.loads(event.data)
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

