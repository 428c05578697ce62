"""Provider failures as messages: HTTP error text, retry decisions, secret redaction.

Owned here: how a provider's error body becomes one readable sentence (API keys never
included), which statuses are retried and how long to wait. ``_call`` uses these while it
makes a request; nothing here does I/O.
"""

from __future__ import annotations

import email.utils
import errno
import json
import re
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import ProviderError

MESSAGE_BODY_LIMIT = 4000  # characters of a provider body quoted in a message (pi's cap)
_RETRYABLE_STATUS = frozenset({408, 409, 429})


_MIN_FRAGMENT = 6  # the shortest cut-off start of a secret still redacted before "…" or the end
_WORD = r"[\w-]"  # characters a short secret's neighbours must not be, so words keep letters
_LONG_SECRET = 16  # a secret this long is no word: redacted wherever it appears, even glued


def redact(text: str, secrets: tuple[str, ...]) -> str:
    """``text`` with each secret replaced by ``[redacted]``, in one pass.

    A short secret (under 16 characters, e.g. a proxy token) counts only as a whole token
    (not inside a longer word), so it never rewrites ordinary words; a longer one (an API
    key) is redacted wherever it appears, even glued to other text. The replacement is
    never redacted again. A secret cut off by truncation ("sk-abc…" or at the very end)
    is redacted too.
    """
    secrets = tuple(s for s in secrets if s)
    if not secrets or not text:
        return text
    return _pattern(secrets).sub("[redacted]", text)


def _pattern(secrets: tuple[str, ...]) -> re.Pattern[str]:
    # built per call, never cached: only error texts are redacted, and a module-level cache
    # would keep the keys alive in memory after their requests are over
    alternatives = []
    for secret in sorted(set(secrets), key=len, reverse=True):
        long = len(secret) >= _LONG_SECRET
        before, after = ("", "") if long else (f"(?<!{_WORD})", f"(?!{_WORD})")
        alternatives.append(before + re.escape(secret) + after)
        # the start of the secret where a cut left it: before "…" or at the end of the text
        alternatives.extend(before + re.escape(secret[:k]) + r"(?=…|\Z)"
                            for k in range(len(secret) - 1, _MIN_FRAGMENT - 1, -1))
    return re.compile("|".join(alternatives))


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, the cut marked with "…".

    Every cut of text that may hold a secret goes through here: ``redact`` recognises a
    secret's start right before "…", so a key that straddles the cut leaves no prefix
    behind even when the text is quoted (``{clip(data, 200)!r}``).
    """
    return text if len(text) <= limit else text[:limit] + "…"


def describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return clip(text, 500)


_ERRNO_WORDS = {
    errno.ECONNREFUSED: "connection refused",
    errno.ECONNRESET: "connection reset",
    errno.EHOSTUNREACH: "host unreachable",
    errno.ENETUNREACH: "network unreachable",
    errno.ETIMEDOUT: "timed out",
}


def connection_reason(exc: BaseException) -> str:
    """Why a connection failed, in plain words ("connection refused", "name not found"),
    from the OS error at the bottom of requests' and urllib3's wrappers."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, socket.gaierror):
            return "the host name was not found"
        if isinstance(current, (socket.timeout, TimeoutError)):
            return "timed out"
        if isinstance(current, OSError) and current.errno in _ERRNO_WORDS:
            return _ERRNO_WORDS[current.errno]
        nested = current.args[0] if current.args and isinstance(current.args[0], BaseException) \
            else getattr(current, "reason", None)
        current = nested if isinstance(nested, BaseException) else (
            current.__cause__ or current.__context__)
    text = describe(exc)
    found = re.search(r"\[Errno -?\d+\] ([^'\")]+)", text)
    return found.group(1).strip().lower() if found else text


def error_details(body_text: str) -> tuple[str, str | None]:
    """(message, code) from a provider's JSON error body, else the text itself."""
    try:
        data: Any = json.loads(body_text)
    except ValueError:
        return body_text.strip(), None
    if isinstance(data, list) and data and isinstance(data[0], dict):
        data = data[0]  # Gemini sometimes wraps the error object in a list
    if not isinstance(data, dict):
        return body_text.strip(), None
    err = data.get("error", data)
    if isinstance(err, str):
        return err, None
    if not isinstance(err, dict):
        return body_text.strip(), None
    message = err.get("message") or data.get("message") or body_text.strip()
    # the most telling code: a name ("insufficient_quota", "UNAVAILABLE") over a number
    names = [c for c in (err.get("code"), err.get("type"), err.get("status"))
             if isinstance(c, str) and c and not c.isdigit()]
    code = names[0] if names else None
    if isinstance(code, int) and isinstance(err.get("status"), str):
        code = err["status"]  # Google: the numeric code only repeats the HTTP status
    metadata = err.get("metadata")
    if isinstance(metadata, dict) and isinstance(metadata.get("raw"), str):
        message = f"{message} ({metadata['raw']})"  # OpenRouter's upstream error
    return str(message), code


_STATUS_HINTS = {
    401: "Check the API key (options.api_key or the provider's environment variable).",
    403: "Check that the API key may use this model.",
    404: "Check the model id and the base URL.",
    429: "The provider is rate limiting or out of quota; wait, then retry.",
}


def format_http_error(label: str, status: int, body_text: str) -> str:
    """pi's ``<Provider> API error (<status>): <message>`` plus a hint on what to do."""
    message, code = error_details(body_text)
    if not message:
        message = "(no body)"
    message = clip(message, MESSAGE_BODY_LIMIT)
    head = f"{label} API error ({status}, {code})" if code and code not in message else \
        f"{label} API error ({status})"
    hint = _STATUS_HINTS.get(status) or ("The provider had a server error; retry later."
                                         if status >= 500 else "")
    text = f"{head}: {message}"
    if hint:
        text = f"{text.rstrip('.')}. {hint}"
    return text


def retry_delay_s(headers: Mapping[str, str], body_text: str) -> float | None:
    """The delay the server asked for, in seconds, from headers or a Google-style body."""
    value = headers.get("retry-after-ms")
    if value:
        try:
            return max(float(value) / 1000.0, 0.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value:
        try:
            return max(float(value), 0.0)
        except ValueError:
            try:
                when = email.utils.parsedate_to_datetime(value)
                return max(when.timestamp() - time.time(), 0.0)
            except (TypeError, ValueError):
                pass
    found = re.search(r'"retryDelay"\s*:\s*"([\d.]+)s"', body_text) or \
        re.search(r"[Pp]lease retry in ([\d.]+)(m?s)", body_text)
    if found:
        seconds = float(found.group(1))
        if found.lastindex == 2 and found.group(2) == "ms":
            seconds /= 1000.0
        return seconds
    return None


def is_retryable(status: int, headers: Mapping[str, str], body_text: str) -> bool:
    should = headers.get("x-should-retry")
    if should == "true":
        return True
    if should == "false":
        return False
    if "insufficient_quota" in body_text or "enforced_spend_limit_reached" in body_text:
        return False  # out of money: waiting does not help
    return status in _RETRYABLE_STATUS or status >= 500


@dataclass
class Failure:
    """Why one attempt failed; ``delay`` is the server-requested wait in seconds."""

    error: ProviderError
    retryable: bool = True
    delay: float | None = None


class Aborted(Exception):
    """The signal fired; unwinds the worker. Never leaves this package."""
