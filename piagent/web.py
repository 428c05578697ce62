"""Server-Sent Events for web views: stream an agent run to a browser.

``sse_events(agent.stream(input))`` turns agent events into ``data: <json>\\n\\n`` frames
(``event_to_dict``, pi's camelCase JSON). ``flask_response`` and ``django_response`` wrap
that in the framework's streaming response. When the client goes away the framework closes
the response iterator; that closes the ``agent.stream`` iterator, which aborts the run.

A run addressed by id (``piagent.runs``; docs/web.md, "Runs by id") streams through
``run_sse_events(runner, run_id, last_event_id)``: every frame carries an ``id:`` line, a
reconnecting client sends the last one back as ``Last-Event-ID`` and gets only what came
after it, and a client that goes away leaves the run alone. ``flask_run_response`` and
``django_run_response`` read that header and answer 404 for an unknown run.
Flask and Django are imported only inside their function; neither is a dependency.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from .agent import RUN_SETTLED
from .errors import AgentBusyError
from .events import event_to_dict
from .messages import sanitize_surrogates
from .runs import RunNotFoundError

if TYPE_CHECKING:
    import flask

    from .agent import Agent
    from .messages import AgentMessage, ImageContent

__all__ = [
    "LAST_EVENT_ID",
    "SSE_HEADERS",
    "django_response",
    "django_run_response",
    "encode_sse",
    "flask_response",
    "flask_run_response",
    "run_sse_events",
    "sse_events",
]

_log = logging.getLogger(__name__)

SSE_HEADERS: Mapping[str, str] = {
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",  # nginx: pass each frame on at once
}
"""Headers every SSE response should carry (the content type is set separately)."""

_MIMETYPE = "text/event-stream"

LAST_EVENT_ID = "Last-Event-ID"
"""The request header a reconnecting ``EventSource`` sends: the id of the last event it got."""


def _check_field(name: str, value: str) -> None:
    if not isinstance(value, str):
        raise TypeError(f"encode_sse: {name} must be a str, got {type(value).__name__}")
    if any(c in value for c in "\r\n\0"):
        raise ValueError(f"encode_sse: {name} must not contain a newline, carriage return or "
                         f"NUL (SSE would split it), got {value!r}")


def encode_sse(data: Any, event: str | None = None, *, id: str | None = None) -> bytes:
    """One server-sent event: optional ``id:`` and ``event:`` lines, then ``data: <json>``.

    The JSON is compact and on one line. ``id`` and ``event`` must be single-line strings
    (``ValueError`` otherwise); a browser keeps the last ``id`` and sends it back as the
    ``Last-Event-ID`` header when it reconnects. A lone UTF-16 surrogate in ``data`` (which
    UTF-8 cannot encode) is removed, as pi-ai's ``sanitizeSurrogates`` does.
    """
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)
    head = ""
    if id is not None:
        _check_field("id", id)
        head += f"id: {id}\n"
    if event:
        _check_field("event", event)
        head += f"event: {event}\n"
    try:
        return f"{head}data: {payload}\n\n".encode()
    except UnicodeEncodeError:  # a lone surrogate (a tool's details, say), raw in the JSON
        return f"{head}data: {sanitize_surrogates(payload)}\n\n".encode()


def sse_events(events: Iterable[Any], to_dict: Callable[[Any], Any] = event_to_dict, *,
               heartbeat_s: float | None = 15.0) -> Iterator[bytes]:
    """SSE frames for ``events`` (usually ``agent.stream(...)``), one per event.

    Closing the returned generator (what Flask, Django and every WSGI server do when the
    client disconnects) closes ``events``; for ``agent.stream`` that aborts the run and
    waits for it to settle. A server notices a gone client only when it writes, so while no
    event comes for ``heartbeat_s`` seconds (a tool working silently) an SSE comment is sent
    as a keep-alive; ``None`` turns that off. An event that cannot be serialised ends the
    stream with a ``{"type": "stream_error", "error": ...}`` frame (and the run is aborted),
    rather than a silently truncated response.
    """
    iterator = iter(events)
    poll = getattr(iterator, "poll", None) if heartbeat_s is not None else None
    try:
        while True:
            try:
                event = poll(heartbeat_s) if poll is not None else next(iterator)
            except StopIteration:
                return
            if event is RUN_SETTLED:
                return
            if event is None:
                yield _KEEP_ALIVE
                continue
            try:
                frame = encode_sse(to_dict(event))
            except Exception as exc:  # a serialisation bug: tell the client, then stop
                _log.exception("Could not serialise %r for the event stream", event)
                yield encode_sse({"type": "stream_error",
                                  "error": f"Could not serialise a {type(event).__name__} "
                                           f"event: {type(exc).__name__}: {exc}"})
                return
            yield frame
    finally:
        close = getattr(events, "close", None) or getattr(iterator, "close", None)
        if callable(close):
            close()


_KEEP_ALIVE = b": keep-alive\n\n"  # an SSE comment: clients ignore it


def _busy_body(exc: AgentBusyError) -> str:
    return json.dumps({"error": str(exc)})


def flask_response(agent: Agent, input: str | AgentMessage | Sequence[AgentMessage],
                   images: Sequence[ImageContent] | None = None, *,
                   headers: Mapping[str, str] | None = None) -> flask.Response:
    """A ``flask.Response`` streaming a new run of ``agent`` as SSE.

    If the agent is already running, the answer is 409 with ``{"error": ...}`` (queue the
    text with ``agent.steer`` instead). The run starts when this is called.
    """
    import flask

    try:
        events = agent.stream(input, images)
    except AgentBusyError as exc:
        return flask.Response(_busy_body(exc), status=409, mimetype="application/json")
    return flask.Response(sse_events(events), mimetype=_MIMETYPE,
                          headers={**SSE_HEADERS, **(headers or {})})


def django_response(agent: Agent, input: str | AgentMessage | Sequence[AgentMessage],
                    images: Sequence[ImageContent] | None = None, *,
                    headers: Mapping[str, str] | None = None) -> Any:
    """A ``django.http.StreamingHttpResponse`` streaming a new run of ``agent`` as SSE.

    If the agent is already running, the answer is 409 with ``{"error": ...}``. Under ASGI,
    Django consumes this synchronous iterator in a thread; WSGI is the simple path.
    """
    from django.http import (  # type: ignore[import-untyped, unused-ignore]
        HttpResponse,
        StreamingHttpResponse,
    )

    try:
        events = agent.stream(input, images)
    except AgentBusyError as exc:
        return HttpResponse(_busy_body(exc), status=409, content_type="application/json")
    response = StreamingHttpResponse(sse_events(events), content_type=_MIMETYPE)
    for name, value in {**SSE_HEADERS, **(headers or {})}.items():
        response[name] = value
    return response


# --- runs addressed by id (docs/web.md, "Runs by id") ---------------------------------------


class _RunEvent(Protocol):
    """What a runner's ``events`` yields: ``piagent.runs.RunEvent`` (an id and a pi-JSON dict)."""

    @property
    def id(self) -> str: ...

    @property
    def event(self) -> Mapping[str, Any]: ...


