"""pi-ai's classification of a failed call by its error text: context overflow, transient.

``is_context_overflow`` follows pi-ai 1.6.1's ``isContextOverflow`` and
``is_retryable_error`` its ``isRetryableAssistantError``: the same patterns, matched
case-insensitively against ``AssistantMessage.error_message`` (or a text). Pure functions of
their arguments: callable from any thread.
"""

from __future__ import annotations

import re

from ..messages import AssistantMessage

__all__ = ["is_context_overflow", "is_retryable_error"]

# pi-ai 1.6.1 utils/overflow.js: the words each provider uses when the input is larger than
# the model's context window (or the request larger than the provider takes)
_OVERFLOW = re.compile("|".join((
    r"prompt (?:is )?too long",  # Anthropic, z.ai
    r"prompt exceeds max length",  # z.ai (CN)
    r"(?<![a-z0-9_])request_too_large(?![a-z0-9_])",  # Anthropic's byte-size error code
    r"input is too long for requested model",  # Amazon Bedrock
    r"exceeds the context window",  # OpenAI
    r"exceeds (?:the )?(?:model'?s )?maximum context length(?: of [\d,]+ tokens?|\s*\([\d,]+\))",
    r"context window exceeded",  # LiteLLM's pre-call check
    r"input token count.*exceeds the maximum",  # Google
    r"maximum prompt length is \d+",  # xAI
    r"reduce the length of the messages",  # Groq
    r"maximum context length is \d+ tokens",  # OpenRouter
    r"exceeds (?:the )?maximum allowed input length of [\d,]+ tokens?",  # OpenRouter/Poolside
    r"input \(\d+ tokens\) is longer than the model'?s context length \(\d+ tokens\)",  # Together
    r"exceeds the limit of \d+",  # GitHub Copilot
    r"exceeds the available context size",  # llama.cpp
    r"greater than the context length",  # LM Studio
    r"context window exceeds limit",  # MiniMax
    r"exceeded model token limit",  # Kimi For Coding
    r"too large for model with \d+ maximum context length",  # Mistral
    r"prompt has [\d,]+ tokens?, but the configured context size is [\d,]+ tokens?",  # DS4
    r"model_context_window_exceeded",  # z.ai's finish reason as error text
    r"prompt too long; exceeded (?:max )?context length",  # Ollama
    r"range of input length should be",  # DashScope / Qwen
    r"context[_ ]length[_ ]exceeded",
    r"too many tokens",
    r"token limit exceeded",
    # HTTP 413 at the start (a raw status or "<Label> API error (413):"), whatever the body says
    r"^(?:[\w -]+ API error \(413\):|413(?:\s|:|$))",
)), re.IGNORECASE)
_CEREBRAS_BODYLESS = re.compile(r"^4(?:00|13)\s*(?:status code)?\s*\(no body\)", re.IGNORECASE)
# throttling that an overflow pattern would match too ("Too many tokens, please wait ...")
_NOT_OVERFLOW = re.compile(r"^(?:Throttling error|Service unavailable):|rate limit|too many requests",
                           re.IGNORECASE)

# pi-ai 1.6.1 utils/retry.js: quota, budget and plan limits: never transient, even as a 429
_NOT_RETRYABLE = re.compile("|".join((
    'GoUsageLimitError',
    'FreeUsageLimitError',
    'Monthly usage limit reached',
    'available balance',
    'insufficient_quota',
    'out of budget',
    'quota exceeded',
    'billing',
    'subscription_sharing_usage_limit_exceeded',
    'subscription_sharing_workplace_individual_usage_limit_exceeded',
    r'"code"\s*:\s*"?1308(?![0-9])',  # Z.ai's plan limit (a 429)
)), re.IGNORECASE)
# load, status codes, gateway and transport failures, streams cut short
_RETRYABLE = re.compile("|".join((
    'overloaded',
    'server_busy',
    'servers are currently busy',
    'currently experiencing high demand',
    'model is at capacity',
    'admission ceiling',
    'rate.?limit',
    'too many requests',
    'rate increased too quickly',
    '(?<![a-z0-9])(?:429|500|502|503|504|520|524|525)(?![a-z0-9])',
    'service.?(?:is.?)?(?:temporarily.?)?unavailable',
    'provider.?(?:is.?)?temporarily.?unavailable',
    'server.?error',
    'internal.?error',
    'provider.?returned.?(?:an.?)?error',
    r'"type"\s*:\s*"api_error"',  # Anthropic's internal error
    'exceeded request buffer limit while retrying upstream',
    'unable to forward upstream',
    'upstream.?request.?failed',
    'upstream_stream_read_error',
    'stream was interrupted',
    'http/?2 stream failed',
    'network.?error',
    'connection.?error',
    'connection.?refused',
    'connection.?lost',
    'connection.?closed',
    'other side closed',
    'fetch failed',
    r"request to \\S+ failed, reason:",
    'getaddrinfo',
    '(?<![a-z0-9_])(?:ECONNRESET|ECONNABORTED|ECONNREFUSED|ETIMEDOUT|EPIPE)(?![a-z0-9_])',
    'connection reset by peer',
    'ENOTFOUND',
    'EAI_AGAIN',
    'upstream.?connect',
    'reset before headers',
    'socket hang up',
    'socket connection was closed',
    'timed? out',
    'timeout',
    'terminated',
    'websocket.?closed',
    'websocket.?error',
    'websocket.?connection.?limit.?reached',
    'ended without',
    'stream ended before message_stop',
    'stream ended before a terminal response event',
    'http2 request did not get a response',
    'provider finish_reason: error',
    'provider stopped with: error',
    'returned an empty response',
    'stopped before completing the response',
    'stream disconnected before completion',
    'cut short after the reply had begun',
    'ended the response before it was complete',
    'connection to the provider was reset',
    'reported a failure while generating the response',
    'pending stream has been canceled',
    'retry delay',
    'you can retry your request',
    'try your request again',
    'please retry your request',
    'repeat the request later',
    'ResourceExhausted',
    'subscription_sharing_usage_unavailable',
    'subscription_sharing_user_unavailable',
)), re.IGNORECASE)


