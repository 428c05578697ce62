"""validate_tool_arguments against pi-ai's validateToolArguments (1.6.1, the reference, and
1.4.0): the coerced arguments a tool receives, or the exact error text the model reads.

Against 1.4.0 a case may differ where 1.6.1 differs from 1.4.0 too and piagent gives 1.6.1's
answer: the row ``validation-pi-schema`` (changed upstream in 1.5/1.6, ref_differences.py)."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from piagent.errors import ToolArgumentError
from piagent.tools import AgentTool, validate_tool_arguments

from .conftest import HERE, PI16, Pi
from .ref_differences import DELIBERATE


def _obj(props: dict[str, Any], **rest: Any) -> dict[str, Any]:
    return {"type": "object", "properties": props, **rest}


STR, NUM, INT, BOOL = {"type": "string"}, {"type": "number"}, {"type": "integer"}, {"type": "boolean"}

CASES: dict[str, tuple[dict[str, Any], Any]] = {
    "missing_required": (_obj({"path": STR}, required=["path"]), {}),
    "two_missing": (_obj({"a": STR, "b": STR}, required=["a", "b"]), {"c": 1}),
    "nested_missing": (_obj({"o": _obj({"q": STR}, required=["q"])}), {"o": {}}),
    "enum": (_obj({"m": {"enum": ["fast", "slow"]}}), {"m": "x"}),
    "const": (_obj({"c": {"const": "x"}}), {"c": "y"}),
    "array_item": (_obj({"a": {"type": "array", "items": NUM}}), {"a": [1, "x", 3, None, True]}),
    "additional_false": (_obj({"p": STR}, additionalProperties=False), {"p": "x", "extra": 1,
                                                                      "e2": 2}),
    "additional_schema": (_obj({"p": STR}, additionalProperties=INT), {"p": "x", "n": "5", "m": "q"}),
    "scalar_not_wrapped": (_obj({"tags": {"type": "array", "items": STR}}), {"tags": "solo"}),
    "optional_null_removed": (_obj({"dir": STR, "limit": NUM}, required=["dir"]),
                              {"dir": "/", "limit": None}),
    "required_null_coerced": (_obj({"limit": NUM, "s": STR, "b": BOOL}, required=["limit", "s", "b"]),
                              {"limit": None, "s": None, "b": None}),
    "nullable_null_kept": (_obj({"n": {"type": ["integer", "null"]}}), {"n": None}),
    "nested_optional_null": (_obj({"o": _obj({"a": NUM, "b": STR})}), {"o": {"a": None, "b": None}}),
    "array_of_objects_null": (_obj({"l": {"type": "array", "items": _obj({"a": INT})}}),
                              {"l": [{"a": None}, {"a": "3"}]}),
    "bounds": (_obj({"n": {"type": "integer", "minimum": 1, "maximum": 5}}), {"n": "9"}),
    "exclusive_multiple": (_obj({"n": {"type": "number", "exclusiveMaximum": 2.5,
                                       "multipleOf": 0.5}}), {"n": 3.3}),
    "type_union": (_obj({"n": {"type": ["integer", "null"]}}), {"n": "x"}),
    "type_union_coerced": (_obj({"n": {"type": ["boolean", "integer"]}}), {"n": "7"}),
    "any_of": (_obj({"n": {"anyOf": [INT, BOOL]}}), {"n": "x"}),
    "any_of_coerced": (_obj({"n": {"anyOf": [{"type": "null"}, INT]}}), {"n": "12"}),
    "one_of_two_pass": (_obj({"n": {"oneOf": [NUM, INT]}}), {"n": 3}),
    "string_checks": (_obj({"s": {"type": "string", "minLength": 3, "pattern": "^a"}}),
                      {"s": "b"}),
    "max_length_items": (_obj({"s": {"type": "string", "maxLength": 2},
                               "l": {"type": "array", "maxItems": 1, "minItems": 0}}),
                         {"s": "abc", "l": [1, 2]}),
    "unique": (_obj({"l": {"type": "array", "uniqueItems": True}}), {"l": [1, 2, 1]}),
    "format_email": (_obj({"s": {"type": "string", "format": "email"}}), {"s": "b"}),
    "numbers_from_strings": (_obj({"a": NUM, "b": NUM, "c": INT, "d": INT, "e": NUM, "f": NUM}),
                             {"a": "0x10", "b": " 2.5 ", "c": "1e3", "d": "5.5", "e": "",
                              "f": "Infinity"}),
    "strings_from_numbers": (_obj({"a": STR, "b": STR, "c": STR, "d": STR}),
                             {"a": 5, "b": 2.5, "c": True, "d": 1e21}),
    "booleans": (_obj({"a": BOOL, "b": BOOL, "c": BOOL, "d": BOOL}),
                 {"a": "true", "b": 0, "c": "yes", "d": 1}),
    "integer_from_boolean": (_obj({"a": INT, "b": NUM}), {"a": True, "b": False}),
    "null_type": (_obj({"a": {"type": "null"}, "b": {"type": "null"}}), {"a": "", "b": 0}),
    "wrong_root_type": ({"type": "object"}, [1]),
    "nested_path": (_obj({"a": _obj({"b": {"type": "array", "items": _obj({"c": INT})}})}),
                    {"a": {"b": [{"c": 1}, {"c": "x"}]}}),
    "many_errors_capped": (_obj({k: INT for k in "abcdefghij"}),
                           {k: "x" for k in "abcdefghij"}),
    "ref": ({"type": "object", "properties": {"p": {"$ref": "#/$defs/P"}},
             "$defs": {"P": _obj({"x": INT}, required=["x"])}}, {"p": {}}),
    "all_of": (_obj({"n": {"allOf": [INT, {"minimum": 3}]}}), {"n": 1}),
    "not": (_obj({"n": {"not": STR}}), {"n": "x"}),
    "dependent_required": (_obj({"a": STR, "b": STR}, dependentRequired={"a": ["b"]},
                                **{"$schema": "https://json-schema.org/draft/2020-12/schema"}),
                           {"a": "x"}),
    "float_in_received": (_obj({"a": STR}, required=["a"]), {"f": 1.0, "g": 1e-7}),
    "valid_untouched": (_obj({"path": STR, "n": INT}), {"path": "/x", "n": 3}),
    "no_type_no_coercion": ({"properties": {"n": INT}}, {"n": "5"}),
    # pi-ai 1.5-1.6.1 (pi-schema): each coercion rule
    "scalar_wrapped_and_converted": (_obj({"l": {"type": "array", "items": INT},
                                           "o": {"type": "array", "items": _obj({"n": INT})},
                                           "b": {"type": "array"}}),
                                     {"l": "7", "o": {"n": "2"}, "b": None}),
    "tuple_not_wrapped": (_obj({"t": {"type": "array", "items": [INT, STR]}}), {"t": "1"}),
    "optional_nulls_dropped_deep": (_obj({"o": _obj({"a": INT, "b": {"type": ["null", "integer"]}},
                                                    required=["b"]),
                                          "l": {"type": "array", "items": _obj({"x": STR})}}),
                                    {"o": {"a": None, "b": None}, "l": [{"x": None}]}),
    "required_null_to_string": (_obj({"s": STR}, required=["s"]), {"s": None}),
    "integer_fraction_cut": (_obj({"a": INT, "b": INT, "c": NUM}), {"a": 2.5, "b": "3.7",
                                                                    "c": ""}),
    "dangling_ref_present": (_obj({"p": {"$ref": "#/$defs/Gone"}, "q": INT}),
                             {"p": 1, "q": "2"}),
    "dangling_ref_absent": (_obj({"p": {"$ref": "#/$defs/Gone"}, "q": INT}), {"q": "2"}),
    "dangling_ref_optional_null": (_obj({"p": {"$ref": "#/$defs/Gone"}}), {"p": None}),
    "ref_followed": ({"type": "object", "properties": {"p": {"$ref": "#/$defs/P"}},
                      "$defs": {"P": _obj({"x": INT, "l": {"type": "array", "items": BOOL}})}},
                     {"p": {"x": "4", "l": "true"}}),
    "enum_and_const_converted": (_obj({"e": {"enum": [1, 2, "x"]}, "c": {"const": False}}),
                                 {"e": "2", "c": "false"}),
    "union_first_converting_branch": (_obj({"u": {"anyOf": [{"type": "array", "items": INT},
                                                            BOOL]}}), {"u": "5"}),
    "tagged_union_error": (_obj({"s": {"oneOf": [
        _obj({"kind": {"const": "a"}, "n": INT}, required=["kind", "n"]),
        _obj({"kind": {"const": "b"}, "t": STR}, required=["kind", "t"])]}}),
        {"s": {"kind": "c"}}),
    "union_blames_declaring_branch": (_obj({"s": {"anyOf": [
        _obj({"n": INT}, required=["n"]), _obj({"t": STR, "u": STR}, required=["t", "u"])]}}),
        {"s": {"t": "x", "u": 5, "v": {}}}),
    "pattern_properties": (_obj({}, patternProperties={"^n_": INT}, additionalProperties=False),
                           {"n_a": "3", "other": 1}),
    "boolean_words": (_obj({"a": BOOL, "b": BOOL, "c": {"type": "null"}}),
                      {"a": "TRUE", "b": "0", "c": "null"}),
    # no $schema: draft 2020-12, as pi-schema reads every schema
    "draft_2020_dependent_required": (_obj({"a": STR, "b": STR}, dependentRequired={"a": ["b"]}),
                                      {"a": "x"}),
    "draft_2020_prefix_items": (_obj({"t": {"type": "array", "prefixItems": [INT, STR],
                                            "items": False}}), {"t": ["1", 2, 3]}),
    "draft_2020_ref_sibling": ({"type": "object", "$defs": {"N": INT},
                                "properties": {"n": {"$ref": "#/$defs/N", "maximum": 3}}},
                               {"n": "7"}),
    "draft_2020_min_contains": (_obj({"l": {"type": "array", "contains": INT, "minContains": 2}}),
                                {"l": [1, "a"]}),
}


# (version, which cases) -> pi-ai's answers, each run once a session
_RUNS: dict[tuple[str, str], list[Any]] = {}


def _validated(pi: Pi, which: str, cases: list[tuple[dict[str, Any], Any]]) -> list[Any]:
    if (pi.version, which) not in _RUNS:
        payload = [{"schema": schema, "arguments": args} for schema, args in cases]
        _RUNS[pi.version, which] = json.loads(pi.run("pi_validation.mjs",
                                                     stdin=json.dumps(payload)))
    return _RUNS[pi.version, which]


def _expected(pi: Pi, which: str, cases: list[tuple[dict[str, Any], Any]],
              request: pytest.FixtureRequest) -> list[Any]:
    """pi's answers, with 1.6.1's where 1.4.0's differ from them (the declared upstream row:
    1.4.0's answers are taken only where 1.6.1 gives the same)."""
    answers = _validated(pi, which, cases)
    if pi.reference:
        return answers
    assert DELIBERATE["validation-pi-schema"].applies_to(pi.version)
    request.getfixturevalue("pi16_installed")
    return _validated(Pi("1.6.0", PI16), which, cases)