class _Runner(Protocol):
    """The part of a runner (``LocalRunner``, ``CeleryRunner``) the web helpers read."""

    def events(self, run_id: str, after: str | None = ...,
               timeout: float = ...) -> Iterable[_RunEvent | None]: ...


def _check_heartbeat(heartbeat_s: float) -> None:
    if isinstance(heartbeat_s, bool) or not isinstance(heartbeat_s, (int, float)) or \
            not heartbeat_s > 0:
        raise ValueError(f"heartbeat_s must be a number of seconds > 0, got {heartbeat_s!r}")


def _run_frames(events: Iterable[_RunEvent | None]) -> Generator[bytes, None, None]:
    """SSE frames for a runner's ``events``: ``id:`` + ``data:`` per event, a comment per idle."""
    iterator = iter(events)
    try:
        for item in iterator:
            if item is None:
                yield _KEEP_ALIVE
                continue
            try:
                frame = encode_sse(item.event, id=item.id)
            except Exception as exc:  # a serialisation bug: tell the client, then stop
                _log.exception("Could not serialise run event %r for the event stream", item)
                yield encode_sse({"type": "stream_error",
                                  "error": f"Could not serialise run event "
                                           f"{getattr(item, 'id', '?')}: "
                                           f"{type(exc).__name__}: {exc}"})
                return
            yield frame
    finally:
        close = getattr(iterator, "close", None)
        if callable(close):
            close()  # ends this reader only; the run goes on