# piagent's own wording for the same failures (its adapters do not relay Node's error texts):
# a refused or timed-out connection, a body cut off mid-stream (docs/providers.md, Retries)
_PIAGENT_RETRYABLE = re.compile(
    r"^Could not connect to |broke in the middle of the response|cut off in the middle of an "
    r"event", re.IGNORECASE)


def _text(message: AssistantMessage | str, name: str) -> str | None:
    if isinstance(message, str):
        return message
    if isinstance(message, AssistantMessage):
        return message.error_message if message.stop_reason == "error" else None
    msg = f"{name}() takes an AssistantMessage or its error text (str), got {type(message).__name__}."
    raise TypeError(msg)


def is_context_overflow(message: AssistantMessage | str, context_window: int | None = None) -> bool:
    """Whether a failed call was refused because its input is too large for the model.

    ``message``: the ``AssistantMessage`` a call ended with (its ``error_message`` is read
    when ``stop_reason == "error"``) or an error text. As pi-ai 1.6.1's
    ``isContextOverflow``: the error text of most providers (Anthropic, OpenAI, Gemini, xAI,
    Groq, OpenRouter, Mistral, llama.cpp, LM Studio, Ollama, ...; an HTTP 413), not a
    rate-limit text; with ``context_window`` (a message only), also a silent overflow: a
    ``"stop"`` whose ``input + cache_read`` exceeds it, or a ``"length"`` with no output whose
    input fills 99 % of it.
    """
    text = _text(message, "is_context_overflow")
    if text and not _NOT_OVERFLOW.search(text):
        if _OVERFLOW.search(text):
            return True
        if (isinstance(message, AssistantMessage) and message.provider == "cerebras"
                and _CEREBRAS_BODYLESS.search(text)):
            return True
    if context_window and isinstance(message, AssistantMessage):
        used = message.usage.input + message.usage.cache_read
        if message.stop_reason == "stop" and used > context_window:
            return True
        if (message.stop_reason == "length" and message.usage.output == 0
                and used >= context_window * 0.99):
            return True
    return False


def is_retryable_error(message: AssistantMessage | str) -> bool:
    """Whether a failed call looks transient, so running the turn again may succeed.

    ``message``: an ``AssistantMessage`` (only ``stop_reason == "error"`` counts) or an error
    text. As pi-ai 1.6.1's ``isRetryableAssistantError``: overload, rate limits, 429/5xx and
    Cloudflare's 520/524/525, gateway and connection failures, streams cut short (also in
    piagent's own wording: "Could not connect to …", "… broke in the middle of the response",
    "… cut off in the middle of an event"); never a quota, budget, billing or plan limit. Check ``is_context_overflow`` first: an overflow
    needs a smaller context, not a retry.
    """
    text = _text(message, "is_retryable_error")
    if not text or _NOT_RETRYABLE.search(text):
        return False
    return _RETRYABLE.search(text) is not None or _PIAGENT_RETRYABLE.search(text) is not None


def is_recoverable_length(message: AssistantMessage, desired_max_output: int) -> bool:
    """Whether a ``"length"`` stop ended below the output limit the caller wanted
    (``desired_max_output``: the limit before any clamping to the context window).

    As pi-ai 1.6.1's ``isRecoverableLength``: the context left too little room (piagent's
    requests clamp the limit to the window) or the provider cut the answer short, so one
    compaction and a retry may give the whole answer; a ``"length"`` that reached the limit
    is the model running out of the budget it was given.
    """
    if not isinstance(message, AssistantMessage):
        msg = ("is_recoverable_length() takes the AssistantMessage a call ended with, got "
               f"{type(message).__name__}.")
        raise TypeError(msg)
    if isinstance(desired_max_output, bool) or not isinstance(desired_max_output, int):
        msg = ("is_recoverable_length(): desired_max_output must be an int (the output limit "
               f"before clamping), got {type(desired_max_output).__name__}.")
        raise TypeError(msg)
    return (message.stop_reason == "length" and desired_max_output > 0
            and message.usage.output < desired_max_output)
