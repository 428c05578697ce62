"""``start_stream``: one provider call as an ``AssistantMessageEventStream``, never raising.

The adapter's wire mapping (a generator) is pulled lazily on the thread that consumes the
stream; an abort from another thread delivers the final event and shuts the socket down.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import cast

from ..abort import AbortSignal
from ..errors import ProviderError, ProviderResponseError
from ..messages import AssistantMessage, ThinkingLevel
from ..models import Model, clamp_thinking_level
from ..stream import AssistantMessageEventStream, Context, ErrorEvent, StreamOptions
from ._builder import MessageBuilder
from ._call import ProviderCall
from ._errors import Aborted
from ._pool import HttpClient

__all__ = ["start_stream"]

_log = logging.getLogger("piagent.providers")


def start_stream(model: Model | None, options: StreamOptions | None,
                 run: Callable[[ProviderCall], Iterator[None]], *, context: Context,
                 client: HttpClient, api: str, label: str,
                 abort_text: str | None = None) -> AssistantMessageEventStream:
    """Return the event stream of one provider call at once; never raises.

    ``run`` is the adapter's wire mapping, a generator (a bare ``yield`` after each wire
    event): it runs lazily on the thread that consumes the stream, so no thread is started
    and no event crosses threads, which is what the agent loop wants. A missing model, an
    exception from
    ``run`` and an abort all end the stream with an ``ErrorEvent``. ``label`` names the
    provider in messages ("OpenAI"); ``abort_text``, when given, is the error text of an
    abort (else "Request was aborted", with the signal's reason).
    """
    options = options if options is not None else StreamOptions()
    if model is None:
        stream = AssistantMessageEventStream()
        _fail_without_model(stream, api)
        return stream
    if model.thinking_level_map is not None and options.reasoning \
            and options.reasoning != "off" and model.reasoning and api != "anthropic-messages":
        # pi-ai's clampThinkingLevel: the nearest level the model offers (pi-ai 1.6.1's
        # Anthropic adapter maps the level as asked: _anthropic_thinking)
        level = clamp_thinking_level(model, options.reasoning)
        if level != options.reasoning:
            options = replace(options, reasoning=cast("ThinkingLevel", level))
    signal = options.signal
    if signal is not None and signal.aborted:
        stream = AssistantMessageEventStream()
        MessageBuilder(model, stream, api=api).fail(_abort_text(signal, abort_text), aborted=True)
        return stream
    stream = AssistantMessageEventStream()
    out = MessageBuilder(model, stream, api=api)
    call = ProviderCall(model, context, options, out, client, label)
    unregister: Callable[[], None] = _noop

    def on_abort() -> None:
        # on the aborting thread: deliver the final event first, then wake the reader
        assert signal is not None
        out.fail(_abort_text(signal, abort_text), aborted=True)
        call.abort_transport()

    def body() -> Iterator[None]:
        try:
            yield from run(call)
            if not out.ended:
                msg = f"The {label} adapter returned without finishing the message."
                raise ProviderResponseError(msg, provider=model.provider)
        except Aborted:
            out.fail(_abort_text(signal, abort_text), aborted=True)
        except ProviderError as exc:
            if signal is not None and signal.aborted:
                out.fail(_abort_text(signal, abort_text), aborted=True)
            else:
                out.fail(call.redact(str(exc)))
        except Exception as exc:  # the reader's top level: becomes the error message
            if signal is not None and signal.aborted:
                out.fail(_abort_text(signal, abort_text), aborted=True)
            else:
                _log.exception("Unexpected error in the %s adapter", label)
                out.fail(call.redact(f"Unexpected error in the {label} adapter: "
                                     f"{type(exc).__name__}: {exc}"))
        finally:
            unregister()
            call.close()

    if signal is not None:
        unregister = signal.on_abort(on_abort)
    stream.pull_from(body(), signal)
    return stream


def _noop() -> None:
    return None


def _abort_text(signal: AbortSignal | None, fixed: str | None = None) -> str:
    if fixed is not None:
        return fixed
    reason = signal.reason if signal is not None else None
    if reason is None:
        return "Request was aborted"
    return f"Request was aborted: {reason}"


def _fail_without_model(stream: AssistantMessageEventStream, api: str) -> None:
    message = AssistantMessage(api=api, stop_reason="error", error_message=(
        "No model was given. Pass a model, e.g. "
        "Agent(model=get_model('openai', 'gpt-4o-mini')) or stream_simple(model, ...)."))
    stream.push(ErrorEvent("error", message))
    stream.end()

