"""parse_streaming_json: pi's rules for truncated tool-call arguments.

Covers the documented cases one by one, every prefix of a hand-written corpus (escapes,
surrogate pairs split mid-escape, unicode, exponents, literals, deep nesting), the same
on random JSON objects (hypothesis), and arbitrary garbage (never raises).
"""

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from piagent.stream import _partial_json
from piagent.stream._partial_json import (
    _JS_SPACE,
    _parse_flat,
    _parse_partial,
    parse_streaming_json,
)

CORPUS = [
    "{}",
    '{"a": 1}',
    '{"path": "/tmp/x.txt", "limit": 100, "offset": -20}',
    '{"flag": true, "other": false, "nothing": null}',
    '{"n": -1.25e-3, "m": 6.02E+23, "z": 0, "neg0": -0.0, "big": 123456789012345678901234567890}',
    '{"s": "quote \\" backslash \\\\ slash \\/ controls \\b\\f\\n\\r\\t end"}',
    '{"u": "\\u00e9t\\u00E9 \\u4e2d\\u6587 \\ud83d\\ude00 smile \\uD834\\uDD1E clef"}',
    '{"lone": "\\ud800 then text", "lone2": "\\udc00"}',
    '{"raw": "Grüße, 世界, 😀 and emoji 🎉"}',
    '{"a": [1, 2, {"b": "x", "c": [[], {}, [[1]]]}], "d": {"e": {"f": {"g": null}}}}',
    '{"list": ["a", "b", "c"], "empty": "", "nested": [{"k": [true, false, null]}]}',
    '{\n  "pretty": {\n    "indent": [\n      1,\n      2\n    ]\n  },\n  "x": "y"\n}\n',
    '  {"leading": "and trailing whitespace"}   ',
    '{"edits": [{"old": "def f():\\n    pass", "new": "def f():\\n    return 1"}]}',
    '{"nan": NaN, "inf": Infinity, "ninf": -Infinity}',
    '{"deep": ' + "[" * 50 + "]" * 50 + "}",
]


def _compatible(partial: Any, final: Any) -> bool:
    """True if ``partial`` is what a prefix of ``final``'s text may show."""
    if isinstance(final, dict):
        return isinstance(partial, dict) and all(
            k in final and _compatible(v, final[k]) for k, v in partial.items()
        )
    if isinstance(final, list):
        return (
            isinstance(partial, list)
            and len(partial) <= len(final)
            and all(_compatible(p, f) for p, f in zip(partial, final, strict=False))
        )
    if isinstance(final, str):  # in UTF-16 code units: a prefix may end in half a pair
        return isinstance(partial, str) and _utf16(final).startswith(_utf16(partial))
    if isinstance(final, bool) or final is None:
        return partial is final
    # a number: a prefix shows some number (12 of 123, -1.25 of -1.25e3)
    return isinstance(partial, (int, float)) and not isinstance(partial, bool)


def _utf16(text: str) -> bytes:
    return text.encode("utf-16-le", "surrogatepass")


