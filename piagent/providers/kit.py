"""The adapter kit: what you need to write a provider adapter (a stream function).

An adapter maps one vendor's wire format onto pi's assistant events; everything else
(connection pooling, POST with retries, abort, SSE parsing, error texts, key redaction)
is here, shared by the built-in adapters. A complete, runnable example is in
``docs/providers.md`` ("Writing an adapter"). The shape::

    CLIENT = HttpClient("foo")                      # one per adapter module; pools sessions

    def stream_foo(model: Model | None, context: Context,
                   options: StreamOptions | None = None) -> AssistantMessageEventStream:
        return start_stream(model, options, run, context=context, client=CLIENT,
                            api="foo-api", label="Foo")

    def run(call: ProviderCall) -> Iterator[None]:  # runs on the consumer's thread
        body = {"model": call.model.id, "messages": [...]}      # from call.messages
        parse = call.event_parser()                 # on_provider_stream_event, if set
        # call.request: the SSERequest with on_payload, identity, timeout_ms, on_response
        with call.open_sse(call.request(url, body, headers)) as sse:
            for event in sse.events():              # SSEEvent(event, data, truncated)
                chunk = parse(event, call.label)
                i = call.out.open_text()            # MessageBuilder: pushes text_start
                call.out.add_text(i, "...")         # text_delta
                call.out.set_usage(input=..., output=...)   # cost recomputed
                yield                               # hand the queued events to the consumer
        call.out.close_open_blocks()                # *_end for every block still open
        call.out.finish("stop")                     # done; or raise ProviderError(...)

``run`` is a generator, pulled lazily by whoever iterates the stream (no thread per
request): each bare ``yield`` hands the events queued so far to the consumer.

Rules for ``run``:

* Raise ``ProviderError`` (or a subclass) with a message that says what happened and what to
  do; ``start_stream`` turns it into the final ``ErrorEvent``. Any other exception becomes
  "Unexpected error in the Foo adapter: ..." and is logged with its traceback.
* Never catch ``requests`` exceptions: ``open_sse`` and ``SSEResponse.events`` map them.
* An abort (``options.signal``) ends the stream at once with ``stop_reason="aborted"`` (from
  the aborting thread) and shuts the socket down so the blocked read returns; later pushes
  are dropped.
* Errors before the response body (HTTP status, content type, connection) are retried:
  ``SSERequest.max_retries``, else ``StreamOptions.max_retries``, else 2. Nothing is retried
  once the body has started.
* Read the key with ``resolve_api_key(model.provider, options.api_key, options.env)``; say
  what to set with ``missing_key_message``; ``call.add_secret(key)`` redacts a key from
  every message.
* Build the request with ``call.request(url, body, headers)`` and parse events with
  ``call.event_parser()``: then ``on_payload``, ``on_response``,
  ``on_provider_stream_event``, ``identity`` and ``timeout_ms`` work on your adapter too.

Thread safety: ``HttpClient`` and ``start_stream`` may be used from any thread. A
``ProviderCall`` and its ``MessageBuilder`` belong to the thread running ``run``; only the
abort callback touches them from another thread (under the builder's lock).
"""

from __future__ import annotations

from ._builder import MessageBuilder
from ._call import DEFAULT_MAX_RETRIES, DEFAULT_MAX_RETRY_DELAY_MS, ProviderCall, SSEResponse
from ._errors import connection_reason, format_http_error, redact
from ._keys import (
    ENV_VARS,
    is_local_url,
    key_env_vars,
    key_owner,
    missing_key_message,
    provider_label,
    resolve_api_key,
)
from ._pool import HttpClient
from ._start import start_stream
from ._wire import (
    DEFAULT_TIMEOUT,
    SSEEvent,
    SSERequest,
    arguments_json,
    json_dumps,
    parse_event_json,
)

__all__ = [
    "DEFAULT_MAX_RETRIES",
    "DEFAULT_MAX_RETRY_DELAY_MS",
    "DEFAULT_TIMEOUT",
    "ENV_VARS",
    "HttpClient",
    "MessageBuilder",
    "ProviderCall",
    "SSEEvent",
    "SSERequest",
    "SSEResponse",
    "arguments_json",
    "connection_reason",
    "format_http_error",
    "is_local_url",
    "json_dumps",
    "key_env_vars",
    "key_owner",
    "missing_key_message",
    "parse_event_json",
    "provider_label",
    "redact",
    "resolve_api_key",
    "start_stream",
]
