"""Compiled tool-argument schemas: pi-ai 1.6.1's coercion, cached validators, its error lines.

Each schema is compiled once (``compile_schema``, cached by identity): a ``jsonschema``
validator; for the common keywords a fast checker whose "valid" answer lets a valid call skip
``jsonschema`` entirely (``jsonschema`` spends ~15 µs on even a tiny object; the checker a few
hundred ns), and, when coercion cannot change a value the checker accepts (``stable``), skip
coercion too; pi-ai 1.6.1's coercion (pi-schema's three passes, ``_convert``); and its error
lines (``_explain``). A ``$ref`` that names nothing is replaced by a schema that rejects only
the values at its place. ``jsonschema`` stays the authority on validity. The tool-facing API
lives in ``piagent.tools``.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # jsonschema loads on first compile, keeping `import piagent` cheap
    from jsonschema.protocols import Validator

from ._check import Check, CheckBuilder, Unsupported
from ._coerce import clone
from ._convert import UNRESOLVED, Converter, resolve_local
from ._explain import explain

__all__ = ["CompiledSchema", "compile_schema"]

_log = logging.getLogger(__name__)

_CACHE_SIZE = 512
# guarded by _cache_lock; id(schema) -> (schema, compiled). The entry keeps the schema alive,
# so its id cannot be reused by another object while the entry exists.
_cache: OrderedDict[int, tuple[Any, CompiledSchema]] = OrderedDict()
_cache_lock = threading.Lock()  # guards _cache and _compilations
_compilations = 0  # guarded by _cache_lock


class CompiledSchema:
    """A schema compiled for argument validation.

    ``validator`` is ``None`` when the schema itself is invalid: validation is then skipped,
    as pi does when it cannot compile a schema. ``coerce`` is pi-ai 1.6.1's coercion (a
    coerced copy; the input is not modified), ``check`` the fast validity checker (or
    ``None``), ``errors`` pi-ai 1.6.1's error lines.

    Thread safety: immutable after construction except that a schema found broken at
    validation time (a ``$ref`` jsonschema cannot resolve) drops its validator, and that the
    per-node checks fill a dict on first use (a race builds one check twice, harmlessly);
    both are safe to share.
    """

    __slots__ = ("_checks", "_converter", "check", "schema", "stable", "validator")

    def __init__(self, schema: Any, validator: Validator | None, check: Check | None) -> None:
        self.schema = schema
        self.validator = validator
        self.check = check
        # coercion leaves every value that ``check`` accepts as it is: such a call skips it
        self.stable = check is not None and _stable(schema)
        # id(node) -> (node, its validity check), filled on first use (see the class doc)
        self._checks: dict[int, tuple[Any, Check]] = {}
        self._converter = Converter(schema, self.ok)

    def ok(self, node: Any, value: Any) -> bool:
        """Whether ``value`` passes ``node``, a part of the schema (``$ref``s resolved
        against the whole)."""
        entry = self._checks.get(id(node))
        if entry is None or entry[0] is not node:
            entry = (node, self._check_of(node))
            self._checks[id(node)] = entry
        return entry[1](value)

    def _check_of(self, node: Any) -> Check:
        validator = self.validator
        if validator is None:
            return lambda value: True
        try:
            return CheckBuilder(validator).build(node)
        except Unsupported:
            pass
        if not isinstance(node, (dict, bool)):
            return lambda value: True
        is_valid = validator.evolve(schema=node).is_valid

        def valid(value: Any) -> bool:
            try:
                return bool(is_valid(value))
            except Exception:  # noqa: BLE001 - a $ref jsonschema cannot resolve: fails
                return False

        return valid

    def coerce(self, arguments: Any) -> Any:
        """pi-ai 1.6.1's coercion of a deep copy of ``arguments``."""
        return self._converter.coerce(clone(arguments), self.check)

    def errors(self, instance: Any) -> list[tuple[str, str]]:
        """Every validation error of ``instance`` as ``(path, message)``, as pi-ai 1.6.1
        lists them; ``[]`` when ``jsonschema`` accepts it."""
        validator = self.validator
        if validator is None:
            return []
        import referencing.exceptions

        try:
            if validator.is_valid(instance):
                return []
        except referencing.exceptions.Unresolvable as exc:
            _log.warning("Skipping argument validation: the schema has a bad $ref (%s)", exc)
            self.validator = None
            return []
        checker = getattr(validator, "format_checker", None)
        return explain(
            self.schema, instance, self.ok,
            (lambda f, v: checker.conforms(v, f)) if checker is not None else (lambda f, v: True))


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
        return CompiledSchema(schema, None, None)
    import jsonschema
    from jsonschema.validators import validator_for

    # pi-ai 1.6.1 reads every schema as draft 2020-12 (pi-schema's default): so does a schema
    # that names no draft, unless it is valid only as draft 7 (a tuple's `items` list)
    declared = isinstance(schema, dict) and "$schema" in schema
    classes = [validator_for(schema)] if declared else [jsonschema.Draft202012Validator,
                                                        jsonschema.Draft7Validator]
    for cls in classes:
        try:
            cls.check_schema(schema)  # type: ignore[arg-type]  # boolean schemas are valid
            break
        except jsonschema.SchemaError as exc:
            error = exc
    else:
        _log.warning("Skipping argument validation: invalid JSON Schema (%s)", error.message)
        return CompiledSchema(schema, None, None)
    schema = _mark_unresolved(schema, schema)
    validator = cls(schema, format_checker=cls.FORMAT_CHECKER)
    try:
        check: Check | None = CheckBuilder(validator).build(schema)
    except Unsupported:
        check = None
    return CompiledSchema(schema, validator, check)


