"""pi-ai 1.6.1's classification of failed calls by error text: ``is_context_overflow``
(``isContextOverflow``) and ``is_retryable_error`` (``isRetryableAssistantError``), on pi's
example texts and on the messages piagent's adapters make from a local server's answers."""

from __future__ import annotations

from typing import Any

import pytest

from piagent.messages import AssistantMessage, Usage, UserMessage
from piagent.models import Model
from piagent.providers import (
    is_context_overflow,
    is_recoverable_length,
    is_retryable_error,
    stream_simple,
)
from piagent.stream import Context, StreamOptions
from tests.conftest import WAIT

from .sse_script import CUT, Reply, ScriptedServer, sse

KEY = "sk-test"

OVERFLOWS = [
    "prompt is too long: 213462 tokens > 200000 maximum",
    '413 {"error":{"type":"request_too_large","message":"Request exceeds the maximum size"}}',
    "Your input exceeds the context window of this model",
    "Requested token count exceeds the model's maximum context length of 131072 tokens",
    "litellm.ContextWindowExceededError: Context Window exceeded for given call.",
    "Input length (265330) exceeds model's maximum context length (262144).",
    "The input token count (1196265) exceeds the maximum number of tokens allowed (1048575)",
    "This model's maximum prompt length is 131072 but the request contains 537812 tokens",
    "Please reduce the length of the messages or completion",
    "This endpoint's maximum context length is 8192 tokens. However, you requested about 9000",
    "Input length 9000 exceeds the maximum allowed input length of 8192 tokens.",
    "The input (9000 tokens) is longer than the model's context length (8192 tokens).",
    "the request exceeds the available context size, try increasing it",
    "tokens to keep from the initial prompt is greater than the context length",
    "prompt token count of 9000 exceeds the limit of 8192",
    'github-copilot API error (413): {"message":"failed to parse request","code":""}',
    "invalid params, context window exceeds limit",
    "Your request exceeded model token limit: 9000 (requested: 9500)",
    "Prompt has 9,000 tokens, but the configured context size is 8,192 tokens",
    "Prompt contains 9000 tokens, too large for model with 8192 maximum context length",
    '{"code":"1261","message":"Prompt exceeds max length"}',
    "Range of input length should be [1, 30720]",
    "prompt too long; exceeded max context length by 12 tokens",
]
NOT_OVERFLOWS = [
    "ThrottlingException: Too many tokens, please wait before trying again. rate limit",
    "Throttling error: Too many tokens, please wait before trying again.",
    "request_too_large_widget is not a field",  # a longer identifier (1.6)
    "OpenAI API error (400): invalid model",
    "the body mentions 413 in passing",
]
RETRYABLE = [
    "Overloaded", "Rate limit reached for requests", "OpenAI API error (503): busy",
    "Cloudflare 525: SSL handshake failed",  # 525 is new in 1.6
    "The provider is temporarily unavailable. Retry shortly.",  # 1.6
    '{"type":"error","error":{"type":"api_error","message":"Unable to complete"}}',  # 1.6
    "Connection closed.", "read ECONNRESET", "connect ETIMEDOUT 1.2.3.4:443",  # 1.6
    "Provider finish_reason: error", "Provider returned an empty response",  # 1.6
    "waited 73.4s in queue, reaching this model's admission ceiling of 60s",  # 1.6
    "Unable to process request. Repeat the request later.",  # 1.6
    "Could not connect to OpenAI at 127.0.0.1:9 (connection refused)",
]
NOT_RETRYABLE = [
    "You exceeded your current quota: insufficient_quota (429)",
    '{"code":"1308","message":"usage limit reached"} 429',  # Z.ai plan limit (1.6)
    "OpenAI API error (400): invalid model", "request id 5290012 failed",
    "The provider is unavailable",  # without "temporarily": a lasting routing error
]


@pytest.mark.parametrize("text", OVERFLOWS)
def test_overflow_texts(text: str) -> None:
    assert is_context_overflow(text)
    assert is_context_overflow(AssistantMessage(stop_reason="error", error_message=text))


@pytest.mark.parametrize("text", NOT_OVERFLOWS)
def test_not_overflow_texts(text: str) -> None:
    assert not is_context_overflow(text)


@pytest.mark.parametrize("text", RETRYABLE)
def test_retryable_texts(text: str) -> None:
    assert is_retryable_error(text)
    assert is_retryable_error(AssistantMessage(stop_reason="error", error_message=text))
    # only a failed message counts
    assert not is_retryable_error(AssistantMessage(stop_reason="stop", error_message=text))


