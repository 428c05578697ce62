"""The results the loop makes itself, for calls it answers without their tool's own result:
not found, aborted, blocked, failed, denied, never run or cut off. Each is an error the model
reads (pi's ``createErrorToolResult``): content and empty details; the failure is the
call's ``is_error``, not a field of the result. ``clean_result``: any result without lone
surrogates."""

from __future__ import annotations

import dataclasses
import logging
import traceback

from ..messages import TextContent, ToolCall, sanitize_surrogates as _clean
from ..tools import AgentToolResult

__all__ = ["ABORTED_TEXT", "DENIED_TEXT", "clean_result", "denied_result", "error_result",
           "exception_text", "failure_text", "tool_failure_result", "truncated_result",
           "unknown_outcome_result"]

_log = logging.getLogger("piagent.loop")

ABORTED_TEXT = "Operation aborted"
DENIED_TEXT = "Tool call denied by the user"


def error_result(text: str) -> AgentToolResult:
    return AgentToolResult(content=[TextContent(text)], details={})


def exception_text(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def failure_text(exc: BaseException) -> str:
    """What the model reads when a tool raised: ``KeyError: 'file'``, the type first."""
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def tool_failure_result(tool_name: str, exc: BaseException) -> AgentToolResult:
    """A raising tool's result; ``details["error"]`` keeps ``type``, ``message``, ``traceback``."""
    trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    _log.debug("Tool %r raised %s", tool_name, failure_text(exc), exc_info=exc)
    result = error_result(failure_text(exc))
    # a message can hold a lone surrogate (a file name os.fsdecode made): removed here too
    result.details = {"error": {"type": type(exc).__name__,
                                "message": _clean(str(exc)),
                                "traceback": _clean(trace)}}
    return result


def denied_result(reason: str | None) -> AgentToolResult:
    """``Tool call denied by the user: <reason>`` (``...user.`` without one)."""
    return error_result(f"{DENIED_TEXT}: {reason}" if reason else f"{DENIED_TEXT}.")


def unknown_outcome_result(call: ToolCall) -> AgentToolResult:
    """The result of a call that was running when its process stopped and is not replayed."""
    return error_result(
        f"The process stopped while tool {call.name!r} was running (call {call.id}), so its "
        f"outcome is unknown; it was not run again. Check whether it took effect before "
        f"calling it again, or ask the user.")


def truncated_result(call: ToolCall) -> AgentToolResult:
    """The result of a call in a response cut off by the output token limit (not executed)."""
    return error_result(
        f'Tool call "{call.name}" was not executed: the response hit the output token '
        "limit, so its arguments may be truncated. Re-issue the tool call with complete "
        "arguments.")


def clean_result(result: AgentToolResult) -> AgentToolResult:
    """``result`` without lone surrogates in its text (pi-ai's ``sanitizeSurrogates``;
    ``details`` is cleaned where it is serialized); ``result`` itself when it has none."""
    for block in result.content:
        if (type(block) is TextContent and not block.text.isascii()
                and _clean(block.text) is not block.text):
            return dataclasses.replace(result, content=[
                dataclasses.replace(b, text=_clean(b.text))
                if isinstance(b, TextContent) else b for b in result.content])
    return result