def _mark_unresolved(node: Any, root: Any) -> Any:
    """``node`` with every part whose local ``$ref`` (``#/…``) names nothing in ``root``
    replaced by a schema no value passes, marked with the ref (pi-ai 1.6.1: a dangling
    ``$ref`` rejects only the values at its place). ``node`` itself when nothing is replaced.
    Other references (``$id`` documents, anchors, URLs) are left to ``jsonschema``: one it
    cannot resolve skips validation, with a warning."""
    if isinstance(node, list):
        items = [_mark_unresolved(x, root) for x in node]
        return node if all(a is b for a, b in zip(items, node, strict=True)) else items
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str) and (ref == "#" or ref.startswith("#/")) \
            and not isinstance(resolve_local(root, ref), (dict, bool)):
        return {"not": {}, UNRESOLVED: ref}
    parts = {k: _mark_unresolved(v, root) if k not in ("enum", "const") else v
             for k, v in node.items()}
    return node if all(parts[k] is node[k] for k in node) else parts


# keywords whose nodes coercion may change a valid value under (a union's branch, a literal
# converted, a tuple, a reference followed, a property matched by pattern)
_CONVERTING = frozenset(("const", "enum", "anyOf", "oneOf", "allOf", "$ref", "prefixItems",
                         "patternProperties", UNRESOLVED))


def _stable(node: Any) -> bool:
    """Whether pi-ai 1.6.1's coercion returns every value that the fast checker accepts
    unchanged: every node has one ``type`` (or none and no members) and none of the
    converting keywords. (The checker accepts an ``integer`` only as an ``int``.)"""
    if not isinstance(node, dict):
        return True
    if not _CONVERTING.isdisjoint(node):
        return False
    kind = node.get("type")
    members = ("properties", "additionalProperties", "items")
    if kind is None:
        return not any(k in node for k in members)
    if not isinstance(kind, str):
        return False
    if kind == "array":
        items = node.get("items", True)
        return isinstance(items, (dict, bool)) and _stable(items)
    if kind == "object":
        props = node.get("properties", {})
        return isinstance(props, dict) and all(_stable(v) for v in props.values()) \
            and _stable(node.get("additionalProperties", True))
    return not any(k in node for k in members)
