"""Compiled tool-argument schemas: AJV-style coercion, cached validators, pi's error lines.

Each schema is compiled once (``compile_schema``, cached by identity) into three parts: a
coercer that deep-copies the arguments while coercing them as AJV's ``coerceTypes: true``
does, a ``jsonschema`` validator, and, for the common keywords, a fast checker whose "valid"
answer lets a valid call skip ``jsonschema`` entirely (``jsonschema`` spends ~15 µs on even a
tiny object; the checker a few hundred ns). Any "invalid" answer, and any schema that uses a
keyword the checker does not know, goes to ``jsonschema``, which stays the authority and
produces the error list. The tool-facing API lives in ``piagent.tools``.
"""

from __future__ import annotations

import json
import logging
import math
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sized
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # jsonschema loads on first compile, keeping `import piagent` cheap
    import jsonschema
    from jsonschema.exceptions import ValidationError
    from jsonschema.protocols import Validator

__all__ = ["CompiledSchema", "compile_count", "compile_schema", "format_error_text"]

_log = logging.getLogger(__name__)

Coercer = Callable[[Any], Any]
Check = Callable[[Any], bool]

_CACHE_SIZE = 512
# guarded by _cache_lock; id(schema) -> (schema, compiled). The entry keeps the schema alive,
# so its id cannot be reused by another object while the entry exists.
_cache: OrderedDict[int, tuple[Any, CompiledSchema]] = OrderedDict()
_cache_lock = threading.Lock()  # guards _cache and _compilations
_compilations = 0  # guarded by _cache_lock


class CompiledSchema:
    """A schema compiled for argument validation.

    ``validator`` is ``None`` when the schema itself is invalid: validation is then skipped,
    as pi does when AJV cannot compile a schema.

    Thread safety: immutable after construction except that a schema found broken at
    validation time (an unresolvable ``$ref``) drops its validator; both are safe to share.
    """

    __slots__ = ("check", "coerce", "schema", "validator")

    def __init__(
        self, schema: Any, validator: Validator | None, coerce: Coercer, check: Check | None
    ) -> None:
        self.schema = schema
        self.validator = validator
        self.coerce = coerce
        self.check = check

    def errors(self, instance: Any) -> list[tuple[str, str]]:
        """Every validation error of ``instance`` as ``(path, message)``, in AJV's words."""
        validator = self.validator
        if validator is None:
            return []
        import referencing.exceptions

        out: list[tuple[str, str]] = []
        try:
            for error in validator.iter_errors(instance):
                _collect(error, out)
        except referencing.exceptions.Unresolvable as exc:
            _log.warning("Skipping argument validation: the schema has a bad $ref (%s)", exc)
            self.validator = None
            return []
        return out


def compile_count() -> int:
    """How many schemas have been compiled so far (for tests of the cache)."""
    with _cache_lock:
        return _compilations


def compile_schema(schema: Any) -> CompiledSchema:
    """The compiled form of ``schema``, compiled on first use and cached by identity.

    Treat a schema as immutable once a tool has been called: the cache does not notice
    in-place changes to the dict (assigning a new dict to ``tool.parameters`` is fine).
    """
    global _compilations
    key = id(schema)
    with _cache_lock:
        entry = _cache.get(key)
        if entry is not None and entry[0] is schema:
            _cache.move_to_end(key)
            return entry[1]
        compiled = _compile(schema)
        _compilations += 1
        _cache[key] = (schema, compiled)
        if len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
        return compiled


def _compile(schema: Any) -> CompiledSchema:
    if not isinstance(schema, (dict, bool)):
        _log.warning("Skipping argument validation: the schema is not a dict: %r", schema)
        return CompiledSchema(schema, None, _clone, None)
    import jsonschema
    from jsonschema.validators import validator_for

    cls = validator_for(schema, default=jsonschema.Draft7Validator)
    try:
        cls.check_schema(schema)  # type: ignore[arg-type]  # boolean schemas are valid
    except jsonschema.SchemaError as exc:
        _log.warning("Skipping argument validation: invalid JSON Schema (%s)", exc.message)
        return CompiledSchema(schema, None, _clone, None)
    validator = cls(_ajv_order(schema), format_checker=cls.FORMAT_CHECKER)
    coerce = _CoercerBuilder(schema).build(schema)
    try:
        check: Check | None = _CheckBuilder(validator).build(schema)
    except _Unsupported:
        check = None
    return CompiledSchema(schema, validator, coerce, check)