@pytest.mark.parametrize("text", NOT_RETRYABLE)
def test_not_retryable_texts(text: str) -> None:
    assert not is_retryable_error(text)


def test_silent_overflow_needs_the_context_window() -> None:
    full = AssistantMessage(stop_reason="stop", usage=Usage(input=900, cache_read=200))
    assert not is_context_overflow(full)
    assert is_context_overflow(full, context_window=1000)
    assert not is_context_overflow(full, context_window=1100)
    cut = AssistantMessage(stop_reason="length", usage=Usage(input=995, output=0))
    assert is_context_overflow(cut, context_window=1000)
    assert not is_context_overflow(
        AssistantMessage(stop_reason="length", usage=Usage(input=995, output=3)), 1000)


def test_cerebras_bodyless_overflow() -> None:
    text = "400 status code (no body)"
    assert is_context_overflow(
        AssistantMessage(stop_reason="error", error_message=text, provider="cerebras"))
    assert not is_context_overflow(
        AssistantMessage(stop_reason="error", error_message=text, provider="openai"))


def test_wrong_argument_names_the_function() -> None:
    with pytest.raises(TypeError, match=r"is_retryable_error\(\) takes an AssistantMessage "
                                        r"or its error text \(str\), got int"):
        is_retryable_error(3)  # type: ignore[arg-type]


def _fail(server: ScriptedServer, status: int, body: str) -> AssistantMessage:
    server.add(Reply(status=status, content_type="application/json", chunked=False,
                     body=[body.encode()]))
    model = Model(id="m", api="openai-completions", provider="openai",
                  base_url=server.url + "/v1")
    options: dict[str, Any] = {"api_key": KEY, "max_retries": 0}
    return stream_simple(model, Context([UserMessage("hi")]),
                         StreamOptions(**options)).result(WAIT)


def test_piagent_s_own_error_messages(sse_server: ScriptedServer) -> None:
    """The texts piagent's adapters make classify as pi-ai's do."""
    big = _fail(sse_server, 413, '{"error": {"message": "Request too big"}}')
    assert is_context_overflow(big) and not is_retryable_error(big), big.error_message
    busy = _fail(sse_server, 503, '{"error": {"message": "Service busy"}}')
    assert is_retryable_error(busy) and not is_context_overflow(busy), busy.error_message
    long = _fail(sse_server, 400, '{"error": {"message": "This model\'s maximum context '
                                  'length is 8192 tokens. However, you requested 9000"}}')
    assert is_context_overflow(long) and not is_retryable_error(long), long.error_message
    quota = _fail(sse_server, 429, '{"error": {"message": "You exceeded your current quota",'
                                   ' "code": "insufficient_quota"}}')
    assert not is_retryable_error(quota), quota.error_message


def test_piagent_s_mid_stream_failures_are_retryable(sse_server: ScriptedServer) -> None:
    """piagent's words for a stream cut short (not pi's Node texts) classify as transient."""
    chunk = sse({"id": "c", "choices": [{"index": 0, "delta": {"content": "hi"}}]})
    sse_server.add(Reply(body=[chunk, CUT]), Reply(body=[chunk, b'data: {"id":"c","cho']))
    model = Model(id="m", api="openai-completions", provider="openai",
                  base_url=sse_server.url + "/v1")
    for expected in ("broke in the middle of the response", "cut off in the middle of an event"):
        message = stream_simple(model, Context([UserMessage("hi")]),
                                StreamOptions(api_key=KEY)).result(WAIT)
        assert expected in (message.error_message or ""), message.error_message
        assert is_retryable_error(message) and not is_context_overflow(message)


def test_is_recoverable_length_as_pi_ai():
    """pi-ai 1.6.1's isRecoverableLength: a "length" stop below the wanted output limit."""
    from piagent.messages import Usage

    short = AssistantMessage(stop_reason="length", usage=Usage(output=900))
    assert is_recoverable_length(short, 4096)
    assert not is_recoverable_length(short, 900)  # it used the whole budget
    assert not is_recoverable_length(short, 0)
    done = AssistantMessage(stop_reason="stop", usage=Usage(output=900))
    assert not is_recoverable_length(done, 4096)
    with pytest.raises(TypeError, match=r"is_recoverable_length\(\) takes the AssistantMessage"):
        is_recoverable_length("length", 10)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="desired_max_output must be an int"):
        is_recoverable_length(short, 10.5)  # type: ignore[arg-type]