def _same(a: Any, b: Any) -> bool:
    """Equality that treats NaN as equal to NaN and keeps int/float apart."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def _check_all_prefixes(doc: str) -> None:
    final = json.loads(doc)
    for end in range(len(doc) + 1):
        result = parse_streaming_json(doc[:end])
        assert isinstance(result, dict), doc[:end]
        assert _compatible(result, final), (doc[:end], result)
    assert _same(parse_streaming_json(doc), final)


@pytest.mark.parametrize("doc", CORPUS)
def test_every_prefix_of_corpus_gives_a_compatible_dict(doc: str) -> None:
    """Each prefix returns a dict consistent with the final value; the whole gives it exactly."""
    _check_all_prefixes(doc)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"path":"/tm', {"path": "/tm"}),
        ('{"a":1,"pa', {"a": 1}),
        ('{"a":1,"path"', {"a": 1}),
        ('{"a":1,"path":', {"a": 1}),
        ('{"a":', {}),
        ('{"a":1,', {"a": 1}),
        ('{"flag": f', {"flag": False}),
        ('{"flag": tr', {"flag": True}),
        ('{"v": nu', {"v": None}),
        ('{"n": 12', {"n": 12}),
        ('{"n": -1.25e', {"n": -1.25}),
        ('{"n": -1.25e+', {"n": -1.25}),
        ('{"n": 1.', {}),  # JSON.parse("1.") fails and the text has no "e" to cut at
        ('{"n": -', {}),
        ('{"a":[1,2,{"b":"x', {"a": [1, 2, {"b": "x"}]}),
        ('{"a":[1,2', {"a": [1, 2]}),
        ('{"a":[', {"a": []}),
        ('{"a":{', {"a": {}}),
        ('{"s":"x\\', {"s": "x"}),
        ('{"s":"x\\n', {"s": "x\n"}),
        ('{"s":"x\\u00', {"s": "x"}),
        ('{"s":"x\\u00e9', {"s": "xé"}),
        ('{"s":"\\ud83d', {"s": "\ud83d"}),  # a lone high surrogate, as pi-ai shows it
        ('{"s":"\\ud83d\\', {"s": "\ud83d"}),
        ('{"s":"\\ud83d\\ude0', {"s": "\ud83d"}),
        ('{"s":"\\ud83d\\ude00', {"s": "😀"}),
        ('{"s":"\\ud83d\\n', {"s": "\ud83d\n"}),
        ('{"s":"line one\nline two', {}),  # an open string with a raw newline: dropped
        ('{"s":"x  ', {"s": "x"}),  # the text is trimmed: trailing spaces go
        ('{"s":"C:\\q\\w"}', {"s": "C:\\q\\w"}),  # complete: repaired, as pi-ai does
        ('{"a": 1, "b": [1, 2,],}', {"a": 1, "b": [1, 2]}),  # trailing commas
        ('{"a": "\\x"}', {"a": "\\x"}),
        ('{"a": "\\u12g4"}', {"a": "\\u12g4"}),
        ('{"a": [1 2]}', {"a": []}),
        ('{"n": 1, "m": 2.5e', {"n": 1, "m": 2.5}),
        ('{"s":"tab\there"}', {"s": "tab\there"}),
        ('{"a": 1} trailing junk', {"a": 1}),
        ('{"a": 1}}', {"a": 1}),
        ('{"a": -Inf', {"a": float("-inf")}),
        ("  \n", {}),
        ("", {}),
    ],
)
def test_documented_cases(text: str, expected: dict[str, Any]) -> None:
    """pi-ai's answers (checked against its parseStreamingJson), one rule per row."""
    assert _same(parse_streaming_json(text), expected)


@pytest.mark.parametrize(
    "text",
    [None, "[1, 2", "[1, 2]", '"a string"', "42", "true", "null", '"{\\"a\\": 1}"'],
)
def test_non_object_top_level_gives_empty_dict(text: str | None) -> None:
    """None and any top level that is not an object give {}."""
    assert parse_streaming_json(text) == {}


@pytest.mark.parametrize(
    "text",
    [
        '{"a" 1}',
        "{]",
        "{'a': 1}",
        '{"a": tx',
        '{"a": 01}',
        '{"a": 1.x}',
        '{"a": 1 "b": 2}',
        "nonsense",
        '{"a": }',
        "{,}",
    ],
)
def test_malformed_text_gives_empty_dict(text: str) -> None:
    """Text that is not a prefix of any JSON document gives {} (pi's behaviour)."""
    assert parse_streaming_json(text) == {}


