"""``@tool``: an ``AgentTool`` from a plain function.

The JSON Schema comes from the type hints (``_hints``), the descriptions from the docstring
(``_docstrings``). Parameters named ``signal``, ``on_update`` and ``tool_call_id`` are
injected, not declared.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import json
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, overload

from ..abort import AbortSignal
from ..messages import ImageContent, TextContent
from ._docstrings import parse_docstring
from ._hints import Converter, converter_for, schema_for, type_hints, unwrap_annotated
from ._tool import (
    AgentTool,
    AgentToolResult,
    ReplayPolicy,
    ToolExecutionMode,
    ToolUpdateFn,
    check_tool_timeout,
)

__all__ = ["tool"]

_INJECTED = frozenset({"signal", "on_update", "tool_call_id"})
_NO_DEFAULT: Any = inspect.Parameter.empty

@overload
def tool(
    fn: Callable[..., Any],
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    label: str | None = None,
    execution_mode: ToolExecutionMode | None = None,
    prepare_arguments: Callable[[Any], Any] | None = None,
    replay: ReplayPolicy | None = None,
    needs_approval: bool | Callable[[Any], bool] = False,
    timeout: float | None = None,
) -> AgentTool: ...


@overload
def tool(
    fn: None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    label: str | None = None,
    execution_mode: ToolExecutionMode | None = None,
    prepare_arguments: Callable[[Any], Any] | None = None,
    replay: ReplayPolicy | None = None,
    needs_approval: bool | Callable[[Any], bool] = False,
    timeout: float | None = None,
) -> Callable[[Callable[..., Any]], AgentTool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    label: str | None = None,
    execution_mode: ToolExecutionMode | None = None,
    prepare_arguments: Callable[[Any], Any] | None = None,
    replay: ReplayPolicy | None = None,
    needs_approval: bool | Callable[[Any], bool] = False,
    timeout: float | None = None,
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
    with the value in ``structured_content``. ``timeout`` (seconds) bounds each call
    (``AgentTool.timeout``; docs/tools.md, "Timeouts").

    Raises:
        TypeError: a parameter's type has no JSON Schema, or ``fn`` is a coroutine function.
    """
    timeout = check_tool_timeout(timeout, "@tool(timeout=...)")

    def build(f: Callable[..., Any], stacklevel: int = 3) -> AgentTool:
        return _build_tool(
            f,
            name=name,
            description=description,
            label=label,
            execution_mode=execution_mode,
            prepare_arguments=prepare_arguments,
            replay=replay,
            stacklevel=stacklevel,
            needs_approval=needs_approval,
            timeout=timeout,
        )

    # a warning points at the decorated function's line: one frame more through tool()
    return build if fn is None else build(fn, 4)


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


def _warn_unannotated(fn: Callable[..., Any], tool_name: str, stacklevel: int) -> None:
    """A ``UserWarning`` naming the parameters without a type hint: the model is told
    nothing of what they take (any JSON value), and nothing is converted or checked."""
    bare = [p.name for p in inspect.signature(fn).parameters.values()
            if p.annotation is inspect.Parameter.empty and p.name not in _INJECTED
            and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)]
    if bare:
        names = ", ".join(repr(name) for name in bare)
        warnings.warn(f"@tool {tool_name!r}: parameter{'s' if len(bare) > 1 else ''} {names} "
                      f"{'have' if len(bare) > 1 else 'has'} no type hint, so the model may send "
                      f"any JSON value and nothing is checked; annotate "
                      f"{'them' if len(bare) > 1 else 'it'} ({bare[0]}: str, ...).",
                      UserWarning, stacklevel=stacklevel + 1)  # one frame deeper


