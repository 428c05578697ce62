"""parse_streaming_json against pi-ai 1.4.0's parseStreamingJson on every prefix of documents."""

from __future__ import annotations

import json
import math
import random
from typing import Any

import pytest

from piagent import parse_streaming_json

from .conftest import Pi

DOCUMENTS: dict[str, str] = {
    "flat_object": '{"path": "a.txt", "limit": 10, "recursive": true, "mode": null}',
    "nested": '{"a": {"b": [1, 2, {"c": "d"}]}, "e": []}',
    "numbers": '{"i": -12, "f": 3.25, "e": 1e3, "z": 0}',
    "string_escapes": '{"s": "line\\nnext \\"quoted\\" tab\\t back\\\\slash"}',
    "unicode_escape": '{"u": "caf\\u00e9 \\ud83d\\ude00"}',
    "spaces_in_string": '{"text": "a  b   c   "}',
    "array_of_strings": '{"tags": ["x", "y", "z"]}',
    "pretty_printed": '{\n  "a": 1,\n  "b": [\n    "x"\n  ]\n}',
    "invalid_escape_complete": '{"p": "C:\\q\\w"}',
    "trailing_comma_complete": '{"a": 1, "b": [1, 2,],}',
    # more edge cases
    "e_before_a_number": '{"name": "e", "f": 3.5, "g": -0.25e-3, "h": 1E+2}',
    "raw_control_characters": '{"s": "line one\nline two\ttab", "n": 1}',
    "invalid_escapes_then_more": '{"p": "C:\\new\\temp\\x41", "q": 2, "r": "\\u12g4 x"}',
    "spaces_everywhere": '  \n {  "a"  :  "x  y "  ,  "b"  :  [  1  ,  [ ] , { } ]  ,'
                         '  "c" : { "d" : [ "x" , true ] }  }  \n',
    "literals": '{"t": true, "f": false, "n": null, "arr": [null, true, false]}',
    "empty_values": '{"a": "", "b": [], "c": {}, "d": [[]], "e": [{}], "f": [""]}',
    "nan_and_infinity": '{"a": NaN, "b": Infinity, "c": -Infinity, "d": [NaN, -1]}',
    "escaped_quotes_and_backslashes": '{"s": "a\\\\\\"b\\\\", "t": "\\\\", "u": "\\"\\""}',
    "escaped_keys": '{"k\\"ey": 1, "a\\\\": [2], "\\u0041": 3}',
    "trailing_garbage": '{"a": 1, "b": "x"} and more',
    "deep_nesting": '{"a": [[[[{"b": [[1, {"c": [{}]}]]}]]]], "z": 0}',
    "surrogate_pairs": '{"e": "\\ud83d\\ude00\\ud83c\\udf89", "lone": "\\udc00x\\ud800"}',
    "raw_unicode": '{"u": "Grüße 😀 世界", "v": ["é"]}',
    "negative_and_zero": '{"a": -0, "b": -0.0, "c": [-1, -2.5e-7], "d": 0.5}',
    "proto_key": '{"__proto__": {"x": 1}, "y": 2}',
    "duplicate_keys": '{"d": 1, "d": {"e": 2}, "f": 3}',
    "object_without_colons": '{"a" 1, "b": 2}',
    "missing_commas": '{"a": 1 "b": 2, "c": [1 2]}',
    "code_with_braces": '{"code": "if (x) { y(); }\\nelse {}\\n", "lang": "js"}',
    # long open strings (decoded incrementally by piagent: every prefix in streaming order)
    "long_escaped_content": json.dumps({"path": "a.py", "content": (
        'def f(x):\n\t"""Doc \\ é 😀 \u0001."""\n    return {"k": x}  # ok\n' * 40)}),
    "long_raw_unicode": json.dumps({"content": "Grüße 😀 世界 \"q\" \\ " * 120,
                                    "n": 1}, ensure_ascii=False),
    "long_invalid_escapes": '{"p": "' + "C:\\dir\\new\\x41 \\u12 " * 110 + '", "n": 1}',
    "long_raw_newlines": '{"s": "' + "line\n\tmore " * 200 + '", "t": "x"}',
    # long structures (piagent resumes from a checkpoint of the text parsed before)
    "long_array_of_objects": json.dumps({"path": "a.py", "edits": [
        {"old": "x\n", "new": "y \u00e9", "n": i, "f": 1.5, "t": True, "z": None, "l": [i, []]}
        for i in range(30)]}),
    "long_with_bad_numbers": '{"a": [' + ", ".join(["1.", "2e", "-", "3", "0.5e-1", "1.e"] * 60)
                             + '], "name": "e", "b": [1.]}',
    "long_with_repeated_keys": '{"d": [' + ", ".join(['{"k": 1, "k": [2]}'] * 80)
                               + '], "d": {"x": 1}, "e": 2}',
    "long_nested_open": '{"a": {"b": [' + ", ".join(['{"c": [1, {"d": "e"}]}'] * 60)
                        + '], "f": {"g": [[["h", 1e2]]]}}, "z": [' + '[1, 2], ' * 30 + "0]}",
}


def _prefixes(text: str) -> list[str]:
    return [text[:i] for i in range(len(text) + 1)]


