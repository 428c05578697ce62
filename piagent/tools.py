"""Tools: ``AgentTool``, ``AgentToolResult``, the ``@tool`` decorator, argument validation.

``@tool`` turns a plain function into an ``AgentTool``: the JSON Schema comes from its type
hints, the descriptions from its docstring. ``validate_tool_arguments`` coerces and checks a
model's arguments (compiled schemas and error text live in ``piagent._schema``). Running
tools is the loop's job, not this module's.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import enum
import inspect
import json
import re
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias, Union, overload

from ._schema import compile_schema, format_error_text
from .abort import AbortSignal
from .errors import ToolArgumentError
from .messages import ImageContent, TextContent, Usage

__all__ = [
    "AgentTool",
    "AgentToolResult",
    "ToolExecuteFn",
    "ToolUpdateFn",
    "tool",
    "validate_tool_arguments",
]


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
    ``replay`` is carried for harnesses and not used by the loop.

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
    execution_mode: Literal["sequential", "parallel"] | None = None
    replay: Literal["never", "safe"] | None = None


def validate_tool_arguments(tool: AgentTool, arguments: Any) -> Any:
    """Return a coerced deep copy of ``arguments`` that satisfies ``tool.parameters``.

    Coercion follows AJV's ``coerceTypes: true`` (``"5"`` → ``5`` for an integer,
    ``"true"`` → ``True``, ``5`` → ``"5"`` for a string, ``null`` → ``""``/``0``/``False``)
    and also wraps a scalar in a list where an array is expected. The schema is compiled
    once and cached. If the schema itself is invalid a warning is logged and the arguments
    are returned unchanged.

    Raises:
        ToolArgumentError: the arguments fail the schema. The message is pi's:
            ``Validation failed for tool "<name>":`` then one ``  - <path>: <message>``
            line per error, then the original arguments as indented JSON.
    """
    compiled = compile_schema(tool.parameters)
    if compiled.validator is None:
        return arguments
    coerced = compiled.coerce(arguments)
    check = compiled.check
    if check is not None and check(coerced):
        return coerced
    errors = compiled.errors(coerced)
    if not errors:
        return coerced
    msg = format_error_text(tool.name, errors, arguments)
    raise ToolArgumentError(
        msg, tool_name=tool.name, errors=[f"{path}: {message}" for path, message in errors]
    )


# --- @tool -----------------------------------------------------------------------------

_INJECTED = frozenset({"signal", "on_update", "tool_call_id"})
_NO_DEFAULT: Any = inspect.Parameter.empty
Converter: TypeAlias = Callable[[Any], Any]


@overload
def tool(
    fn: Callable[..., Any],
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    label: str | None = None,
    execution_mode: Literal["sequential", "parallel"] | None = None,
    prepare_arguments: Callable[[Any], Any] | None = None,
    replay: Literal["never", "safe"] | None = None,
) -> AgentTool: ...


@overload
def tool(
    fn: None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    label: str | None = None,
    execution_mode: Literal["sequential", "parallel"] | None = None,
    prepare_arguments: Callable[[Any], Any] | None = None,
    replay: Literal["never", "safe"] | None = None,
) -> Callable[[Callable[..., Any]], AgentTool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    label: str | None = None,
    execution_mode: Literal["sequential", "parallel"] | None = None,
    prepare_arguments: Callable[[Any], Any] | None = None,
    replay: Literal["never", "safe"] | None = None,
) -> AgentTool | Callable[[Callable[..., Any]], AgentTool]:
    """Build an ``AgentTool`` from a plain (synchronous) function.

    Use as ``@tool``, ``@tool(name=...)`` or ``tool(fn, name=..., description=...)``. The
    name defaults to the function's; the description and each parameter's description
    come from the docstring (Google ``Args:`` or reST ``:param x:``). The schema comes
    from the type hints: ``str``, ``int``, ``float``, ``bool``, ``Optional[X]``/``X |
    None``, ``list[X]``, ``tuple``, ``set[X]``, ``dict[str, X]``, ``Literal``, ``Enum``,
    ``TypedDict``, dataclasses, ``Any`` and ``Annotated[X, "description"]``; a parameter
    with a default is not required, and extra properties are refused unless the function
    takes ``**kwargs``. Parameters named ``signal``, ``on_update`` and ``tool_call_id`` are
    injected by the loop and not declared.

    The function runs on a pool thread with the validated arguments: an Enum parameter
    gets the member, a dataclass parameter an instance, a TypedDict a dict. Its return
    value becomes the result: an ``AgentToolResult`` as is, a ``str`` as text content,
    ``None`` as empty content, content blocks as content, and anything else as JSON text
    with the value in ``structured_content``.

    Raises:
        TypeError: a parameter's type has no JSON Schema, or ``fn`` is a coroutine function.
    """

    def build(f: Callable[..., Any]) -> AgentTool:
        return _build_tool(
            f,
            name=name,
            description=description,
            label=label,
            execution_mode=execution_mode,
            prepare_arguments=prepare_arguments,
            replay=replay,
        )

    return build if fn is None else build(fn)


@dataclass(frozen=True)
class _Param:
    name: str
    positional_only: bool
    default: Any
    convert: Converter | None


class _FunctionExecute:
    """The ``execute`` callable of a ``@tool``: maps arguments in and the result out."""

    def __init__(
        self, fn: Callable[..., Any], params: list[_Param], injected: list[str], var_kw: bool
    ) -> None:
        self.__wrapped__ = fn
        self._params = params
        self._injected = injected
        self._var_kw = var_kw
        self._declared = frozenset(p.name for p in params) | _INJECTED

    def __call__(
        self,
        tool_call_id: str,
        params: dict[str, Any],
        signal: AbortSignal,
        on_update: ToolUpdateFn,
    ) -> AgentToolResult:
        injected = {"tool_call_id": tool_call_id, "signal": signal, "on_update": on_update}
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        for p in self._params:
            if p.name in self._injected:
                value = injected[p.name]
            elif p.name in params:
                value = params[p.name]
                if p.convert is not None:
                    value = p.convert(value)
            elif not p.positional_only:
                continue  # the function's own default applies
            elif p.default is not _NO_DEFAULT:
                value = p.default
            else:
                msg = f"missing required argument {p.name!r}"
                raise TypeError(msg)
            if p.positional_only:
                args.append(value)
            else:
                kwargs[p.name] = value
        if self._var_kw:
            for key, value in params.items():
                if key not in self._declared:
                    kwargs[key] = value
        return _to_result(self.__wrapped__(*args, **kwargs))


def _build_tool(
    fn: Callable[..., Any],
    *,
    name: str | None,
    description: str | None,
    label: str | None,
    execution_mode: Literal["sequential", "parallel"] | None,
    prepare_arguments: Callable[[Any], Any] | None,
    replay: Literal["never", "safe"] | None,
) -> AgentTool:
    if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
        msg = f"Tool function {fn!r} is async; piagent runs tools on threads, pass a def."
        raise TypeError(msg)
    tool_name = name or getattr(fn, "__name__", None)
    if not tool_name:
        msg = f"Cannot name a tool after {fn!r}; pass name=..."
        raise TypeError(msg)
    summary, param_docs = _parse_docstring(inspect.getdoc(fn))
    hints = _type_hints(fn)
    properties: dict[str, Any] = {}
    required: list[str] = []
    params: list[_Param] = []
    injected: list[str] = []
    var_kw = False
    for p in inspect.signature(fn).parameters.values():
        if p.kind is inspect.Parameter.VAR_POSITIONAL:
            continue
        if p.kind is inspect.Parameter.VAR_KEYWORD:
            var_kw = True
            continue
        positional_only = p.kind is inspect.Parameter.POSITIONAL_ONLY
        if p.name in _INJECTED:
            injected.append(p.name)
            params.append(_Param(p.name, positional_only, p.default, None))
            continue
        hint, note = _unwrap_annotated(hints.get(p.name, Any))
        try:
            schema = _schema_for(hint, frozenset())
        except TypeError as exc:
            msg = f"Tool {tool_name!r}: parameter {p.name!r}: {exc}"
            raise TypeError(msg) from None
        text = param_docs.get(p.name) or note
        if text:
            schema = {**schema, "description": text}
        if p.default is _NO_DEFAULT:
            required.append(p.name)
        else:
            default = _jsonable(p.default)
            if isinstance(default, (str, int, float, bool, type(None))):
                schema["default"] = default
        properties[p.name] = schema
        params.append(_Param(p.name, positional_only, p.default, _converter_for(hint)))
    parameters: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        parameters["required"] = required
    parameters["additionalProperties"] = var_kw
    return AgentTool(
        name=tool_name,
        description=summary if description is None else description,
        parameters=parameters,
        execute=_FunctionExecute(fn, params, injected, var_kw),
        label=label,
        prepare_arguments=prepare_arguments,
        execution_mode=execution_mode,
        replay=replay,
    )


def _type_hints(obj: Any) -> dict[str, Any]:
    try:
        return typing.get_type_hints(obj, include_extras=True)
    except NameError as exc:
        msg = f"cannot resolve the type hints of {obj!r}: {exc}"
        raise TypeError(msg) from exc
    except TypeError:
        # not a function, class or module: try a callable object's __call__, once
        if inspect.isclass(obj) or not callable(obj):
            return {}
        try:
            return typing.get_type_hints(type(obj).__call__, include_extras=True)
        except (NameError, TypeError):
            return {}


def _unwrap_annotated(hint: Any) -> tuple[Any, str | None]:
    """``Annotated[X, "text"]`` → ``(X, "text")``."""
    if typing.get_origin(hint) is typing.Annotated:
        base, *extras = typing.get_args(hint)
        note = next((e for e in extras if isinstance(e, str)), None)
        return base, note
    return hint, None


# --- type hints → JSON Schema --------------------------------------------------------

_NONE_TYPE = type(None)
_SEQUENCES = (
    list,
    collections.abc.Sequence,
    collections.abc.MutableSequence,
    collections.abc.Iterable,
    collections.abc.Collection,
)
_SETS = (set, frozenset, collections.abc.Set, collections.abc.MutableSet)
_MAPPINGS = (dict, collections.abc.Mapping, collections.abc.MutableMapping)
_SCALARS: dict[Any, str] = {bool: "boolean", int: "integer", float: "number", str: "string"}


def _json_type(value: Any) -> str | None:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if value is None:
        return "null"
    return None


def _enum_schema(values: list[Any]) -> dict[str, Any]:
    kinds = {_json_type(v) for v in values}
    if len(kinds) == 1 and None not in kinds:
        return {"type": kinds.pop(), "enum": values}
    return {"enum": values}


def _is_union(origin: Any) -> bool:
    return origin is Union or origin is types.UnionType


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    t = schema.get("type")
    if isinstance(t, str) and "anyOf" not in schema:
        out = {**schema, "type": [t, "null"]}
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
        return out
    return {"anyOf": [schema, {"type": "null"}]}


def _schema_for(hint: Any, seen: frozenset[Any]) -> dict[str, Any]:
    hint, note = _unwrap_annotated(hint)
    schema = _bare_schema_for(hint, seen)
    return {**schema, "description": note} if note else schema


def _bare_schema_for(hint: Any, seen: frozenset[Any]) -> dict[str, Any]:
    if hint is Any or hint is object:
        return {}
    if hint is None or hint is _NONE_TYPE:
        return {"type": "null"}
    if hint in _SCALARS:
        return {"type": _SCALARS[hint]}
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if _is_union(origin):
        members = [a for a in args if a is not _NONE_TYPE]
        nullable = len(members) < len(args)
        if len(members) == 1:
            inner = _schema_for(members[0], seen)
            return _nullable(inner) if nullable else inner
        branches = [_schema_for(a, seen) for a in members]
        return {"anyOf": branches + ([{"type": "null"}] if nullable else [])}
    if origin is Literal:
        return _enum_schema([a.value if isinstance(a, enum.Enum) else a for a in args])
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return _enum_schema([m.value for m in hint])
    if typing.is_typeddict(hint):
        return _typeddict_schema(hint, seen)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _dataclass_schema(hint, seen)
    container = origin or hint
    if container is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": _schema_for(args[0], seen)}
        if not args:
            return {"type": "array"}
        if args == ((),):
            return {"type": "array", "maxItems": 0}
        return {
            "type": "array",
            "items": [_schema_for(a, seen) for a in args],
            "minItems": len(args),
            "maxItems": len(args),
        }
    if container in _SETS:
        out: dict[str, Any] = {"type": "array", "uniqueItems": True}
        if args:
            out["items"] = _schema_for(args[0], seen)
        return out
    if container in _SEQUENCES:
        return {"type": "array", "items": _schema_for(args[0], seen)} if args else {"type": "array"}
    if container in _MAPPINGS:
        if args:
            if args[0] not in (str, Any):
                msg = f"dict keys must be str in JSON, not {args[0]!r}"
                raise TypeError(msg)
            return {"type": "object", "additionalProperties": _schema_for(args[1], seen)}
        return {"type": "object"}
    msg = f"no JSON Schema for type {hint!r}"
    raise TypeError(msg)


def _class_doc(cls: type) -> str | None:
    doc = cls.__doc__
    # dataclasses invent "Name(field: type, ...)"; TypedDicts inherit dict's docstring
    if not doc or doc.startswith(cls.__name__ + "(") or doc == dict.__doc__:
        return None
    return inspect.cleandoc(doc)


def _object_schema(
    cls: type, hints: Mapping[str, Any], required: list[str], seen: frozenset[Any]
) -> dict[str, Any]:
    if cls in seen:
        return {"type": "object"}  # a recursive type: do not recurse forever
    inner = seen | {cls}
    out: dict[str, Any] = {
        "type": "object",
        "properties": {k: _schema_for(h, inner) for k, h in hints.items()},
    }
    if required:
        out["required"] = required
    out["additionalProperties"] = False
    doc = _class_doc(cls)
    if doc:
        out["description"] = doc
    return out


def _typeddict_schema(cls: Any, seen: frozenset[Any]) -> dict[str, Any]:
    hints = _type_hints(cls)
    required_keys = cls.__required_keys__
    hints = {k: _strip_required(h) for k, h in hints.items()}
    return _object_schema(cls, hints, [k for k in hints if k in required_keys], seen)


_REQUIRED_WRAPPERS = tuple(
    w for w in (getattr(typing, "Required", None), getattr(typing, "NotRequired", None)) if w
)


def _strip_required(hint: Any) -> Any:
    if _REQUIRED_WRAPPERS and typing.get_origin(hint) in _REQUIRED_WRAPPERS:
        return typing.get_args(hint)[0]
    return hint


def _dataclass_fields(cls: type) -> list[dataclasses.Field[Any]]:
    return [f for f in dataclasses.fields(cls) if f.init]


def _dataclass_schema(cls: type, seen: frozenset[Any]) -> dict[str, Any]:
    all_hints = _type_hints(cls)
    fields = _dataclass_fields(cls)
    hints = {f.name: all_hints.get(f.name, Any) for f in fields}
    required = [
        f.name
        for f in fields
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    return _object_schema(cls, hints, required, seen)


# --- JSON values → Python parameter values --------------------------------------------


def _converter_for(hint: Any, seen: frozenset[Any] = frozenset()) -> Converter | None:
    """A function turning a validated JSON value into what the hint promises, or ``None``
    when the JSON value already is that."""
    hint, _ = _unwrap_annotated(hint)
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if hint is float:
        return _to_float
    if _is_union(origin):
        members = [a for a in args if a is not _NONE_TYPE]
        if len(members) != 1:
            return None  # an ambiguous union: pass the JSON value through
        inner = _converter_for(members[0], seen)
        if inner is None:
            return None
        return lambda v: None if v is None else inner(v)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return lambda v: hint(v)
    if hint in seen:
        return None
    if typing.is_typeddict(hint):
        hints = {k: _strip_required(h) for k, h in _type_hints(hint).items()}
        return _mapping_converter(hints, seen | {hint})
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        all_hints = _type_hints(hint)
        names = [f.name for f in _dataclass_fields(hint)]
        build = _mapping_converter({n: all_hints.get(n, Any) for n in names}, seen | {hint})
        cls = hint
        return lambda v: cls(**(build(v) if build is not None else v))
    container = origin or hint
    if container is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            item = _converter_for(args[0], seen)
            return lambda v: tuple(v if item is None else map(item, v))
        converters = [_converter_for(a, seen) for a in args]
        return lambda v: tuple(
            x if c is None else c(x) for x, c in zip(v, converters, strict=False)
        )
    if container in _SETS:
        item = _converter_for(args[0], seen) if args else None
        kind = frozenset if container is frozenset else set
        return lambda v: kind(v if item is None else map(item, v))
    if container in _SEQUENCES and args:
        item = _converter_for(args[0], seen)
        return None if item is None else (lambda v: [item(x) for x in v])
    if container in _MAPPINGS and args:
        value = _converter_for(args[1], seen)
        return None if value is None else (lambda v: {k: value(x) for k, x in v.items()})
    return None


def _to_float(value: Any) -> Any:
    return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


def _mapping_converter(hints: Mapping[str, Any], seen: frozenset[Any]) -> Converter | None:
    converters = {k: c for k, h in hints.items() if (c := _converter_for(h, seen)) is not None}
    if not converters:
        return None
    return lambda v: {k: (converters[k](x) if k in converters else x) for k, x in v.items()}


# --- results -------------------------------------------------------------------------


def _jsonable(value: Any) -> Any:
    """``value`` with dataclasses, Enums, tuples and sets turned into JSON types."""
    if isinstance(value, enum.Enum):
        return _jsonable(value.value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in value]
    return value


def _to_result(value: Any) -> AgentToolResult:
    if isinstance(value, AgentToolResult):
        return value
    if value is None:
        return AgentToolResult(content=[])
    if isinstance(value, str):
        return AgentToolResult(content=[TextContent(text=value)])
    if isinstance(value, (TextContent, ImageContent)):
        return AgentToolResult(content=[value])
    if (
        isinstance(value, (list, tuple))
        and value
        and all(isinstance(b, (TextContent, ImageContent)) for b in value)
    ):
        return AgentToolResult(content=list(value))
    data = _jsonable(value)
    text = json.dumps(data, ensure_ascii=False, default=str)
    return AgentToolResult(content=[TextContent(text=text)], structured_content=data)


# --- docstrings ----------------------------------------------------------------------

_GOOGLE_SECTION = re.compile(
    r"(?:Args|Arguments|Parameters|Params|Keyword Args|Keyword Arguments|Kwargs)\s*:\s*"
)
_GOOGLE_ENTRY = re.compile(r"\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:(.*)")
_REST_PARAM = re.compile(r":param\s+(?:[^:]*\s)?\*{0,2}(\w+)\s*:(.*)")
_REST_TYPE = re.compile(r":type\s+\w+\s*:")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Split a docstring into the tool description and per-parameter descriptions.

    The parameter sections (Google ``Args:``, reST ``:param x:``/``:type x:``) are taken
    out; everything else stays in the description.
    """
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    params: dict[str, str] = {}
    kept: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if _indent(line) == 0 and _GOOGLE_SECTION.fullmatch(stripped):
            i = _parse_google_args(lines, i + 1, params)
            continue
        rest = _REST_PARAM.fullmatch(stripped)
        if rest or _REST_TYPE.match(stripped):
            i += 1
            text = rest.group(2).strip() if rest else ""
            while i < len(lines) and lines[i].strip() and _indent(lines[i]) > _indent(line):
                text = f"{text} {lines[i].strip()}".strip()
                i += 1
            if rest:
                params[rest.group(1)] = text
            continue
        kept.append(line)
        i += 1
    description = re.sub(r"\n{3,}", "\n\n", "\n".join(kept)).strip()
    return description, params


def _parse_google_args(lines: list[str], i: int, params: dict[str, str]) -> int:
    """Read an ``Args:`` body starting at line ``i``; return the index after it."""
    base: int | None = None
    current: str | None = None
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            # a blank line ends the section unless an indented line follows
            if i + 1 < len(lines) and lines[i + 1].strip() and _indent(lines[i + 1]) > 0:
                i += 1
                continue
            return i
        indent = _indent(line)
        if indent == 0:
            return i
        if base is None:
            base = indent
        entry = _GOOGLE_ENTRY.fullmatch(line.strip())
        if indent <= base and entry:
            current = entry.group(1)
            params[current] = entry.group(2).strip()
        elif current is not None:
            params[current] = f"{params[current]} {line.strip()}".strip()
        i += 1
    return i