def test_duplicate_keys_keep_the_last_like_json() -> None:
    """A repeated key ends with json's answer (the last value), prefixes stay dicts."""
    doc = '{"dup": 1, "dup": {"inner": 2}}'
    assert all(isinstance(parse_streaming_json(doc[:i]), dict) for i in range(len(doc)))
    assert parse_streaming_json(doc[:-1]) == {"dup": {"inner": 2}}
    assert parse_streaming_json(doc) == {"dup": {"inner": 2}}


def test_non_string_input_gives_empty_dict() -> None:
    """Even a wrongly typed argument does not raise."""
    assert parse_streaming_json(b'{"a": 1}') == {}  # type: ignore[arg-type]
    assert parse_streaming_json(12) == {}  # type: ignore[arg-type]


def test_deep_nesting_does_not_raise() -> None:
    """Nesting deeper than the recursion limit is handled, complete or not."""
    depth = 5000
    partial = '{"a": ' + "[" * depth
    result = parse_streaming_json(partial)
    node = result["a"]
    for _ in range(depth - 1):
        node = node[0]
    assert node == []
    assert isinstance(parse_streaming_json(partial + "]" * depth + "}"), dict)


def test_result_is_a_fresh_object_each_time() -> None:
    """Callers may mutate the result."""
    first = parse_streaming_json('{"a": [1]}')
    first["a"].append(2)
    assert parse_streaming_json('{"a": [1]}') == {"a": [1]}


_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**20), max_value=10**20)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(
    obj=st.dictionaries(st.text(max_size=8), _json_values, max_size=5),
    ensure_ascii=st.booleans(),
    indent=st.sampled_from([None, 2]),
)
def test_every_prefix_of_random_objects(
    obj: dict[str, Any], ensure_ascii: bool, indent: Any
) -> None:
    """Random objects, with and without \\u escapes (and surrogate pairs) and indentation."""
    _check_all_prefixes(json.dumps(obj, ensure_ascii=ensure_ascii, indent=indent))


@settings(max_examples=300, deadline=None)
@given(
    text=st.text(
        alphabet=st.sampled_from(list('{}[]",:\\ u0123456789.eE+-tfnrlaseNIy\n')) | st.characters()
    )
)
def test_never_raises_on_arbitrary_text(text: str) -> None:
    """Any text at all gives a dict."""
    assert isinstance(parse_streaming_json(text), dict)


# --- the fast path for flat objects: the same result as the general parser ---------------


def _strict(value: Any) -> str:
    """A comparison key that tells 1, 1.0 and True apart and sees key order."""
    return repr(value)


def _check_flat_matches_general(doc: str) -> int:
    """For every prefix, ``_parse_flat`` declines or agrees with ``_parse_partial`` (the port
    of partial-json) exactly; returns how many prefixes it took."""
    taken = 0
    for end in range(len(doc) + 1):
        prefix = doc[:end]
        trimmed = prefix.strip(_JS_SPACE)
        if not trimmed.startswith("{"):
            continue
        fast = _parse_flat(trimmed)
        if fast is None:
            continue
        taken += 1
        general = _parse_partial(trimmed)
        assert _strict(fast) == _strict(general), prefix
        assert _strict(parse_streaming_json(prefix)) == _strict(general), prefix
    return taken


FLAT_CORPUS = [
    '{"i": 0}',
    '{"path": "/tmp/x.txt", "limit": 100, "offset": -20}',
    '{"flag": true, "other": false, "nothing": null, "n": -1.25e-3, "m": 6.02E+23}',
    '{"a":1,"b":"two","c":3.5,"d":-0,"e":-0.0,"f":12345678901234567890123}',
    '{\n  "pretty": "x",\n  "y": 2\n}',
    '{"raw": "Grüße\n\t世界 😀", "ctl": "a\x01b"}',
    '{"dup": 1, "dup": "again", "z": 0}',
    '{"esc": "a\\nb", "after": 1}',
    '{"nested": {"a": 1}, "after": [1, 2]}',
    '{"lead": 01}',
]


