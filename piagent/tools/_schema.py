"""Compiled tool-argument schemas: pi-ai's coercion, cached validators, pi-ai's error lines.

Each schema is compiled once (``compile_schema``, cached by identity) into four parts: pi-ai's
``normalizeOptionalNulls`` (an optional property given ``null`` that does not accept it is
removed), a coercer that deep-copies the arguments while coercing them as pi-ai's
``coerceWithJsonSchema`` does, a ``jsonschema`` validator, and, for the common keywords, a
fast checker whose "valid" answer lets a valid call skip ``jsonschema`` entirely
(``jsonschema`` spends ~15 µs on even a tiny object; the checker a few hundred ns). Any
"invalid" answer, and any schema that uses a keyword the checker does not know, goes to
``jsonschema``, which stays the authority; the error list is then made as pi-ai's TypeBox
validator makes it (``_errortext``). The tool-facing API lives in ``piagent.tools``.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # jsonschema loads on first compile, keeping `import piagent` cheap
    from jsonschema.protocols import Validator

from ._check import Check, CheckBuilder, Unsupported
from ._coerce import Coercer, CoercerBuilder, Normalizer, clone
from ._errortext import collect_errors, typebox_errors

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
    as pi does when AJV cannot compile a schema.

    Thread safety: immutable after construction except that a schema found broken at
    validation time (an unresolvable ``$ref``) drops its validator; both are safe to share.
    """

    __slots__ = ("check", "coerce", "normalize", "schema", "validator")

    def __init__(
        self, schema: Any, validator: Validator | None, coerce: Coercer, check: Check | None,
        normalize: Normalizer | None = None,
    ) -> None:
        self.schema = schema
        self.validator = validator
        self.coerce = coerce
        self.check = check
        self.normalize = normalize

    def errors(self, instance: Any) -> list[tuple[str, str]]:
        """Every validation error of ``instance`` as ``(path, message)``, as pi-ai lists
        them; ``[]`` when ``jsonschema`` accepts it."""
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
        out = typebox_errors(
            self.schema, instance,
            (lambda f, v: checker.conforms(v, f)) if checker is not None else (lambda f, v: True),
            draft3="required" not in type(validator).VALIDATORS)
        if not out:  # a keyword TypeBox does not know: jsonschema's own lines
            for error in validator.iter_errors(instance):
                collect_errors(error, out)
        return out


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
        return CompiledSchema(schema, None, clone, None)
    import jsonschema
    from jsonschema.validators import validator_for

    cls = validator_for(schema, default=jsonschema.Draft7Validator)
    try:
        cls.check_schema(schema)  # type: ignore[arg-type]  # boolean schemas are valid
    except jsonschema.SchemaError as exc:
        _log.warning("Skipping argument validation: invalid JSON Schema (%s)", exc.message)
        return CompiledSchema(schema, None, clone, None)
    validator = cls(schema, format_checker=cls.FORMAT_CHECKER)
    checks = CheckBuilder(validator)

    def check_for(sub: Any) -> Check | None:
        """A sub-schema's validity on its own (pi-ai compiles each with TypeBox)."""
        try:
            return checks.build(sub)
        except Unsupported:
            pass
        if not isinstance(sub, (dict, bool)):
            return None
        is_valid = validator.evolve(schema=sub).is_valid

        def valid(value: Any) -> bool:
            try:
                return bool(is_valid(value))
            except Exception:  # noqa: BLE001 - an unresolvable $ref: TypeBox fails to compile
                return False

        return valid

    builder = CoercerBuilder(schema, check_for)
    coerce = builder.build(schema)
    normalize = builder.normalizer(schema)
    try:
        check: Check | None = checks.build(schema)
    except Unsupported:
        check = None
    return CompiledSchema(schema, validator, coerce, check, normalize)