@pytest.fixture(scope="session")
def pi_validated(pi: Pi, request: pytest.FixtureRequest) -> dict[str, Any]:
    return dict(zip(CASES, _expected(pi, "cases", list(CASES.values()), request), strict=True))


def test_pi_1_4_0_differs_as_declared(request: pytest.FixtureRequest) -> None:
    """The upstream row must show: 1.4.0 and 1.6.1 disagree on some cases, and agree on
    others (so the cases also compare piagent with 1.4.0)."""
    request.getfixturevalue("pi_installed")
    request.getfixturevalue("pi16_installed")
    old = _validated(Pi("1.4.0", HERE), "cases", list(CASES.values()))
    new = _validated(Pi("1.6.0", PI16), "cases", list(CASES.values()))
    same = sum(1 for a, b in zip(old, new, strict=True) if a == b)
    assert 0 < same < len(CASES)


def _piagent(schema: dict[str, Any], args: Any) -> dict[str, Any]:
    tool = AgentTool(name="t", description="", parameters=schema, execute=lambda *a: None)
    try:
        return {"value": validate_tool_arguments(tool, args)}
    except ToolArgumentError as exc:
        return {"error": str(exc)}


@pytest.mark.parametrize("name", list(CASES))
def test_validation_as_pi_ai(name: str, pi_validated: dict[str, Any]) -> None:
    ours = _piagent(*CASES[name])
    assert ours == pi_validated[name]