@pytest.mark.parametrize("doc", FLAT_CORPUS + CORPUS)
def test_flat_fast_path_agrees_with_the_general_parser(doc: str) -> None:
    _check_flat_matches_general(doc)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{", {}),
        ('{"i":', {}),
        ('{"i": 4', {"i": 4}),
        ('{"a": "x', {"a": "x"}),
        ('{"a": "x"', {"a": "x"}),
        ('{"a": 1, "b": 2.5, "c": null, "d', {"a": 1, "b": 2.5, "c": None}),
        ('{"a" ', {}),
    ],
)
def test_flat_fast_path_takes_the_common_shapes(text: str, expected: dict[str, Any]) -> None:
    assert _strict(_parse_flat(text)) == _strict(expected)


@pytest.mark.parametrize(
    "text",
    [
        '{"a": "x\\n',  # an escape
        '{"a": -',  # a lone minus
        '{"a": 1.',  # a truncated fraction
        '{"a": 1234567890123456789',  # long enough for int() and json to differ
        '{"a": {',  # nesting
        '{"a": [1',
        '{"a": tr',  # a truncated literal
        '{"a": NaN, ',
        '{"a": 1}',  # closed
        '{"a": 1 2',  # malformed
        '[1, ',
    ],
)
def test_flat_fast_path_leaves_the_rest_to_the_general_parser(text: str) -> None:
    assert _parse_flat(text) is None


_flat_values = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**25), max_value=10**25)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
    | st.text(alphabet="ab \t\n\"\\/é😀\x00", max_size=6)
)


@settings(max_examples=200, deadline=None)
@given(
    obj=st.dictionaries(st.text(max_size=6), _flat_values | _json_values, max_size=6),
    ensure_ascii=st.booleans(),
    separators=st.sampled_from([None, (",", ":"), (" , ", " : ")]),
    indent=st.sampled_from([None, 2, "\t"]),
)
def test_flat_fast_path_agrees_on_every_prefix_of_random_objects(
    obj: dict[str, Any], ensure_ascii: bool, separators: Any, indent: Any
) -> None:
    doc = json.dumps(obj, ensure_ascii=ensure_ascii, separators=separators, indent=indent)
    _check_flat_matches_general(doc)


@settings(max_examples=100, deadline=None)
@given(obj=st.dictionaries(st.text(alphabet="abc_", max_size=6),
                           st.integers(0, 1000) | st.text(alphabet="xyz /.", max_size=8),
                           min_size=1, max_size=5))
def test_flat_fast_path_takes_every_prefix_of_simple_objects(obj: dict[str, Any]) -> None:
    """Escape-free strings and integers: every proper prefix but "" goes the fast way."""
    doc = json.dumps(obj)
    assert _check_flat_matches_general(doc) == len(doc) - 1


# --- long open strings: decoded incrementally, the same answers as a fresh parse ----------


def _fresh(text: str) -> Any:
    """``parse_streaming_json`` without what this thread remembers of earlier strings (which
    is left as it was)."""
    memos = _partial_json._memos
    saved = getattr(memos, "slots", []), getattr(memos, "points", [])
    memos.slots, memos.points = [], []
    try:
        return parse_streaming_json(text)
    finally:
        memos.slots, memos.points = saved


def _stream_and_compare(doc: str, steps: list[int]) -> int:
    """Parse ``doc`` prefix by prefix (growing by ``steps``, cycled) and compare each with a
    fresh parse; returns how many prefixes used a remembered string."""
    _partial_json._memos.slots = []
    _partial_json._memos.points = []
    used = 0
    end = 0
    k = 0
    while end < len(doc):
        end = min(len(doc), end + steps[k % len(steps)])
        k += 1
        before = list(getattr(_partial_json._memos, "slots", []))
        ours = parse_streaming_json(doc[:end])
        used += bool(before) and any(
            m[0] <= len(doc[:end]) and doc[:end].strip(_JS_SPACE).startswith(m[1], m[0])
            for m in before)
        assert _strict(ours) == _strict(_fresh(doc[:end])), doc[:end][-60:]
    return used