@pytest.fixture(scope="session")
def pi_parsed(pi: Pi) -> dict[str, list[Any]]:
    texts = [p for doc in DOCUMENTS.values() for p in _prefixes(doc)]
    values = iter(json.loads(pi.run("pi_partial_json.mjs", stdin=json.dumps(texts))))
    return {name: [next(values) for _ in _prefixes(doc)] for name, doc in DOCUMENTS.items()}


def _norm(value: Any) -> Any:
    """A comparison form: booleans apart from numbers, 1 equal to 1.0, NaN as pi writes it."""
    if isinstance(value, dict):
        return {k: _norm(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_norm(v) for v in value]
    if isinstance(value, bool):
        return {"$bool": value}
    if isinstance(value, float) and not math.isfinite(value):
        return {"$nonfinite": "NaN" if math.isnan(value) else
                "Infinity" if value > 0 else "-Infinity"}
    if isinstance(value, (int, float)):
        return float(value)
    return value


_OURS: dict[str, list[Any]] = {}
"""piagent's parse of every prefix of a document, by document: made once (prefix after
prefix, in streaming order), compared with each pi version's."""


def _ours(doc: str) -> list[Any]:
    if doc not in _OURS:
        _OURS[doc] = [parse_streaming_json(prefix) for prefix in _prefixes(doc)]
    return _OURS[doc]


@pytest.mark.parametrize("name", list(DOCUMENTS))
def test_every_prefix_parses_as_pi_ai(name: str, pi_parsed: dict[str, list[Any]]) -> None:
    different = []
    for prefix, pi, ours in zip(_prefixes(DOCUMENTS[name]), pi_parsed[name],
                                _ours(DOCUMENTS[name]), strict=True):
        assert "error" not in pi, f"pi-ai raised on {prefix!r}: {pi['error']}"
        if _norm(ours) != _norm(pi["value"]):
            different.append(f"{prefix!r}: pi {json.dumps(pi['value'])} piagent {ours!r}")
    assert not different, f"{len(different)} prefixes differ:\n" + "\n".join(different[:8])


# --- random documents, some with stray characters inserted, every prefix -----------------

_ATOMS = ['"a"', '"x y "', "1", "-2.5", "1e3", "-0", "true", "false", "null", '""',
          '"\\u00e9"', '"\\ud83d\\ude00"', '"a\\nb"', '"C:\\q"', '"t\tab"', "NaN", "-Infinity",
          "0.5e-3", "12345678", '"}"']
_KEYS = ['"k"', '"e"', '"a b"', '"__proto__"', '"\\"q"', '"1"']


def _random_value(rng: random.Random, depth: int = 0) -> str:
    r = rng.random()
    if depth > 3 or r < 0.4:
        return rng.choice(_ATOMS)
    if r < 0.7:
        items = [_random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
        return ("[" + rng.choice([", ", ",", " , "]).join(items)
                + rng.choice(["", ",", " "]) + "]")
    pairs = [rng.choice(_KEYS) + rng.choice([": ", ":", " : ", " "]) + _random_value(rng, depth + 1)
             for _ in range(rng.randint(0, 3))]
    return "{" + rng.choice([", ", ","]).join(pairs) + rng.choice(["", ",", " "]) + "}"


def _random_documents(count: int, seed: int, values: int = 1) -> list[str]:
    rng = random.Random(seed)
    docs = []
    for _ in range(count):
        doc = ", ".join(_random_value(rng) for _ in range(values))
        if values > 1:  # long: parsed prefix after prefix, piagent resumes from checkpoints
            doc = '{"v": [' + doc + '], "w": ' + _random_value(rng) + "}"
        elif not doc.startswith("{"):
            doc = '{"v": ' + doc + "}"
        for _ in range(rng.choice([0, 0, 1, 2])):  # stray characters anywhere
            k = rng.randint(1, len(doc))
            doc = doc[:k] + rng.choice(list('{}[]",: \\ae1-.\n\x01u')) + doc[k:]
        docs.append(doc)
    return docs


@pytest.mark.parametrize(("count", "values"), [(200, 1), (6, 60)], ids=["short", "long"])
def test_every_prefix_of_random_documents_parses_as_pi_ai(pi: Pi, count: int,
                                                          values: int) -> None:
    docs = _random_documents(count, 24, values)
    texts = [p for doc in docs for p in _prefixes(doc)]
    parsed = json.loads(pi.run("pi_partial_json.mjs", stdin=json.dumps(texts)))
    ours_all = [value for doc in docs for value in _ours(doc)]
    different = []
    for prefix, theirs, ours in zip(texts, parsed, ours_all, strict=True):
        if "error" in theirs or _norm(ours) != _norm(theirs["value"]):
            different.append(f"{prefix!r}: pi {json.dumps(theirs)} piagent {ours!r}")
    assert not different, f"{len(different)} of {len(texts)} differ:\n" + "\n".join(different[:8])


def test_deliberate_differences_of_parse_streaming_json() -> None:
    """The two rows of docs/reference.md's deliberate differences: an integer keeps all its
    digits (JavaScript rounds 12345678901234567890 to 12345678901234567000), and a top
    level that is not an object gives {} (pi-ai returns the list or value as it is)."""
    from piagent.stream import parse_streaming_json

    assert parse_streaming_json('{"id": 12345678901234567890}') == {"id": 12345678901234567890}
    assert parse_streaming_json('{"id": 1234567890123456789') == {"id": 1234567890123456789}
    assert parse_streaming_json("[1, 2]") == {}
    assert parse_streaming_json('"text"') == {}
