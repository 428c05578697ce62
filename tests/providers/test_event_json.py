"""parse_event_json: the direct-scanner fast path gives exactly what json.loads gives."""

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from piagent.errors import ProviderResponseError
from piagent.providers._wire import SSEEvent, parse_event_json


def _strict(value: Any) -> str:
    return repr(value)  # tells 1, 1.0 and True apart, sees key order


@pytest.mark.parametrize(
    "data",
    [
        '{"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}',
        '{"a": [1, 2.5, -0.0, true, false, null, "\\u00e9\\ud83d\\ude00"], "a": "dup"}',
        "[]",
        '"text"',
        "12",
        " {\"lead\": 1}",  # leading whitespace: the fallback
        "{\"trail\": 1}\n ",  # trailing whitespace: the fallback
        "NaN",
        '{"x": -Infinity}',
    ],
)
def test_same_value_as_json_loads(data: str) -> None:
    got = parse_event_json(SSEEvent("message", data), "OpenAI")
    want = json.loads(data)
    if isinstance(want, float) and math.isnan(want):
        assert isinstance(got, float) and math.isnan(got)
    else:
        assert _strict(got) == _strict(want)


def test_an_integer_too_long_for_int_is_read_as_a_float() -> None:
    data = '{"n": ' + "9" * 5000 + "}"
    assert parse_event_json(SSEEvent("message", data), "OpenAI") == {"n": math.inf}


@pytest.mark.parametrize(
    ("data", "truncated", "text"),
    [
        ('{"a": 1} extra', False, "not valid JSON (Extra data"),
        ("\ufeff{}", False, "not valid JSON (Unexpected UTF-8 BOM"),
        ('{"a": ', True, "cut off in the middle of an event"),
        ("", False, "not valid JSON (Expecting value"),
        ("[" * 100000 + "]" * 100000, False, "nested too deeply"),
    ],
)
def test_errors_are_json_loads_errors(data: str, truncated: bool, text: str) -> None:
    with pytest.raises(ProviderResponseError) as info:
        parse_event_json(SSEEvent("message", data, truncated=truncated), "OpenAI")
    assert text in str(info.value)


_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=5), children, max_size=4),
    max_leaves=15,
)


@settings(max_examples=150, deadline=None)
@given(value=_values, ensure_ascii=st.booleans(), pad=st.sampled_from(["", " ", "\n"]))
def test_random_documents_decode_as_json_loads_does(value: Any, ensure_ascii: bool,
                                                    pad: str) -> None:
    data = pad + json.dumps(value, ensure_ascii=ensure_ascii) + pad
    got = parse_event_json(SSEEvent("message", data), "OpenAI")
    assert _strict(got) == _strict(json.loads(data))