_AJV_FIRST = ("type", "required", "additionalProperties")


def _ajv_order(node: Any) -> Any:
    """A copy of ``node`` whose keywords come in AJV's order, so that jsonschema reports
    type, then missing, then unexpected properties before the errors inside them."""
    if isinstance(node, list):
        return [_ajv_order(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: _ajv_order(node[k]) for k in _AJV_FIRST if k in node}
    out.update((k, _ajv_order(v)) for k, v in node.items() if k not in out)
    return out


# --- deep copy and coercion ----------------------------------------------------------

_NO: Any = object()  # "this coercion does not apply"
_NUMERIC = re.compile(r"\s*-?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?\s*")
_INTEGER = re.compile(r"\s*-?[0-9]+\s*")


def _clone(value: Any) -> Any:
    """Deep-copy the JSON containers of ``value`` (tuples become lists)."""
    if isinstance(value, dict):
        return {k: _clone(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clone(v) for v in value]
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


_TYPE_TESTS: dict[str, Check] = {
    "string": lambda v: isinstance(v, str),
    # exact ints only: 5.0 is an integer to JSON Schema, but coercion turns it into 5
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": _is_number,
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
}


def _matches(value: Any, types: list[str] | None) -> bool:
    if types is None:
        return True
    for t in types:
        test = _TYPE_TESTS.get(t)
        if test is None or test(value):
            return True
    return False


def _js_string(value: float) -> str:
    """A number as JavaScript's ``String(n)`` writes it (``1.0`` → ``"1"``)."""
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    return repr(value)


def _to_number(value: Any, integer: bool) -> Any:
    if isinstance(value, bool):
        return int(value)
    if value is None:
        return 0
    if isinstance(value, float):
        # JSON "5.0" is an integer to JSON Schema; give Python code a real int
        return int(value) if integer and value.is_integer() else _NO
    if isinstance(value, str) and _NUMERIC.fullmatch(value):
        if _INTEGER.fullmatch(value):
            return int(value)
        number = float(value)
        if integer:
            return int(number) if number.is_integer() else _NO
        return number
    return _NO


def _to_string(value: Any) -> Any:
    if isinstance(value, bool):
        return "true" if value else "false"
    if _is_number(value):
        return _js_string(value)
    if value is None:
        return ""
    return _NO


def _to_boolean(value: Any) -> Any:
    if value == "true" or (_is_number(value) and value == 1):
        return True
    if value == "false" or (_is_number(value) and value == 0) or value is None:
        return False
    return _NO


def _to_null(value: Any) -> Any:
    if value == "" or value is False or (_is_number(value) and value == 0):
        return None
    return _NO


def _to_array(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool)):
        return [value]
    return _NO


_COERCIONS: dict[str, Callable[[Any], Any]] = {
    "number": lambda v: _to_number(v, False),
    "integer": lambda v: _to_number(v, True),
    "string": _to_string,
    "boolean": _to_boolean,
    "null": _to_null,
    "array": _to_array,
}


def _coerce_scalar(value: Any, types: list[str]) -> Any:
    # AJV tries the schema's types in order and keeps the first coercion that works
    for t in types:
        coercion = _COERCIONS.get(t)
        if coercion is not None:
            result = coercion(value)
            if result is not _NO:
                return result
    return value


def _types_of(schema: Any) -> list[str] | None:
    if not isinstance(schema, dict):
        return None
    t = schema.get("type")
    if isinstance(t, str):
        return [t]
    if isinstance(t, list) and all(isinstance(x, str) for x in t):
        return list(t)
    return None


def _resolve_pointer(root: Any, ref: str) -> Any:
    """The target of a local ``$ref`` (``#/$defs/X``), or ``None``."""
    if ref == "#":
        return root
    if not ref.startswith("#/"):
        return None
    node = root
    for raw in ref[2:].split("/"):
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


class _CoercerBuilder:
    """Turns a schema into a function that deep-copies and coerces an instance."""

    def __init__(self, root: Any) -> None:
        self.root = root
        self.refs: dict[str, Coercer] = {}

    def build(self, schema: Any) -> Coercer:
        if not isinstance(schema, dict):
            return _clone
        types = _types_of(schema)
        props = schema.get("properties")
        properties = {k: self.build(v) for k, v in props.items()} if isinstance(props, dict) else {}
        extra = schema.get("additionalProperties")
        additional = self.build(extra) if isinstance(extra, dict) else _clone
        items, prefix = self._items(schema)
        all_of = [self.build(s) for s in _schema_list(schema.get("allOf"))]
        any_of = [
            (self.build(s), _types_of(s))
            for key in ("anyOf", "oneOf")
            for s in _schema_list(schema.get(key))
        ]
        ref = schema.get("$ref")
        ref_coercer = self._ref(ref) if isinstance(ref, str) else None

        def coerce(value: Any) -> Any:
            if types is not None and not _matches(value, types):
                value = _coerce_scalar(value, types)
            if isinstance(value, dict):
                value = {k: properties.get(k, additional)(v) for k, v in value.items()}
            elif isinstance(value, (list, tuple)):
                n = len(prefix)
                value = [(prefix[i] if i < n else items)(v) for i, v in enumerate(value)]
            for c in all_of:
                value = c(value)
            if any_of:
                value = _coerce_any_of(value, any_of)
            if ref_coercer is not None:
                value = ref_coercer(value)
            return value

        return coerce

    def _items(self, schema: dict[str, Any]) -> tuple[Coercer, list[Coercer]]:
        items = schema.get("items")
        prefix_items = schema.get("prefixItems")
        if isinstance(items, list):  # draft 7 tuple form
            rest = schema.get("additionalItems")
            return (
                self.build(rest) if isinstance(rest, dict) else _clone,
                [self.build(s) for s in items],
            )
        prefix = [self.build(s) for s in _schema_list(prefix_items)]
        return (self.build(items) if isinstance(items, dict) else _clone), prefix

    def _ref(self, ref: str) -> Coercer:
        refs = self.refs

        def coerce_ref(value: Any) -> Any:
            # built lazily, so recursive schemas compile
            c = refs.get(ref)
            if c is None:
                c = refs[ref] = self.build(_resolve_pointer(self.root, ref))
            return c(value)

        return coerce_ref


def _schema_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _coerce_any_of(value: Any, branches: list[tuple[Coercer, list[str] | None]]) -> Any:
    for coerce, types in branches:
        if _matches(value, types):
            return coerce(value)
    for coerce, types in branches:
        result = coerce(value)
        if _matches(result, types):
            return result
    return value


# --- the fast checker ----------------------------------------------------------------


class _Unsupported(Exception):
    """The schema uses a keyword the fast checker does not implement."""


def _true(value: Any) -> bool:
    return True


def _false(value: Any) -> bool:
    return False


class _CheckBuilder:
    """Compiles a schema into a predicate that is True only if jsonschema would accept.

    Keywords that jsonschema ignores for this draft are ignored; any other keyword outside
    the supported set raises ``_Unsupported`` and the schema gets no fast checker.
    """

    def __init__(self, validator: Validator) -> None:
        self.keywords = frozenset(type(validator).VALIDATORS)
        self.format_checker: jsonschema.FormatChecker | None = getattr(
            validator, "format_checker", None
        )

    def build(self, schema: Any) -> Check:
        if schema is True:
            return _true
        if schema is False:
            return _false
        if not isinstance(schema, dict):
            raise _Unsupported
        checks: list[Check] = []
        for key, arg in schema.items():
            if key not in self.keywords or key == "additionalProperties":
                continue  # annotations; additionalProperties goes with properties
            build = getattr(self, "_k_" + key, None)
            if build is None:
                raise _Unsupported
            checks.append(build(arg, schema))
        if "additionalProperties" in schema and "properties" not in schema:
            checks.append(self._object(schema))
        if not checks:
            return _true
        if len(checks) == 1:
            return checks[0]

        def check_all(value: Any) -> bool:
            for c in checks:  # noqa: SIM110 - a plain loop is faster than all(genexpr)
                if not c(value):
                    return False
            return True

        return check_all

    def _k_type(self, arg: Any, schema: Mapping[str, Any]) -> Check:
        names = [arg] if isinstance(arg, str) else arg
        if not isinstance(names, list) or not all(t in _TYPE_TESTS for t in names):
            raise _Unsupported
        tests = [_TYPE_TESTS[t] for t in names]
        if len(tests) == 1:
            return tests[0]
        return lambda v: any(t(v) for t in tests)

    def _k_properties(self, arg: Any, schema: Mapping[str, Any]) -> Check:
        return self._object(schema)

    def _object(self, schema: Mapping[str, Any]) -> Check:
        props = schema.get("properties", {})
        if not isinstance(props, dict):
            raise _Unsupported
        checks = {k: self.build(v) for k, v in props.items()}
        extra = schema.get("additionalProperties", True)
        additional = None if extra is True else self.build(extra)

        def check_object(value: Any) -> bool:
            if not isinstance(value, dict):
                return True
            for k, v in value.items():
                c = checks.get(k, additional)
                if c is not None and not c(v):
                    return False
            return True

        return check_object

    def _k_required(self, arg: Any, schema: Mapping[str, Any]) -> Check:
        if not isinstance(arg, list):
            raise _Unsupported
        names = tuple(arg)
        return lambda v: not isinstance(v, dict) or all(n in v for n in names)

    def _k_items(self, arg: Any, schema: Mapping[str, Any]) -> Check:
        if not isinstance(arg, (dict, bool)):
            raise _Unsupported
        item = self.build(arg)
        return lambda v: not isinstance(v, list) or all(item(x) for x in v)

    def _k_enum(self, arg: Any, schema: Mapping[str, Any]) -> Check:
        allowed = {(type(x), x) for x in arg if isinstance(x, (str, int, float, bool))}
        has_null = None in arg
        return lambda v: (
            (v is None and has_null)
            or (isinstance(v, (str, int, float, bool)) and (type(v), v) in allowed)
        )

    def _k_const(self, arg: Any, schema: Mapping[str, Any]) -> Check:
        return self._k_enum([arg], schema)

    def _bound(self, arg: Any, test: Callable[[Any, Any], bool]) -> Check:
        if not _is_number(arg):
            raise _Unsupported  # draft 4 boolean exclusive bounds
        return lambda v: not _is_number(v) or test(v, arg)

    def _k_minimum(self, arg: Any, schema: Mapping[str, Any]) -> Check:
        return self._bound(arg, lambda v, b: v >= b)

    def _k_maximum(self, arg: Any, schema: Mapping[str, Any]) -> Check:
        return self._bound(arg, lambda v, b: v <= b)

    def _k_exclusiveMinimum(self, arg: Any, schema: Mapping[str, Any]) -> Check:  # noqa: N802
        return self._bound(arg, lambda v, b: v > b)

    def _k_exclusiveMaximum(self, arg: Any, schema: Mapping[str, Any]) -> Check:  # noqa: N802
        return self._bound(arg, lambda v, b: v < b)

    def _length(self, kind: type[Sized], arg: Any, at_least: bool) -> Check:
        if not isinstance(arg, int):
            raise _Unsupported
        if at_least:
            return lambda v: not isinstance(v, kind) or len(v) >= arg
        return lambda v: not isinstance(v, kind) or len(v) <= arg

    def _k_minLength(self, arg: Any, schema: Mapping[str, Any]) -> Check:  # noqa: N802
        return self._length(str, arg, True)

    def _k_maxLength(self, arg: Any, schema: Mapping[str, Any]) -> Check:  # noqa: N802
        return self._length(str, arg, False)

    def _k_minItems(self, arg: Any, schema: Mapping[str, Any]) -> Check:  # noqa: N802
        return self._length(list, arg, True)

    def _k_maxItems(self, arg: Any, schema: Mapping[str, Any]) -> Check:  # noqa: N802
        return self._length(list, arg, False)

    def _k_pattern(self, arg: Any, schema: Mapping[str, Any]) -> Check:
        try:
            search = re.compile(arg).search
        except (re.error, TypeError) as exc:
            raise _Unsupported from exc
        return lambda v: not isinstance(v, str) or search(v) is not None

    def _k_format(self, arg: Any, schema: Mapping[str, Any]) -> Check:
        checker = self.format_checker
        if checker is None or not isinstance(arg, str):
            return _true
        return lambda v: checker.conforms(v, arg)

    def _k_anyOf(self, arg: Any, schema: Mapping[str, Any]) -> Check:  # noqa: N802
        branches = [self.build(s) for s in _schema_list(arg)]
        return lambda v: any(b(v) for b in branches)

    def _k_allOf(self, arg: Any, schema: Mapping[str, Any]) -> Check:  # noqa: N802
        branches = [self.build(s) for s in _schema_list(arg)]
        return lambda v: all(b(v) for b in branches)


# --- error text ----------------------------------------------------------------------


def _pointer(path: Any) -> str:
    return "/".join(str(p).replace("~", "~0").replace("/", "~1") for p in path)


def _fmt(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)


def _collect(error: ValidationError, out: list[tuple[str, str]]) -> None:
    """Append ``error`` as AJV ``allErrors`` would list it: branch errors first."""
    keyword = error.validator
    if keyword in ("anyOf", "oneOf") and error.context:
        for sub in error.context:
            _collect(sub, out)
    path = _pointer(error.absolute_path)
    if keyword == "required":
        missing = _missing_property(error)
        out.append((path or missing or "root", f"must have required property '{missing}'"))
    elif keyword == "additionalProperties" and error.validator_value is False:
        for name in _additional_properties(error):
            out.append((path or "root", f"must NOT have additional property '{name}'"))
    else:
        out.append((path or "root", _message(error)))


def _missing_property(error: ValidationError) -> str:
    # jsonschema's message is f"{name!r} is a required property"
    required: Any = error.validator_value
    instance: Any = error.instance
    for name in required:
        if (
            isinstance(instance, dict)
            and name not in instance
            and error.message.startswith(repr(name))
        ):
            return str(name)
    return error.message.removesuffix(" is a required property").strip("'\"")


def _additional_properties(error: ValidationError) -> list[str]:
    schema = error.schema if isinstance(error.schema, dict) else {}
    props = schema.get("properties", {})
    patterns = schema.get("patternProperties", {})
    instance = error.instance if isinstance(error.instance, dict) else {}
    names = [
        str(k) for k in instance if k not in props and not any(re.search(p, k) for p in patterns)
    ]
    return names or ["?"]


_PLAIN = {
    "anyOf": "must match a schema in anyOf",
    "oneOf": "must match exactly one schema in oneOf",
    "not": "must NOT be valid",
    "uniqueItems": "must NOT have duplicate items",
    "contains": "must contain at least 1 valid item",
    "additionalItems": "must NOT have more items",
}
_COMPARE = {"minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">", "exclusiveMaximum": "<"}
_COUNTS = {
    "minLength": ("fewer", "characters"),
    "maxLength": ("more", "characters"),
    "minItems": ("fewer", "items"),
    "maxItems": ("more", "items"),
    "minProperties": ("fewer", "properties"),
    "maxProperties": ("more", "properties"),
}


def _message(error: ValidationError) -> str:
    keyword = error.validator
    arg: Any = error.validator_value
    if keyword == "type":
        names = [arg] if isinstance(arg, str) else list(arg)
        return "must be " + ",".join(str(n) for n in names)
    if keyword == "enum":
        return "must be equal to one of the allowed values: " + ", ".join(_fmt(x) for x in arg)
    if keyword == "const":
        return f"must be equal to constant {_fmt(arg)}"
    if keyword in _COMPARE and _is_number(arg):
        return f"must be {_COMPARE[str(keyword)]} {_fmt(arg)}"
    if keyword in _COUNTS:
        more_or_fewer, unit = _COUNTS[str(keyword)]
        return f"must NOT have {more_or_fewer} than {arg} {unit}"
    if keyword == "pattern":
        return f'must match pattern "{arg}"'
    if keyword == "format":
        return f'must match format "{arg}"'
    if keyword == "multipleOf":
        return f"must be multiple of {_fmt(arg)}"
    if keyword in _PLAIN:
        return _PLAIN[str(keyword)]
    if keyword is None or error.schema is False:
        return "boolean schema is false"
    return error.message


def format_error_text(tool_name: str, errors: list[tuple[str, str]], arguments: Any) -> str:
    """pi's ``validateToolArguments`` message for ``errors`` on the original ``arguments``."""
    lines = "\n".join(f"  - {path}: {message}" for path, message in errors)
    try:
        received = json.dumps(arguments, indent=2, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        received = repr(arguments)
    return f'Validation failed for tool "{tool_name}":\n{lines}\n\nReceived arguments:\n{received}'