def run_sse_events(runner: _Runner, run_id: str, last_event_id: str | None = None, *,
                   heartbeat_s: float = 15.0) -> Generator[bytes, None, None]:
    """SSE frames of the run ``run_id``: every event from ``agent_start`` (or from just after
    ``last_event_id``), then the live ones, ending after ``agent_end``.

    Each frame is ``id: <event id>`` plus ``data: <pi-JSON event>``; a client that reconnects
    with the last id it saw gets every later event exactly once. A run whose executor died
    and that another executor resumed (``QueuedRunner``) carries one ``{"type":
    "run_resumed", ...}`` event, piagent's own, where the new executor would have repeated
    ``agent_start``: show it as a note; the run is the same. After ``heartbeat_s``
    seconds without an event an SSE comment is written, so a departed client is noticed.
    Closing the generator (the client went away) stops reading and **leaves the run
    running**: it belongs to its session, not to this connection; stop it with
    ``runner.abort(run_id)``. An unknown ``run_id`` raises ``RunNotFoundError`` (a
    ``KeyError``) and an ``last_event_id`` that is no event id ``ValueError``, here or at the
    first ``next()`` (depending on the runner).
    """
    _check_heartbeat(heartbeat_s)
    if last_event_id is not None and not isinstance(last_event_id, str):
        raise TypeError(f"last_event_id must be a str or None, got {type(last_event_id).__name__}")
    return _run_frames(runner.events(run_id, after=last_event_id or None, timeout=heartbeat_s))


def _opened(runner: _Runner, run_id: str, last_event_id: str | None,
            heartbeat_s: float) -> tuple[Iterator[bytes] | None, int, str]:
    """The run's frames with the first one already read, so that an unknown run (404) or a
    ``Last-Event-ID`` that is no event id (400) is still an HTTP status; else ``None``, the
    status and its text."""
    _check_heartbeat(heartbeat_s)
    try:
        frames = run_sse_events(runner, run_id, last_event_id, heartbeat_s=heartbeat_s)
        first = next(frames)
    except RunNotFoundError:
        return None, 404, (f"No run with id {run_id!r}: it never started here, or its store "
                           f"no longer has it.")
    except ValueError as exc:
        if last_event_id is None:
            raise
        return None, 400, f"Bad {LAST_EVENT_ID} header {last_event_id!r}: {exc}"
    except StopIteration:
        return iter(()), 200, ""
    return _prepend(first, frames), 200, ""


def _prepend(first: bytes, rest: Iterator[bytes]) -> Iterator[bytes]:
    """``first``, then ``rest``; closing this closes ``rest``."""
    try:
        yield first
        yield from rest
    finally:
        close = getattr(rest, "close", None)
        if callable(close):
            close()


def flask_run_response(runner: _Runner, run_id: str, *, last_event_id: str | None = None,
                       heartbeat_s: float = 15.0,
                       headers: Mapping[str, str] | None = None) -> flask.Response:
    """A ``flask.Response`` streaming the run ``run_id`` as SSE with ``id:`` lines.

    Call it inside a request: the ``Last-Event-ID`` header of ``flask.request`` says where
    to resume (``last_event_id`` overrides it). An unknown run is a 404 with a text saying
    so, a ``Last-Event-ID`` that is no event id a 400. The client leaving does not stop the
    run.
    """
    import flask

    if last_event_id is None and flask.has_request_context():
        last_event_id = flask.request.headers.get(LAST_EVENT_ID) or None
    frames, status, error = _opened(runner, run_id, last_event_id, heartbeat_s)
    if frames is None:
        return flask.Response(error, status=status, mimetype="text/plain")
    return flask.Response(frames, mimetype=_MIMETYPE, headers={**SSE_HEADERS, **(headers or {})})


def django_run_response(runner: _Runner, run_id: str, request: Any = None, *,
                        last_event_id: str | None = None, heartbeat_s: float = 15.0,
                        headers: Mapping[str, str] | None = None) -> Any:
    """A ``django.http.StreamingHttpResponse`` streaming the run ``run_id`` as SSE.

    Pass the view's ``request`` so its ``Last-Event-ID`` header says where to resume
    (``last_event_id`` overrides it). An unknown run is a 404 with a text saying so, a
    ``Last-Event-ID`` that is no event id a 400. The client leaving does not stop the run.
    """
    from django.http import (  # type: ignore[import-untyped, unused-ignore]
        HttpResponse,
        StreamingHttpResponse,
    )

    if last_event_id is None and request is not None:
        last_event_id = request.headers.get(LAST_EVENT_ID) or None
    frames, status, error = _opened(runner, run_id, last_event_id, heartbeat_s)
    if frames is None:
        return HttpResponse(error, status=status, content_type="text/plain; charset=utf-8")
    response = StreamingHttpResponse(frames, content_type=_MIMETYPE)
    for name, value in {**SSE_HEADERS, **(headers or {})}.items():
        response[name] = value
    return response
