"""``OutputSchema``: a typed final answer as a tool the model calls to finish.

The output type is a dataclass, a ``TypedDict``, a pydantic v2 model (duck-typed), a
``Literal``, an ``Enum`` (or any other hint ``@tool`` understands), or a JSON Schema dict. Its schema comes from the same hint
machinery as ``@tool``'s (``_hints``); an object schema is the tool's parameters as it
is, anything else is wrapped as the one property ``result``. The loop validates and
coerces the arguments like any tool's; ``parse`` then builds the typed value (a dataclass
instance, an Enum member, ...). The tool's result asks the loop to stop (``terminate``).
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable
from typing import Any, Generic, TypeVar, overload

from ..abort import AbortSignal
from ..messages import TextContent
from ._hints import converter_for, schema_for, unwrap_annotated
from ._tool import AgentTool, AgentToolResult, ToolUpdateFn

__all__ = ["OutputSchema"]

T = TypeVar("T")

DEFAULT_OUTPUT_TOOL = "final_result"
_ACCEPTED = "Final result accepted."
_DEFAULT_DESCRIPTION = ("Give your final answer by calling this tool once, when you have it; "
                        "its arguments are the answer. Do not answer in text instead.")


class OutputSchema(Generic[T]):
    """What a run must answer with, and the final-result tool that asks the model for it.

    ``OutputSchema(Weather)`` (a dataclass) → ``parse(arguments)`` returns a ``Weather``.
    ``tool()`` is a fresh ``AgentTool`` named ``name`` whose ``execute`` builds the value
    (a failure there is an error result the model sees, like a validation failure) and
    returns ``terminate=True`` with the arguments as ``details``.
    """

    @overload
    def __init__(self: OutputSchema[T], output_type: type[T], *, name: str = ...,
                 description: str | None = ...) -> None: ...

    @overload
    def __init__(self: OutputSchema[Any], output_type: object, *, name: str = ...,
                 description: str | None = ...) -> None: ...

    def __init__(self, output_type: Any, *, name: str = DEFAULT_OUTPUT_TOOL,
                 description: str | None = None) -> None:
        if not isinstance(name, str) or not name:
            msg = f"the output tool's name must be a non-empty str, got {name!r}."
            raise ValueError(msg)
        self.output_type = output_type
        self.name = name
        schema, convert = _schema_and_converter(output_type)
        self.wrapped = not _is_object_schema(schema)
        if self.wrapped:
            inner = schema
            schema = {"type": "object", "properties": {"result": inner},
                      "required": ["result"], "additionalProperties": False}
        self.parameters: dict[str, Any] = schema
        self._convert = convert
        described = schema.get("description") if not self.wrapped else None
        self.description = description or (
            f"{described}\n\n{_DEFAULT_DESCRIPTION}" if isinstance(described, str)
            else _DEFAULT_DESCRIPTION)

    def __repr__(self) -> str:
        return f"OutputSchema({_type_name(self.output_type)}, name={self.name!r})"

    def parse(self, arguments: Any) -> T:
        """The typed value from validated, coerced arguments (``TypeError``/``ValueError``
        from the type's own constructor propagate)."""
        value = arguments["result"] if self.wrapped else arguments
        return value if self._convert is None else self._convert(value)  # type: ignore[no-any-return]

    def tool(self) -> AgentTool:
        """A new final-result tool for one run."""
        def execute(tool_call_id: str, params: dict[str, Any], signal: AbortSignal,
                    on_update: ToolUpdateFn) -> AgentToolResult:
            try:
                self.parse(params)
            except Exception as exc:  # the type refused the value: the model retries
                text = (f"The final result was not accepted: {type(exc).__name__}: {exc}. "
                        f"Call {self.name} again with corrected arguments.")
                return AgentToolResult(content=[TextContent(text)], is_error=True)
            return AgentToolResult(content=[TextContent(_ACCEPTED)], details=params,
                                   terminate=True)

        return AgentTool(name=self.name, description=self.description,
                         parameters=self.parameters, execute=execute, label="final result",
                         execution_mode="sequential", replay="safe")


def _schema_and_converter(output_type: Any) -> tuple[dict[str, Any], Callable[[Any], Any] | None]:
    if isinstance(output_type, dict):
        import jsonschema  # loaded on first use, as the tools' validator is

        try:
            jsonschema.validators.validator_for(output_type).check_schema(output_type)
        except jsonschema.SchemaError as exc:
            msg = f"output_type: the JSON Schema dict is not a valid schema: {exc.message}"
            raise ValueError(msg) from None
        return dict(output_type), None
    if output_type is None or isinstance(output_type, (str, int, float, list, tuple)):
        msg = (f"output_type must be a type (a dataclass, TypedDict, Enum, Literal[...], "
               f"list[X], ...) or a JSON Schema dict, not {output_type!r}.")
        raise TypeError(msg)
    try:
        schema = schema_for(output_type, frozenset())
    except TypeError as exc:
        msg = (f"output_type {_type_name(output_type)} has no JSON Schema ({exc}); use a "
               f"dataclass, TypedDict, pydantic model, Enum, Literal[...], a builtin or a "
               f"JSON Schema dict.")
        raise TypeError(msg) from None
    return schema, converter_for(output_type)


def _is_object_schema(schema: dict[str, Any]) -> bool:
    return schema.get("type") == "object" and isinstance(schema.get("properties"), dict)


def _type_name(output_type: Any) -> str:
    base, _ = unwrap_annotated(output_type)
    if isinstance(base, dict):
        return "<JSON Schema>"
    if isinstance(base, type) and typing.get_origin(base) is None:
        kind = "dataclass " if dataclasses.is_dataclass(base) else ""
        return f"{kind}{base.__qualname__}"
    return repr(base)
