"""Server-Sent Events for web views: stream an agent run to a browser.

``sse_events(agent.stream(input))`` turns agent events into ``data: <json>\\n\\n`` frames
(``event_to_dict``, pi's camelCase JSON). ``flask_response`` and ``django_response`` wrap
that in the framework's streaming response. When the client goes away the framework closes
the response iterator; that closes the ``agent.stream`` iterator, which aborts the run.
Flask and Django are imported only inside their function; neither is a dependency.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .agent import RUN_SETTLED
from .errors import AgentBusyError
from .events import event_to_dict

if TYPE_CHECKING:
    import flask

    from .agent import Agent
    from .messages import AgentMessage, ImageContent

__all__ = ["SSE_HEADERS", "django_response", "encode_sse", "flask_response", "sse_events"]

_log = logging.getLogger(__name__)

SSE_HEADERS: Mapping[str, str] = {
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",  # nginx: pass each frame on at once
}
"""Headers every SSE response should carry (the content type is set separately)."""

_MIMETYPE = "text/event-stream"

def encode_sse(data: Any, event: str | None = None) -> bytes:
    """One server-sent event: optional ``event:`` line, then ``data: <compact json>``."""
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()


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