_piece = st.lists(st.sampled_from(list('ab "\\/\n\té😀') + ["\\u00e9", "\\ud83d", "\\ude00",
                                                                "\\x", "\\u12", "\\"]),
                  min_size=1, max_size=30).map("".join)


@settings(max_examples=40, deadline=None)
@given(pieces=st.lists(_piece, min_size=1, max_size=8),
       steps=st.lists(st.integers(1, 40), min_size=1, max_size=5),
       ensure_ascii=st.booleans(), raw=st.booleans())
def test_a_long_open_string_decodes_the_same_incrementally(
    pieces: list[str], steps: list[int], ensure_ascii: bool, raw: bool
) -> None:
    """Every prefix of a document with a long string (valid escapes, or raw text with any
    backslashes, quotes and surrogate halves) parses as a fresh parse does."""
    body = "".join(pieces)
    body = body * (2200 // len(body) + 1)
    if raw:  # whatever the model wrote, escapes valid or not
        doc = '{"path": "x", "content": "' + body + '", "n": 1}'
    else:
        doc = json.dumps({"path": "x", "content": body, "n": 1}, ensure_ascii=ensure_ascii)
    _stream_and_compare(doc, steps)


def test_the_long_string_of_a_stream_is_decoded_once() -> None:
    """A 100 KB escaped argument streamed in 10-character deltas reuses the string decoded
    so far on (almost) every delta, and answers as a fresh parse on each."""
    content = ('def f(x):\n    return "x" * 2  # \\ é 😀\n' * 200)
    doc = json.dumps({"path": "a.py", "content": content})
    used = _stream_and_compare(doc, [10])
    assert used > (len(doc) - 2200) / 10 * 0.9


@settings(max_examples=12, deadline=None)
@given(items=st.lists(_json_values, min_size=1, max_size=6),
       steps=st.lists(st.integers(8, 40), min_size=1, max_size=4),
       separators=st.sampled_from([None, (",", ":"), (" , ", " : ")]),
       indent=st.sampled_from([None, 1]),
       mutation=st.sampled_from(["", "1.", "2e", "-", '"a\\q"', "nu"]))
def test_a_long_structure_parses_the_same_when_resumed(
    items: list[Any], steps: list[int], separators: Any, indent: Any, mutation: str
) -> None:
    """Every prefix of a long document of many small values (with a value pi-ai's parser
    must repair or cut inside it) parses as a fresh parse does: resuming from a checkpoint
    of the text parsed before changes no answer."""
    rows = [{"i": k, "v": items[k % len(items)]} for k in range(24)]
    doc = json.dumps({"rows": rows, "after": [1, {"x": "y"}]}, separators=separators,
                     indent=indent)
    if mutation:
        at = len(doc) // 2
        at = doc.index(",", at) + 1
        doc = doc[:at] + " " + mutation + "," + doc[at:]
    _stream_and_compare(doc, steps)


def test_a_long_structure_resumes_from_checkpoints() -> None:
    """A 30 KB list of small objects in 10-character deltas: parsing resumes where the last
    delta left off, and every answer is a fresh parse's."""
    doc = json.dumps({"edits": [{"old": f"x{i}", "new": f"y{i}", "n": i} for i in range(900)]})
    found = []
    real = _partial_json._checkpoint_for

    def spy(s: str) -> Any:
        point = real(s)
        found.append(point is not None)
        return point

    _partial_json._checkpoint_for = spy  # type: ignore[assignment]
    try:
        _stream_and_compare(doc[:6000], [10])
    finally:
        _partial_json._checkpoint_for = real  # type: ignore[assignment]
    # half the calls are the fresh parses (nothing to resume); of the others, all but the
    # first ~1 KB resume
    assert sum(found) > 0.8 * (len(found) / 2 - 1024 / 10)
