"""``AgentTool`` and ``AgentToolResult``, and the validation of a model's arguments.

Compiled schemas, AJV-style coercion and pi's error text live in ``_schema``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from ..abort import AbortSignal
from ..errors import ToolArgumentError
from ..messages import ImageContent, TextContent, Usage
from ._coerce import clone
from ._errortext import format_error_text, huge_integer_errors
from ._schema import compile_schema

__all__ = [
    "AgentTool",
    "AgentToolResult",
    "ReplayPolicy",
    "ToolExecuteFn",
    "ToolExecutionMode",
    "ToolUpdateFn",
    "validate_tool_arguments",
]

ToolExecutionMode: TypeAlias = Literal["parallel", "sequential"]
"""How a batch runs: every call at once on the pool, or one after another."""

ReplayPolicy: TypeAlias = Literal["never", "safe"]
"""Whether a call that started but has no result may be run again after a crash."""


@dataclass
class AgentToolResult:
    """What a tool returns: content for the model, and data for the application."""

    content: list[TextContent | ImageContent] = field(default_factory=list)
    """Text and images sent back to the model."""
    details: Any = None
    """Application data (for UIs and logs); not sent to the model."""
    structured_content: Any = None
    """A JSON-able form of the result, carried at runtime (not copied into the message)."""
    usage: Usage | None = None
    """What the tool itself spent, if it called a model."""
    is_error: bool = False
    """Report a failure without raising."""
    terminate: bool = False
    """Ask the loop to stop after the current tool batch."""


ToolUpdateFn: TypeAlias = Callable[[AgentToolResult], None]
"""``on_update(partial_result)``: hands a progress update to the loop and returns at once."""

ToolExecuteFn: TypeAlias = Callable[
    [str, dict[str, Any], AbortSignal, ToolUpdateFn], AgentToolResult
]
"""``execute(tool_call_id, params, signal, on_update) -> AgentToolResult``."""


@dataclass
class AgentTool:
    """A tool the model may call.

    ``parameters`` is the JSON Schema of the arguments. ``execute(tool_call_id, params,
    signal, on_update)`` runs on a pool thread, possibly concurrently with other tools (and
    with itself) unless ``execution_mode`` is ``"sequential"``; it receives the validated,
    coerced arguments, should watch ``signal`` (an ``AbortSignal``) if it runs long, and
    fails by raising or by returning ``is_error=True``. ``on_update(partial)`` emits a
    ``tool_execution_update`` event; calls after ``execute`` returned are ignored.
    ``prepare_arguments(raw)`` may rewrite the raw arguments before validation.
    ``replay`` says whether ``Agent.resume()`` may run a call again that was running when
    its process stopped: ``"safe"`` runs it again, ``"never"`` or ``None`` does not (the
    call gets an unknown-outcome error result; docs/sessions.md). ``needs_approval``
    (``True``, or a function of the validated arguments returning a bool) makes a call wait
    for ``Agent.approve()``/``deny()`` before it runs (docs/approvals.md). ``timeout``
    (seconds, or ``None``: the agent's ``tool_timeout``) bounds one call: past it the call
    gets an error result, its signal is aborted and its thread is left to finish on its own
    (docs/tools.md, "Timeouts").

    Thread safety: treat a tool as immutable while a run uses it; do not change
    ``parameters`` in place (assign a new dict instead).
    """

    name: str
    description: str
    parameters: dict[str, Any]
    execute: ToolExecuteFn
    label: str | None = None
    prepare_arguments: Callable[[Any], Any] | None = None
    output_schema: dict[str, Any] | None = None
    execution_mode: ToolExecutionMode | None = None
    replay: ReplayPolicy | None = None
    needs_approval: bool | Callable[[Any], bool] = False
    timeout: float | None = None

    def __post_init__(self) -> None:
        if self.timeout is not None:
            self.timeout = check_tool_timeout(self.timeout, f"AgentTool {self.name!r}: timeout")
        ask = self.needs_approval
        if not (ask is True or ask is False or callable(ask)):
            msg = (f"AgentTool {self.name!r}: needs_approval must be True, False or a function "
                   f"of the validated arguments returning a bool, not {type(ask).__name__}.")
            raise TypeError(msg)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the function a ``@tool`` was built from, as it was written (for unit tests).

        ``add(1, 2)`` runs ``add`` directly: no validation, no result conversion. A tool
        built by hand has no such function; call its ``execute`` instead.
        """
        fn = getattr(self.execute, "__wrapped__", None)
        if fn is None:
            msg = (f"AgentTool {self.name!r} was not built by @tool, so there is no function "
                   f"to call; call tool.execute(tool_call_id, params, signal, on_update).")
            raise TypeError(msg)
        return fn(*args, **kwargs)


def check_tool_timeout(value: object, where: str) -> float | None:
    """``value`` as seconds (a positive finite number) or ``None``; ``TypeError`` or
    ``ValueError`` naming ``where`` otherwise."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        msg = (f"{where} must be a positive number of seconds or None (no limit), not "
               f"{type(value).__name__}.")
        raise TypeError(msg)
    if not 0 < value < float("inf"):
        msg = f"{where} must be a positive number of seconds or None (no limit), got {value!r}."
        raise ValueError(msg)
    return float(value)


def validate_tool_arguments(tool: AgentTool, arguments: Any) -> Any:
    """Return a coerced deep copy of ``arguments`` that satisfies ``tool.parameters``.

    As pi-ai 1.6.1 does (pi-schema's coercion): an optional property given ``null`` whose
    schema does not accept ``null`` is removed; values are converted to their schema's type
    (``"5"`` → ``5`` and ``2.5`` → ``2`` for an integer, ``"true"`` → ``True``, ``5`` →
    ``"5"`` and ``null`` → ``"null"`` for a string, ``"2"`` → ``2`` for an ``enum`` of
    numbers), a single value where an array is expected becomes a one-element array, and
    the conversion follows ``$ref``s and unions. A ``$ref`` that names nothing rejects only
    the values at its place. The schema is compiled once and cached. If the schema itself is
    invalid a warning is logged and the arguments are returned unchanged.

    Raises:
        ToolArgumentError: the arguments fail the schema. The message is pi-ai's:
            ``Validation failed for tool "<name>":`` then one ``  - <path>: <message>``
            line per error in pi-ai 1.6.1's words (``path: missing``, ``a.1: expected
            number, got string``, ``extra: unknown field``), then the original arguments as
            indented JSON.
    """
    compiled = compile_schema(tool.parameters)
    if compiled.validator is None:
        return arguments
    too_deep = False
    try:
        check = compiled.check
        if compiled.stable and check is not None and check(arguments):
            return clone(arguments)  # coercion would change nothing
        coerced = compiled.coerce(arguments)
        if check is not None and check(coerced):
            return coerced
        errors = compiled.errors(coerced)
    except RecursionError:
        too_deep = True
        errors = [("root", "must not be nested more than "
                           f"{sys.getrecursionlimit()} levels deep")]
    except ValueError:  # jsonschema's message quotes an int too long for repr()
        errors = huge_integer_errors(arguments)
        if not errors:
            raise
    if not errors:
        return coerced
    msg = format_error_text(tool.name, errors, arguments, too_deep=too_deep)
    raise ToolArgumentError(
        msg, tool_name=tool.name, errors=[f"{path}: {message}" for path, message in errors]
    )