# --- many random arguments against a set of property schemas -----------------------------

_PROPS: list[dict[str, Any]] = [
    STR, NUM, INT, BOOL, {"type": "null"}, {"type": ["integer", "null"]},
    {"type": ["boolean", "string"]}, {"type": ["number", "string"]},
    {"type": "array", "items": INT}, {"type": "array", "items": [INT, STR]},
    _obj({"x": INT, "y": {"type": "array", "items": BOOL}}, required=["x"]),
    {"anyOf": [INT, {"type": "null"}]}, {"oneOf": [{"type": "string", "maxLength": 2}, INT]},
    {"enum": [1, "1", True, None]}, {"type": "integer", "minimum": 0, "maximum": 10},
    {"type": "string", "pattern": "^[a-z]+$", "minLength": 2}, {},
]
_VALUES: list[Any] = [
    None, True, False, 0, 1, -1, 2.5, 1e21, 1e-7, 0.1, 123456789, "", " ", "5", " 12 ", "1e3",
    "-0", "0x1f", "0b11", "0o7", "Infinity", "5.", ".5", "1_0", "true", "false", "abc", "1",
    [], [1], ["2", 3], {"x": "4"}, {"x": None, "y": [1, "true"]}, {}, [None], "ab",
]


def _random_cases(count: int, seed: int) -> list[tuple[dict[str, Any], Any]]:
    rng = random.Random(seed)
    cases = []
    for _ in range(count):
        props = {f"p{i}": rng.choice(_PROPS) for i in range(rng.randint(1, 4))}
        required = [k for k in props if rng.random() < 0.5]
        args = {k: rng.choice(_VALUES) for k in props if rng.random() < 0.85}
        if rng.random() < 0.2:
            args["extra"] = rng.choice(_VALUES)
        schema = _obj(props, required=required)
        if rng.random() < 0.3:
            schema["additionalProperties"] = rng.choice([False, INT])
        cases.append((schema, args))
    return cases


RANDOM_CASES = _random_cases(400, seed=24)


def test_random_arguments_as_pi_ai(pi: Pi, request: pytest.FixtureRequest) -> None:
    validated = _expected(pi, "random", RANDOM_CASES, request)
    different = []
    for (schema, args), theirs in zip(RANDOM_CASES, validated, strict=True):
        ours = _piagent(schema, args)
        if ours != theirs:
            different.append(f"{json.dumps(schema)} {json.dumps(args)}:\n  pi {theirs}\n  us {ours}")
    assert not different, f"{len(different)} of {len(RANDOM_CASES)} differ:\n" + \
        "\n".join(different[:5])