def _build_tool(
    fn: Callable[..., Any],
    *,
    name: str | None,
    description: str | None,
    label: str | None,
    execution_mode: ToolExecutionMode | None,
    prepare_arguments: Callable[[Any], Any] | None,
    replay: ReplayPolicy | None,
    stacklevel: int = 3,
    needs_approval: bool | Callable[[Any], bool] = False,
    timeout: float | None = None,
) -> AgentTool:
    if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
        msg = f"Tool function {fn!r} is async; piagent runs tools on threads, pass a def."
        raise TypeError(msg)
    tool_name = name or getattr(fn, "__name__", None)
    if not tool_name or (name is None and tool_name == "<lambda>"):
        msg = (f"Cannot name a tool after {fn!r}; pass a name: tool(fn, name='my_tool', "
               f"description='...').")
        raise TypeError(msg)
    if not name and not tool_name.isidentifier():
        msg = f"Tool name {tool_name!r} is not a valid name; pass name=..."
        raise TypeError(msg)
    _check_not_method(fn, tool_name)
    summary, param_docs = parse_docstring(inspect.getdoc(fn))
    if description is None and not summary:
        warnings.warn(f"@tool {tool_name!r}: the function has no docstring, so the model gets "
                      f"an empty description; write one saying what it does, or pass "
                      f"description='...'.", UserWarning, stacklevel=stacklevel)
    _check_documented_params(fn, tool_name, param_docs)
    _warn_unannotated(fn, tool_name, stacklevel)
    hints = type_hints(fn)
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
        hint, note = unwrap_annotated(hints.get(p.name, Any))
        try:
            schema = schema_for(hint, frozenset())
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
        params.append(_Param(p.name, positional_only, p.default, converter_for(hint)))
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
        needs_approval=needs_approval,
        timeout=timeout,
    )


def _check_not_method(fn: Callable[..., Any], tool_name: str) -> None:
    """``@tool`` inside a class body would declare ``self`` to the model: refuse it."""
    if inspect.ismethod(fn):
        return  # bound: inspect.signature already leaves self out
    parameters = list(inspect.signature(fn).parameters)
    qualname = getattr(fn, "__qualname__", "")
    if parameters and parameters[0] in ("self", "cls") and "." in qualname \
            and "<locals>" not in qualname.rsplit(".", 2)[-2]:
        msg = (f"@tool on the method {qualname!r} would declare {parameters[0]!r} to the model. "
               f"Decorate a plain function, or build the tool from the bound method: "
               f"tool(instance.{tool_name}).")
        raise TypeError(msg)
    if parameters and parameters[0] == "self":
        msg = (f"Tool {tool_name!r}: its first parameter is 'self'; build the tool from a "
               f"bound method (tool(instance.{tool_name})), not the function.")
        raise TypeError(msg)


def _check_documented_params(fn: Callable[..., Any], tool_name: str,
                             param_docs: Mapping[str, str]) -> None:
    """An ``Args:`` entry for a parameter the function lacks is a typo or a stale doc."""
    names = set(inspect.signature(fn).parameters)
    unknown = [p for p in param_docs if p not in names]
    if unknown:
        msg = (f"Tool {tool_name!r}: the docstring documents {', '.join(map(repr, unknown))}, "
               f"which the function does not take; its parameters are "
               f"{', '.join(map(repr, names)) or 'none'}.")
        raise TypeError(msg)


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


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


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
    if isinstance(value, (bytes, bytearray, memoryview)):
        msg = (f"the tool returned {type(value).__name__}, which is not text; return a str "
               f"(value.decode()), or ImageContent(data=base64-text, mime_type=...).")
        raise TypeError(msg)
    if inspect.isgenerator(value) or isinstance(value, Iterator):
        msg = (f"the tool returned a {type(value).__name__}, which would be sent as its repr; "
               f"return a list (list(...)) or a str.")
        raise TypeError(msg)
    data = _jsonable(value)
    try:
        text = json.dumps(data, ensure_ascii=False, default=str, allow_nan=False)
    except ValueError as exc:
        msg = (f"the tool returned {_short(value)}, which JSON cannot carry ({exc}); "
               f"return None, a str, or a finite number instead.")
        raise ValueError(msg) from None
    return AgentToolResult(content=[TextContent(text=text)], structured_content=data)
