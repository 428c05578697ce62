"""The fast validity checker: a predicate compiled from a schema that is True only where
``jsonschema`` would accept, so a valid call skips ``jsonschema`` entirely."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sized
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import jsonschema
    from jsonschema.protocols import Validator

from ._coerce import EXACT_TYPES, TYPE_TESTS, Check, is_number, schema_list

__all__ = ["Check", "CheckBuilder", "Unsupported"]

_OBJECT_KEYWORDS = ("type", "required", "properties")


class Unsupported(Exception):
    """The schema uses a keyword the fast checker does not implement."""


def _true(value: Any) -> bool:
    return True


def _false(value: Any) -> bool:
    return False


class CheckBuilder:
    """Compiles a schema into a predicate that is True only if jsonschema would accept.

    Keywords that jsonschema ignores for this draft are ignored; any other keyword outside
    the supported set raises ``Unsupported`` and the schema gets no fast checker.
    """

    def __init__(self, validator: Validator) -> None:
        self.keywords = frozenset(type(validator).VALIDATORS)
        self.fold_objects = self.keywords.issuperset(_OBJECT_KEYWORDS)  # not draft 3
        self.format_checker: jsonschema.FormatChecker | None = getattr(
            validator, "format_checker", None
        )

    def build(self, schema: Any) -> Check:
        if schema is True:
            return _true
        if schema is False:
            return _false
        if not isinstance(schema, dict):
            raise Unsupported
        checks: list[Check] = []
        # the usual object node: type, required and properties as one check (they are pure
        # predicates, so the order they run in does not change the answer)
        folded = _OBJECT_KEYWORDS if (self.fold_objects and schema.get("type") == "object"
                                      and isinstance(schema.get("required", []), list)) else ()
        if folded:
            checks.append(self._object(schema, typed=True,
                                       required=tuple(schema.get("required", ()))))
        for key, arg in schema.items():
            if key not in self.keywords or key == "additionalProperties" or key in folded:
                continue  # annotations; additionalProperties goes with properties
            build = getattr(self, "_k_" + key, None)
            if build is None:
                raise Unsupported
            checks.append(build(arg, schema))
        if "additionalProperties" in schema and "properties" not in schema and not folded:
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
        if not isinstance(names, list) or not all(t in TYPE_TESTS for t in names):
            raise Unsupported
        tests = [TYPE_TESTS[t] for t in names]
        if len(tests) == 1:
            return tests[0]
        return lambda v: any(t(v) for t in tests)

    def _k_properties(self, arg: Any, schema: Mapping[str, Any]) -> Check:
        return self._object(schema)

    def _object(self, schema: Mapping[str, Any], typed: bool = False,
                required: tuple[Any, ...] = ()) -> Check:
        """``properties`` and ``additionalProperties``; with ``typed``, also ``type:
        "object"`` and the ``required`` names."""
        props = schema.get("properties", {})
        if not isinstance(props, dict):
            raise Unsupported
        if "required" not in self.keywords and any(
                isinstance(v, dict) and v.get("required") for v in props.values()):
            raise Unsupported  # draft 3: a property's own `required: true`, read by properties
        checks = {k: self.build(v) for k, v in props.items()}
        # a property whose schema is only a type: a value of that exact type passes its check
        exact = {k: EXACT_TYPES[v["type"]] for k, v in props.items() if self._bare_type(v)}
        extra = schema.get("additionalProperties", True)
        additional = None if extra is True else self.build(extra)

        def check_object(value: Any) -> bool:
            if not isinstance(value, dict):
                return not typed
            for name in required:
                if name not in value:
                    return False
            for k, v in value.items():
                if type(v) is exact.get(k):
                    continue
                c = checks.get(k, additional)
                if c is not None and not c(v):
                    return False
            return True

        return check_object

    def _bare_type(self, schema: Any) -> bool:
        """Whether ``schema`` checks nothing but a ``type`` listed in ``EXACT_TYPES``."""
        return (isinstance(schema, dict) and isinstance(schema.get("type"), str)
                and schema["type"] in EXACT_TYPES
                and not any(key in self.keywords for key in schema if key != "type"))

    def _k_required(self, arg: Any, schema: Mapping[str, Any]) -> Check:
        if not isinstance(arg, list):
            raise Unsupported
        names = tuple(arg)
        return lambda v: not isinstance(v, dict) or all(n in v for n in names)

    def _k_items(self, arg: Any, schema: Mapping[str, Any]) -> Check:
        if not isinstance(arg, (dict, bool)):
            raise Unsupported
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
        if not is_number(arg):
            raise Unsupported  # draft 4 boolean exclusive bounds
        return lambda v: not is_number(v) or test(v, arg)

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
            raise Unsupported
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
            raise Unsupported from exc
        return lambda v: not isinstance(v, str) or search(v) is not None

    def _k_format(self, arg: Any, schema: Mapping[str, Any]) -> Check:
        checker = self.format_checker
        if checker is None or not isinstance(arg, str):
            return _true
        return lambda v: checker.conforms(v, arg)

    def _k_anyOf(self, arg: Any, schema: Mapping[str, Any]) -> Check:  # noqa: N802
        branches = [self.build(s) for s in schema_list(arg)]
        return lambda v: any(b(v) for b in branches)

    def _k_allOf(self, arg: Any, schema: Mapping[str, Any]) -> Check:  # noqa: N802
        branches = [self.build(s) for s in schema_list(arg)]
        return lambda v: all(b(v) for b in branches)


