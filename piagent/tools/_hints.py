"""Type hints → JSON Schema, and JSON values → the Python values the hints ask for.

Used by ``@tool``: ``schema_for(hint)`` is a parameter's schema (str, int, float, bool,
Optional, list/tuple/set, dict, Literal, Enum, TypedDict, dataclass, Annotated);
``converter_for(hint)`` builds Enum members and dataclasses from validated JSON.

A pydantic v2 model is recognised by its methods, without importing pydantic: its schema is
``model_json_schema()`` (``$defs`` inlined) and its value ``model_validate(...)``, so its
validators run. Any other type pydantic knows (``datetime``, ``UUID``, ...) goes through
``pydantic.TypeAdapter`` when pydantic is installed (imported for such a type alone).
Dataclasses and TypedDicts keep the path above either way.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import enum
import inspect
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Literal, TypeAlias, Union

Converter: TypeAlias = Callable[[Any], Any]


def type_hints(obj: Any) -> dict[str, Any]:
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


def unwrap_annotated(hint: Any) -> tuple[Any, str | None]:
    """``Annotated[X, "text"]`` → ``(X, "text")``."""
    if typing.get_origin(hint) is typing.Annotated:
        base, *extras = typing.get_args(hint)
        note = next((e for e in extras if isinstance(e, str)), None)
        return base, note
    return hint, None


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


def schema_for(hint: Any, seen: frozenset[Any]) -> dict[str, Any]:
    hint, note = unwrap_annotated(hint)
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
            inner = schema_for(members[0], seen)
            return _nullable(inner) if nullable else inner
        branches = [schema_for(a, seen) for a in members]
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
            return {"type": "array", "items": schema_for(args[0], seen)}
        if not args:
            return {"type": "array"}
        if args == ((),):
            return {"type": "array", "maxItems": 0}
        return {
            "type": "array",
            "items": [schema_for(a, seen) for a in args],
            "minItems": len(args),
            "maxItems": len(args),
        }
    if container in _SETS:
        out: dict[str, Any] = {"type": "array", "uniqueItems": True}
        if args:
            out["items"] = schema_for(args[0], seen)
        return out
    if container in _SEQUENCES:
        return {"type": "array", "items": schema_for(args[0], seen)} if args else {"type": "array"}
    if container in _MAPPINGS:
        if args:
            if args[0] not in (str, Any):
                msg = f"dict keys must be str in JSON, not {args[0]!r}"
                raise TypeError(msg)
            return {"type": "object", "additionalProperties": schema_for(args[1], seen)}
        return {"type": "object"}
    if _is_model(hint):
        return _standalone(hint.model_json_schema())
    adapter = _type_adapter(hint)
    if adapter is not None:
        return _standalone(adapter.json_schema())
    msg = f"no JSON Schema for type {hint!r}"
    raise TypeError(msg)


def _is_model(hint: Any) -> bool:
    """A pydantic v2 model class (duck-typed: ``model_json_schema`` and ``model_validate``)."""
    return (isinstance(hint, type) and callable(getattr(hint, "model_json_schema", None))
            and callable(getattr(hint, "model_validate", None)))


def _type_adapter(hint: Any) -> Any:
    """``pydantic.TypeAdapter(hint)`` when pydantic is installed and takes the type, else
    ``None``. Only a type piagent has no schema for gets here, so pydantic is imported on
    that path alone (never by ``import piagent``)."""
    try:
        from pydantic import TypeAdapter
    except ImportError:
        return None
    try:
        adapter = TypeAdapter(hint)
        adapter.json_schema()
    except Exception:  # pydantic refuses it too: the caller's TypeError says so
        return None
    return adapter


_LOCAL_REF = "#/$defs/"


def _standalone(schema: dict[str, Any]) -> dict[str, Any]:
    """A pydantic schema with its ``$defs`` inlined: it may sit inside another schema (a
    tool's parameters) where ``#/$defs/...`` would point nowhere. A recursive reference
    becomes ``{"type": "object"}``, as for a recursive dataclass."""
    defs = schema.get("$defs")
    if not isinstance(defs, dict):
        return schema

    def inline(node: Any, open_refs: frozenset[str]) -> Any:
        if isinstance(node, list):
            return [inline(item, open_refs) for item in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(_LOCAL_REF) and ref[len(_LOCAL_REF):] in defs:
            name = ref[len(_LOCAL_REF):]
            rest = {k: inline(v, open_refs) for k, v in node.items() if k != "$ref"}
            if name in open_refs:
                return {"type": "object", **rest}
            return {**inline(defs[name], open_refs | {name}), **rest}
        return {k: inline(v, open_refs) for k, v in node.items() if k != "$defs"}

    out: dict[str, Any] = inline(schema, frozenset())
    return out


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
        "properties": {k: schema_for(h, inner) for k, h in hints.items()},
    }
    if required:
        out["required"] = required
    out["additionalProperties"] = False
    doc = _class_doc(cls)
    if doc:
        out["description"] = doc
    return out


def _typeddict_schema(cls: Any, seen: frozenset[Any]) -> dict[str, Any]:
    hints = type_hints(cls)
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
    all_hints = type_hints(cls)
    fields = _dataclass_fields(cls)
    hints = {f.name: all_hints.get(f.name, Any) for f in fields}
    required = [
        f.name
        for f in fields
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    return _object_schema(cls, hints, required, seen)


# --- JSON values → Python parameter values --------------------------------------------


def converter_for(hint: Any, seen: frozenset[Any] = frozenset()) -> Converter | None:
    """A function turning a validated JSON value into what the hint promises, or ``None``
    when the JSON value already is that."""
    hint, _ = unwrap_annotated(hint)
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if hint is float:
        return _to_float
    if _is_union(origin):
        members = [a for a in args if a is not _NONE_TYPE]
        if len(members) != 1:
            return None  # an ambiguous union: pass the JSON value through
        inner = converter_for(members[0], seen)
        if inner is None:
            return None
        return lambda v: None if v is None else inner(v)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return lambda v: hint(v)
    if hint in seen:
        return None
    if _is_model(hint):
        return hint.model_validate  # type: ignore[no-any-return]
    if typing.is_typeddict(hint):
        hints = {k: _strip_required(h) for k, h in type_hints(hint).items()}
        return _mapping_converter(hints, seen | {hint})
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        all_hints = type_hints(hint)
        names = [f.name for f in _dataclass_fields(hint)]
        build = _mapping_converter({n: all_hints.get(n, Any) for n in names}, seen | {hint})
        cls = hint
        return lambda v: cls(**(build(v) if build is not None else v))
    container = origin or hint
    if container is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            item = converter_for(args[0], seen)
            return lambda v: tuple(v if item is None else map(item, v))
        converters = [converter_for(a, seen) for a in args]
        return lambda v: tuple(
            x if c is None else c(x) for x, c in zip(v, converters, strict=False)
        )
    if container in _SETS:
        item = converter_for(args[0], seen) if args else None
        kind = frozenset if container is frozenset else set
        return lambda v: kind(v if item is None else map(item, v))
    if container in _SEQUENCES and args:
        item = converter_for(args[0], seen)
        return None if item is None else (lambda v: [item(x) for x in v])
    if container in _MAPPINGS and args:
        value = converter_for(args[1], seen)
        return None if value is None else (lambda v: {k: value(x) for k, x in v.items()})
    if origin is None and isinstance(hint, type) and hint not in _PLAIN:
        adapter = _type_adapter(hint)  # a type only pydantic knows (schema_for took it)
        return None if adapter is None else adapter.validate_python
    return None


_PLAIN = frozenset((object, str, int, bool, _NONE_TYPE, tuple, *_SEQUENCES, *_SETS, *_MAPPINGS))


def _to_float(value: Any) -> Any:
    return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


def _mapping_converter(hints: Mapping[str, Any], seen: frozenset[Any]) -> Converter | None:
    converters = {k: c for k, h in hints.items() if (c := converter_for(h, seen)) is not None}
    if not converters:
        return None
    return lambda v: {k: (converters[k](x) if k in converters else x) for k, x in v.items()}
