"""Tools: the @tool decorator, return mapping, argument coercion and validation.

Covers schema generation for every supported hint and both docstring styles, injected
parameters, argument conversion (Enum, dataclass, TypedDict), the return mapping, AJV-style
coercion, pi's exact validation error text, the compile-once validator cache, a bad schema,
and (property-based) that the fast checker never accepts what jsonschema rejects.
"""

import dataclasses
import enum
import json
import logging
import threading
import warnings
from typing import Annotated, Any, Literal, Optional, TypedDict, Union

import jsonschema
import pytest
from hypothesis import given, settings, strategies as st

import piagent.tools._schema as schema_mod
from piagent.abort import AbortSignal
from piagent.errors import PiAgentError, ToolArgumentError
from piagent.messages import ImageContent, TextContent
from piagent.tools import AgentTool, AgentToolResult, tool, validate_tool_arguments
from piagent.tools._check import CheckBuilder
from piagent.tools._convert import Converter

# most functions here exist for their schemas, without a docstring: @tool's warning is
# asserted once, in test_no_docstring_gives_empty_description_and_a_warning
pytestmark = pytest.mark.filterwarnings("ignore:@tool .* has no docstring:UserWarning")

# --- helpers and types used by the tools below ------------------------------------------


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


@dataclasses.dataclass
class Point:
    """A point on the plane."""

    x: int
    y: int = 0


@dataclasses.dataclass
class Shape:
    name: str
    points: list[Point] = dataclasses.field(default_factory=list)
    color: Color = Color.RED


class Options(TypedDict):
    """Reading options."""

    encoding: str
    strict: bool


class PartialOptions(TypedDict, total=False):
    encoding: str


def _run(t: AgentTool, params: dict[str, Any], call_id: str = "call-1") -> AgentToolResult:
    updates: list[AgentToolResult] = []
    return t.execute(call_id, validate_tool_arguments(t, params), AbortSignal(), updates.append)


def _props(t: AgentTool) -> dict[str, Any]:
    props: dict[str, Any] = t.parameters["properties"]
    return props


def _schema_tool(schema: dict[str, Any], name: str = "t") -> AgentTool:
    return AgentTool(
        name=name, description="", parameters=schema, execute=lambda *a: AgentToolResult()
    )


# --- schema generation ----------------------------------------------------------------


def test_scalar_hints_map_to_json_types() -> None:
    @tool
    def f(s: str, i: int, n: float, b: bool) -> None:
        pass

    assert f.parameters == {
        "type": "object",
        "properties": {
            "s": {"type": "string"},
            "i": {"type": "integer"},
            "n": {"type": "number"},
            "b": {"type": "boolean"},
        },
        "required": ["s", "i", "n", "b"],
        "additionalProperties": False,
    }
    assert f.name == "f"


@pytest.mark.parametrize(
    ("hint", "expected"),
    [
        (Optional[int], {"type": ["integer", "null"]}),  # noqa: UP045 - the old spelling is what is tested
        (int | None, {"type": ["integer", "null"]}),
        (Union[int, str], {"anyOf": [{"type": "integer"}, {"type": "string"}]}),
        (
            Union[int, str, None],
            {"anyOf": [{"type": "integer"}, {"type": "string"}, {"type": "null"}]},
        ),
        (list[str], {"type": "array", "items": {"type": "string"}}),
        (list, {"type": "array"}),
        (
            list[list[int]],
            {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}},
        ),
        (tuple[int, ...], {"type": "array", "items": {"type": "integer"}}),
        (
            tuple[int, str],
            {
                "type": "array",
                "items": [{"type": "integer"}, {"type": "string"}],
                "minItems": 2,
                "maxItems": 2,
            },
        ),
        (set[str], {"type": "array", "uniqueItems": True, "items": {"type": "string"}}),
        (dict[str, int], {"type": "object", "additionalProperties": {"type": "integer"}}),
        (dict, {"type": "object"}),
        (Any, {}),
        (Literal["r", "w"], {"type": "string", "enum": ["r", "w"]}),
        (Literal[1, "a"], {"enum": [1, "a"]}),
        (Optional[Literal["r", "w"]], {"type": ["string", "null"], "enum": ["r", "w", None]}),  # noqa: UP045 - the old spelling is what is tested
        (Color, {"type": "string", "enum": ["red", "blue"]}),
        (Level, {"type": "integer", "enum": [1, 2]}),
        (Annotated[str, "The path."], {"type": "string", "description": "The path."}),
        (
            Optional[list[Point]],  # noqa: UP045
            {
                "type": ["array", "null"],
                "items": {
                    "type": "object",
                    "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
                    "required": ["x"],
                    "additionalProperties": False,
                    "description": "A point on the plane.",
                },
            },
        ),
    ],
)
def test_hint_schemas(hint: Any, expected: dict[str, Any]) -> None:
    """Each supported hint gives the expected property schema."""

    def f(value):  # type: ignore[no-untyped-def]
        pass

    f.__annotations__ = {"value": hint}
    assert _props(tool(f))["value"] == expected


def test_dataclass_and_typeddict_schemas() -> None:
    @tool
    def f(shape: Shape, opts: Options, partial: PartialOptions) -> None:
        pass

    props = _props(f)
    assert props["shape"] == {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "points": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
                    "required": ["x"],
                    "additionalProperties": False,
                    "description": "A point on the plane.",
                },
            },
            "color": {"type": "string", "enum": ["red", "blue"]},
        },
        "required": ["name"],
        "additionalProperties": False,
    }
    assert props["opts"] == {
        "type": "object",
        "properties": {"encoding": {"type": "string"}, "strict": {"type": "boolean"}},
        "required": ["encoding", "strict"],
        "additionalProperties": False,
        "description": "Reading options.",
    }
    assert props["partial"] == {
        "type": "object",
        "properties": {"encoding": {"type": "string"}},
        "additionalProperties": False,
    }
    jsonschema.Draft7Validator.check_schema(f.parameters)


def test_defaults_are_not_required_and_are_declared() -> None:
    @tool
    def f(
        path: str, limit: int = 10, color: Color = Color.BLUE, point: Point | None = None
    ) -> None:
        pass

    assert f.parameters["required"] == ["path"]
    assert _props(f)["limit"] == {"type": "integer", "default": 10}
    assert _props(f)["color"]["default"] == "blue"
    assert _props(f)["point"]["default"] is None


def test_no_required_key_when_nothing_is_required() -> None:
    @tool
    def f(a: int = 1) -> None:
        pass

    assert "required" not in f.parameters
    assert f.parameters["additionalProperties"] is False


def test_var_keyword_allows_and_receives_extra_properties() -> None:
    @tool
    def f(a: int, **rest: Any) -> Any:
        return {"a": a, "rest": rest}

    assert f.parameters["additionalProperties"] is True
    assert _run(f, {"a": 1, "b": 2, "signal": "spoof"}).structured_content == {
        "a": 1,
        "rest": {"b": 2},
    }


def test_unsupported_hint_raises_type_error_naming_the_parameter() -> None:
    def f(when: threading.Event) -> None:
        pass

    with pytest.raises(TypeError, match="parameter 'when'"):
        tool(f)

    def g(m: dict[int, str]) -> None:
        pass

    with pytest.raises(TypeError, match="dict keys must be str"):
        tool(g)


def test_async_function_is_refused() -> None:
    async def f() -> None:
        pass

    with pytest.raises(TypeError, match="async"):
        tool(f)


def test_unannotated_parameter_accepts_anything() -> None:
    def f(x, y=2):  # type: ignore[no-untyped-def]
        return [x, y]

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t = tool(f)
    # issue 49 item 6: as a missing docstring does, a missing hint warns, at the caller
    hinted = [w for w in caught if "type hint" in str(w.message)]
    assert [str(w.message) for w in hinted] == [
        "@tool 'f': parameters 'x', 'y' have no type hint, so the model may send any JSON "
        "value and nothing is checked; annotate them (x: str, ...)."]
    assert hinted[0].filename == __file__
    assert _props(t) == {"x": {}, "y": {"default": 2}}

    @tool
    def g(signal, count: int, *rest, **more):  # type: ignore[no-untyped-def]
        """Injected, *args and **kwargs need no hint; a declared one does."""
        return count

    with pytest.warns(UserWarning, match=r"^@tool 'h': parameter 'x' has no type hint, "):
        @tool
        def h(x, y: int = 1) -> int:  # type: ignore[no-untyped-def]
            """One bare parameter."""
            return y
    assert _run(t, {"x": {"any": ["thing"]}}).structured_content == [{"any": ["thing"]}, 2]


# --- names and docstrings ---------------------------------------------------------------


def test_google_docstring() -> None:
    @tool
    def read(path: str, limit: int = 10, mode: str = "r") -> str:
        """Read a text file.

        Reads at most ``limit`` lines.

        Args:
            path: The file to read. Relative paths
                start at the working directory.
            limit (int): How many lines.
            mode: Open mode.

        Returns:
            The text.
        """
        return path

    assert (
        read.description
        == "Read a text file.\n\nReads at most ``limit`` lines.\n\nReturns:\n    The text."
    )
    assert _props(read)["path"]["description"] == (
        "The file to read. Relative paths start at the working directory."
    )
    assert _props(read)["limit"]["description"] == "How many lines."
    assert _props(read)["mode"]["description"] == "Open mode."


def test_rest_docstring() -> None:
    @tool
    def read(path: str, limit: int = 10) -> str:
        """Read a text file.

        :param path: The file to read,
            relative or absolute.
        :type path: str
        :param int limit: How many lines.
        :returns: The text.
        """
        return path

    assert read.description == "Read a text file.\n\n:returns: The text."
    assert _props(read)["path"]["description"] == "The file to read, relative or absolute."
    assert _props(read)["limit"]["description"] == "How many lines."


def test_docstring_description_wins_over_annotated() -> None:
    @tool
    def f(a: Annotated[int, "from Annotated"], b: Annotated[int, "only Annotated"]) -> None:
        """Do it.

        Args:
            a: from the docstring
        """

    assert _props(f)["a"]["description"] == "from the docstring"
    assert _props(f)["b"]["description"] == "only Annotated"


def test_no_docstring_gives_empty_description_and_a_warning() -> None:
    with pytest.warns(UserWarning) as caught:
        @tool
        def f() -> None:
            pass

    assert [str(w.message) for w in caught] == [
        "@tool 'f': the function has no docstring, so the model gets an empty description; "
        "write one saying what it does, or pass description='...'."]
    assert caught[0].filename == __file__  # it points at the decorated function
    assert f.description == ""
    assert f.parameters == {"type": "object", "properties": {}, "additionalProperties": False}


def test_decorator_forms_and_overrides() -> None:
    @tool(name="read_file", label="Read", execution_mode="sequential")
    def read(path: str) -> str:
        """Read."""
        return path

    assert (read.name, read.description, read.label, read.execution_mode) == (
        "read_file",
        "Read.",
        "Read",
        "sequential",
    )

    def write(path: str) -> str:
        """Docstring."""
        return path

    w = tool(write, name="w", description="Write a file.")
    assert (w.name, w.description) == ("w", "Write a file.")
    assert isinstance(w, AgentTool)
    assert w.execute.__wrapped__ is write  # type: ignore[attr-defined]


# --- injection and conversion -----------------------------------------------------------


def test_injected_parameters_are_passed_and_not_declared() -> None:
    seen: dict[str, Any] = {}

    @tool
    def f(path: str, signal: AbortSignal, on_update, tool_call_id: str) -> str:  # type: ignore[no-untyped-def]
        seen.update(signal=signal, tool_call_id=tool_call_id)
        on_update(AgentToolResult(content=[TextContent(text="half")]))
        return path

    assert list(_props(f)) == ["path"]
    assert f.parameters["required"] == ["path"]
    signal = AbortSignal()
    updates: list[AgentToolResult] = []
    f.execute("call-7", {"path": "p"}, signal, updates.append)
    assert seen == {"signal": signal, "tool_call_id": "call-7"}
    assert updates == [AgentToolResult(content=[TextContent(text="half")])]


def test_positional_only_parameters() -> None:
    def f(a: int, b: int = 5, /, c: int = 0) -> list[int]:
        return [a, b, c]

    t = tool(f)
    assert _run(t, {"a": 1, "c": 3}).structured_content == [1, 5, 3]


def test_enum_dataclass_and_typeddict_arguments_are_converted() -> None:
    got: dict[str, Any] = {}

    @tool
    def f(
        color: Color,
        level: Level,
        shape: Shape,
        opts: Options,
        point: Point | None = None,
        ratio: float = 1.0,
        pair: tuple[int, str] = (0, ""),
    ) -> None:
        got.update(
            color=color, level=level, shape=shape, opts=opts, point=point, ratio=ratio, pair=pair
        )

    _run(
        f,
        {
            "color": "blue",
            "level": "2",
            "shape": {"name": "tri", "points": [{"x": 1}, {"x": "2", "y": 3}], "color": "blue"},
            "opts": {"encoding": "utf-8", "strict": "true"},
            "ratio": 2,
            "pair": [1, 2],
        },
    )
    assert got["color"] is Color.BLUE
    assert got["level"] is Level.HIGH
    assert got["shape"] == Shape("tri", [Point(1, 0), Point(2, 3)], Color.BLUE)
    assert type(got["opts"]) is dict and got["opts"] == {"encoding": "utf-8", "strict": True}
    assert got["point"] is None
    assert got["ratio"] == 2.0 and type(got["ratio"]) is float
    assert got["pair"] == (1, "2")


# --- return mapping ----------------------------------------------------------------------


def test_return_mapping() -> None:
    result = AgentToolResult(content=[TextContent(text="x")], details={"d": 1}, terminate=True)
    image = ImageContent(data="aGk=", mime_type="image/png")

    @tool
    def f(kind: str) -> Any:
        return {
            "str": "hello",
            "none": None,
            "result": result,
            "dict": {"a": 1, "ü": [Color.RED, (1, 2)]},
            "dataclass": Point(1, 2),
            "int": 42,
            "blocks": [TextContent(text="see"), image],
            "block": image,
        }[kind]

    assert _run(f, {"kind": "str"}) == AgentToolResult(content=[TextContent(text="hello")])
    assert _run(f, {"kind": "none"}) == AgentToolResult(content=[])
    assert _run(f, {"kind": "result"}) is result
    d = _run(f, {"kind": "dict"})
    assert d.content == [TextContent(text='{"a": 1, "ü": ["red", [1, 2]]}')]
    assert d.structured_content == {"a": 1, "ü": ["red", [1, 2]]}
    p = _run(f, {"kind": "dataclass"})
    assert (p.content[0].text, p.structured_content) == ('{"x": 1, "y": 2}', {"x": 1, "y": 2})  # type: ignore[union-attr]
    assert _run(f, {"kind": "int"}).structured_content == 42
    assert _run(f, {"kind": "blocks"}).content == [TextContent(text="see"), image]
    assert _run(f, {"kind": "block"}).content == [image]


def test_exceptions_from_the_function_propagate() -> None:
    """The loop turns them into error results; execute itself does not catch."""

    @tool
    def f() -> None:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        _run(f, {})


# --- coercion ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("prop", "value", "expected"),
    [
        ({"type": "integer"}, "5", 5),
        ({"type": "integer"}, " 7 ", 7),
        ({"type": "integer"}, "5.0", 5),
        ({"type": "integer"}, 5.0, 5),
        ({"type": "integer"}, True, 1),
        ({"type": "integer"}, None, 0),
        ({"type": "number"}, "1.5", 1.5),
        ({"type": "number"}, "5", 5),
        ({"type": "number"}, "-2e3", -2000.0),
        ({"type": "number"}, False, 0),
        ({"type": "boolean"}, "true", True),
        ({"type": "boolean"}, "false", False),
        ({"type": "boolean"}, 1, True),
        ({"type": "boolean"}, 0, False),
        ({"type": "boolean"}, None, False),
        ({"type": "string"}, 5, "5"),
        ({"type": "string"}, 1.5, "1.5"),
        ({"type": "string"}, 2.0, "2"),
        ({"type": "string"}, True, "true"),
        ({"type": "string"}, None, "null"),
        ({"type": "null"}, "", None),
        ({"type": "null"}, 0, None),
        ({"type": "null"}, False, None),
        ({"type": ["integer", "null"]}, "3", 3),
        ({"type": ["integer", "null"]}, "", None),
        ({"type": ["integer", "null"]}, None, None),
        ({"type": ["string", "integer"]}, 3, 3),
        ({"type": "array", "items": {"type": "integer"}}, ["1", 2, "3"], [1, 2, 3]),
        ({"type": "object", "additionalProperties": {"type": "integer"}}, {"a": "1"}, {"a": 1}),
        ({"anyOf": [{"type": "integer"}, {"type": "null"}]}, "4", 4),
        ({"anyOf": [{"type": "integer"}, {"type": "null"}]}, None, None),
        ({"type": "string"}, "unchanged", "unchanged"),
        # pi-ai 1.5-1.6.1 (pi-schema's conversion rules)
        ({"type": "integer"}, 2.5, 2),
        ({"type": "integer"}, "3.5", 3),
        ({"type": "number"}, "", 0),
        ({"type": "number"}, "0x10", 16),
        ({"type": "boolean"}, "TRUE", True),
        ({"type": "boolean"}, "0", False),
        ({"type": "null"}, "null", None),
        ({"enum": [1, 2]}, "2", 2),
        ({"const": True}, "true", True),
        ({"type": "array", "items": {"type": "integer"}}, "5", [5]),
        ({"type": "array"}, 7, [7]),
        ({"type": "array", "items": {"type": "string"}}, None, ["null"]),
        ({"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}]},
         "solo", ["solo"]),
    ],
)
def test_coercion(prop: dict[str, Any], value: Any, expected: Any) -> None:
    """pi-ai 1.6.1's coercion rules (a required property: ``null`` is converted too)."""
    t = _schema_tool({"type": "object", "properties": {"v": prop}, "required": ["v"]})
    out = validate_tool_arguments(t, {"v": value})
    assert out == {"v": expected}
    assert type(out["v"]) is type(expected)


@pytest.mark.parametrize(
    ("prop", "value", "kept"),
    [
        ({"type": "integer"}, None, False),
        ({"type": "string"}, None, False),
        ({"type": "boolean"}, None, False),
        ({"type": "object", "properties": {}}, None, False),
        ({"type": ["integer", "null"]}, None, True),
        ({"anyOf": [{"type": "integer"}, {"type": "null"}]}, None, True),
        ({}, None, True),
    ],
)
def test_optional_null_is_removed_unless_the_schema_accepts_null(
    prop: dict[str, Any], value: Any, kept: bool
) -> None:
    """pi-ai's normalizeOptionalNulls: an optional property given null that its schema
    rejects is removed (the tool sees its default), not coerced to 0/""/False."""
    args = {"dir": "/", "v": value}
    t = _schema_tool({"type": "object", "properties": {"dir": {"type": "string"}, "v": prop},
                      "required": ["dir"]})
    assert validate_tool_arguments(t, args) == ({"dir": "/", "v": None} if kept else {"dir": "/"})
    assert args == {"dir": "/", "v": value}  # the model's arguments are not touched


@pytest.mark.parametrize(
    ("prop", "value", "expected"),
    [
        ({"type": "array", "items": {"type": "integer"}}, "5", [5]),
        ({"type": "array", "items": {"type": "string"}}, "solo", ["solo"]),
        ({"type": "array"}, {"k": 1}, [{"k": 1}]),
        ({"type": "array", "items": {"type": "object", "properties": {"n": {"type": "integer"}}}},
         {"n": "4"}, [{"n": 4}]),
    ],
)
def test_a_single_value_becomes_a_one_element_array(prop: dict[str, Any], value: Any,
                                                    expected: Any) -> None:
    """pi-ai 1.5+: a single value where an array is expected becomes a one-element array,
    its item converted by the item schema; a tuple (``items`` as a list) never wraps."""
    t = _schema_tool({"type": "object", "properties": {"v": prop}})
    assert validate_tool_arguments(t, {"v": value}) == {"v": expected}
    tuple_tool = _schema_tool({"type": "object", "properties": {
        "v": {"type": "array", "items": [{"type": "integer"}]}}})
    with pytest.raises(ToolArgumentError) as caught:
        validate_tool_arguments(tuple_tool, {"v": "5"})
    assert caught.value.errors == ["v: expected array, got string"]


def test_coercion_recurses_into_objects_arrays_and_refs() -> None:
    """As pi-ai 1.6.1: nested objects, item lists and tuples are coerced, and a ``$ref`` is
    followed (pi-ai 1.4.0 stopped at it)."""
    t = _schema_tool(
        {
            "type": "object",
            "$defs": {"edit": {"type": "object", "properties": {"line": {"type": "integer"}}}},
            "properties": {
                "edits": {"type": "array", "items": {"$ref": "#/$defs/edit"}},
                "opts": {
                    "type": "object",
                    "properties": {
                        "deep": {"type": "object", "properties": {"n": {"type": "number"}}}
                    },
                },
                "pair": {"type": "array", "items": [{"type": "integer"}, {"type": "string"}]},
            },
        }
    )
    assert validate_tool_arguments(
        t, {"edits": [{"line": 3}], "opts": {"deep": {"n": "0.5"}}, "pair": ["1", 2]},
    ) == {"edits": [{"line": 3}], "opts": {"deep": {"n": 0.5}}, "pair": [1, "2"]}
    assert validate_tool_arguments(t, {"edits": [{"line": "3"}, {"line": 4}]}) == {
        "edits": [{"line": 3}, {"line": 4}]}
    with pytest.raises(ToolArgumentError) as caught:
        validate_tool_arguments(t, {"edits": [{"line": "x"}, {"line": 4}]})
    assert caught.value.errors == ["edits.0.line: expected integer, got string"]


def test_arguments_are_deep_copied() -> None:
    t = _schema_tool({"type": "object", "properties": {"n": {"type": "integer"}}})
    original: dict[str, Any] = {"n": "1", "nested": {"list": [1, [2]]}}
    out = validate_tool_arguments(t, original)
    assert original == {"n": "1", "nested": {"list": [1, [2]]}}
    assert out == {"n": 1, "nested": {"list": [1, [2]]}}
    assert out["nested"] is not original["nested"]
    assert out["nested"]["list"][1] is not original["nested"]["list"][1]


# --- validation errors ------------------------------------------------------------------


def test_error_text_is_pis_format_exactly() -> None:
    t = _schema_tool(
        {
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "limit": {"type": "integer", "minimum": 1},
                "mode": {"enum": ["r", "w"]},
                "items": {"type": "array", "items": {"type": "object", "required": ["id"]}},
                "opts": {
                    "type": "object",
                    "properties": {"depth": {"type": "integer"}},
                    "required": ["name"],
                    "additionalProperties": False,
                },
            },
            "required": ["path"],
            "additionalProperties": False,
        },
        name="read",
    )
    args = {
        "limit": 0,
        "mode": "x",
        "items": [{"id": 1}, {}],
        "opts": {"depth": "deep", "color": "red"},
        "bogus": "é",
    }
    with pytest.raises(ToolArgumentError) as info:
        validate_tool_arguments(t, args)
    # pi-ai 1.6.1's text, character for character (every error, no cap)
    assert str(info.value) == (
        'Validation failed for tool "read":\n'
        "  - path: missing\n"
        "  - limit: expected >= 1\n"
        '  - mode: expected one of ["r","w"]\n'
        "  - items.1.id: missing\n"
        "  - opts.name: missing\n"
        "  - opts.depth: expected integer, got string\n"
        "  - opts.color: unknown field\n"
        "  - bogus: unknown field\n"
        "\n"
        "Received arguments:\n" + json.dumps(args, indent=2, ensure_ascii=False)
    )
    assert '"bogus": "é"' in str(info.value)
    err = info.value
    assert err.tool_name == "read"
    assert err.errors[0] == "path: missing"
    assert len(err.errors) == 8
    assert isinstance(err, ValueError) and isinstance(err, PiAgentError)


def test_error_text_shows_original_not_coerced_arguments() -> None:
    t = _schema_tool(
        {"type": "object", "properties": {"n": {"type": "integer"}, "s": {"type": "boolean"}}},
        name="x",
    )
    with pytest.raises(ToolArgumentError) as info:
        validate_tool_arguments(t, {"n": "5", "s": "maybe"})
    assert str(info.value) == (
        'Validation failed for tool "x":\n  - s: expected boolean, got string\n\n'
        'Received arguments:\n{\n  "n": "5",\n  "s": "maybe"\n}'
    )


@pytest.mark.parametrize(
    ("prop", "value", "message"),
    [
        ({"type": "string", "minLength": 2}, "a", "expected at least 2 characters"),
        ({"type": "string", "maxLength": 1}, "ab", "expected at most 1 characters"),
        ({"type": "string", "pattern": "^a"}, "b", "expected to match ^a"),
        ({"type": "array", "maxItems": 1}, [1, 2], "expected at most 1 items"),
        ({"type": "number", "exclusiveMaximum": 1}, 1, "expected < 1"),
        ({"type": "number", "maximum": 0.5}, 1, "expected <= 0.5"),
        ({"type": "integer", "multipleOf": 2}, 3, "expected a multiple of 2"),
        ({"const": "x"}, "y", 'expected "x"'),
        ({"enum": ["fast", "slow"]}, "x", 'expected one of ["fast","slow"]'),
        ({"type": ["string", "null"]}, [1], "expected string or null, got array"),
        ({"not": {"type": "string"}}, "s", "must not match the schema in not"),
        ({"type": "array", "uniqueItems": True}, [1, 1], "expected unique items"),
        ({"type": "object", "minProperties": 1}, {}, "expected at least 1 properties"),
    ],
)
def test_error_messages_read_like_pi_ai(prop: dict[str, Any], value: Any, message: str) -> None:
    t = _schema_tool({"type": "object", "properties": {"v": prop}})
    with pytest.raises(ToolArgumentError) as info:
        validate_tool_arguments(t, {"v": value})
    assert info.value.errors == [f"v: {message}"]


def test_any_of_reports_the_branch_to_blame() -> None:
    t = _schema_tool(
        {"type": "object", "properties": {"v": {"anyOf": [{"type": "integer"}, {"type": "null"}]}}}
    )
    with pytest.raises(ToolArgumentError) as info:
        validate_tool_arguments(t, {"v": "abc"})
    assert info.value.errors == ["v: expected integer, got string"]


def test_non_object_arguments_fail_at_root() -> None:
    t = _schema_tool({"type": "object"})
    with pytest.raises(ToolArgumentError) as info:
        validate_tool_arguments(t, ["not", "an", "object"])
    assert info.value.errors == ["root: expected object, got array"]


def test_tool_from_decorator_validates() -> None:
    @tool
    def read(path: str, limit: int = 10) -> str:
        return path

    with pytest.raises(ToolArgumentError) as info:
        validate_tool_arguments(read, {"limit": "many"})
    assert info.value.errors == ["path: missing", "limit: expected integer, got string"]


# --- compile once, bad schemas ----------------------------------------------------------


def test_validator_is_compiled_once_per_schema() -> None:
    t = _schema_tool({"type": "object", "properties": {"n": {"type": "integer"}}})
    first = schema_mod.compile_schema(t.parameters)
    for i in range(50):
        validate_tool_arguments(t, {"n": str(i)})
    with pytest.raises(ToolArgumentError):
        validate_tool_arguments(t, {"n": "x"})
    assert schema_mod.compile_schema(t.parameters) is first
    twin = AgentTool(name="twin", description="", parameters=t.parameters, execute=t.execute)
    validate_tool_arguments(twin, {"n": 1})
    assert schema_mod.compile_schema(twin.parameters) is first
    t.parameters = {"type": "object"}  # a new schema object compiles again
    validate_tool_arguments(t, {})
    assert schema_mod.compile_schema(t.parameters) is not first


def test_compiled_schema_has_fast_check_for_common_keywords() -> None:
    """The common case skips jsonschema; unknown keywords fall back to it."""

    @tool
    def f(path: str, mode: Literal["r", "w"] = "r", opts: Options | None = None) -> None:
        pass

    assert schema_mod.compile_schema(f.parameters).check is not None
    with_ref = {
        "type": "object",
        "properties": {"a": {"$ref": "#/definitions/x"}},
        "definitions": {"x": {}},
    }
    assert schema_mod.compile_schema(with_ref).check is None
    vendor = {"type": "object", "x-vendor-hint": 1, "properties": {"a": {"type": "string"}}}
    assert schema_mod.compile_schema(vendor).check is not None


def test_the_fast_check_of_an_object_node_covers_type_required_and_properties() -> None:
    check = schema_mod.compile_schema({
        "type": "object", "properties": {"i": {"type": "integer"},
                                         "o": {"type": "object", "properties": {}}},
        "required": ["i"], "additionalProperties": {"type": "string"}}).check
    assert check is not None
    assert check({"i": 1}) and check({"i": 1, "o": {}, "x": "y"})
    assert not check({}) and not check({"o": {}})  # required
    assert not check([]) and not check(None) and not check({"i": 1, "o": []})  # type
    assert not check({"i": "1"}) and not check({"i": 1, "x": 2})  # properties, additional
    assert not check({"i": True}) and not check({"i": 1.5})  # not of the exact type
    bare = schema_mod.compile_schema({"type": "object", "properties": {
        "n": {"type": "number", "title": "N"}, "b": {"type": "boolean"},
        "s": {"type": "string", "minLength": 2}}}).check
    assert bare is not None
    assert bare({"n": 1.5, "b": False, "s": "ab"}) and bare({"n": 1})  # an int is a number
    assert not bare({"b": 1}) and not bare({"n": "1"}) and not bare({"s": "a"})
    either = schema_mod.compile_schema({"type": ["object", "null"], "required": ["i"],
                                        "properties": {"i": {"type": "integer"}}}).check
    assert either is not None
    assert either(None) and either({"i": 1}) and not either({}) and not either(1)
    untyped = schema_mod.compile_schema({"required": ["i"]}).check
    assert untyped is not None and untyped(5) and untyped({"i": 0}) and not untyped({})


def test_draft_3_keeps_type_required_and_properties_apart() -> None:
    """Draft 3 has no ``required`` list keyword, so its object nodes are not folded."""
    assert CheckBuilder(jsonschema.Draft7Validator({})).fold_objects
    assert not CheckBuilder(jsonschema.Draft3Validator({})).fold_objects
    schema = {"$schema": "http://json-schema.org/draft-03/schema#", "type": "object",
              "properties": {"a": {"type": "string"}}}
    check = schema_mod.compile_schema(schema).check
    assert check is not None and check({"a": "x"}) and not check({"a": 1}) and not check([])


def test_draft_3_property_required_true_is_enforced_with_pi_words() -> None:
    """Draft 3 marks a property itself ``required: true``: a call without it is invalid (as
    jsonschema says), with pi-ai's "missing" line, not a TypeError."""
    schema = {"$schema": "http://json-schema.org/draft-03/schema#", "type": "object",
              "properties": {"path": {"type": "string", "required": True},
                             "n": {"type": "integer"}}}
    assert schema_mod.compile_schema(schema).check is None  # jsonschema decides
    tool_ = AgentTool(name="files", description="d", parameters=schema,
                      execute=lambda *args: None)
    assert validate_tool_arguments(tool_, {"path": "a"}) == {"path": "a"}
    for args, lines in (({"n": 1}, ["path: missing"]),
                        ({"n": "x"}, ["path: missing", "n: expected integer, got string"])):
        with pytest.raises(ToolArgumentError) as caught:
            validate_tool_arguments(tool_, args)
        listed = [line.strip()[2:] for line in str(caught.value).splitlines()
                  if line.strip().startswith("- ")]
        assert listed == lines


def test_coercion_copies_and_coerces_leaves_of_every_kind() -> None:
    schema = {"type": "object", "properties": {
        "n": {"type": "integer"}, "o": {"type": "object"}, "u": {"description": "any"},
        "m": {"type": ["integer", "null"]}, "s": {"type": "string"}}}
    coerce = schema_mod.compile_schema(schema).coerce
    nested = {"x": [1, (2,)]}
    args = {"n": nested, "o": nested, "u": nested, "m": None, "s": 5, "z": (1,)}
    out = coerce(args)
    assert out == {"n": {"x": [1, [2]]}, "o": {"x": [1, [2]]}, "u": {"x": [1, [2]]},
                   "m": None, "s": "5", "z": [1]}
    for key in ("n", "o", "u"):  # deep copies, never the caller's containers
        assert out[key] is not nested and out[key]["x"] is not nested["x"]
    assert coerce({"n": "5", "m": "6", "o": "7", "u": (1,)}) == {"n": 5, "m": 6, "o": "7",
                                                                  "u": [1]}
    assert coerce({"m": False, "n": True}) == {"m": 0, "n": 1}
    assert type(coerce({"n": True})["n"]) is int and coerce({"s": "x"}) == {"s": "x"}
    assert coerce(("a",)) == ["a"]  # not an object: copied as it is
    assert schema_mod.compile_schema({"type": "integer"}).coerce("5") == 5
    # pi-schema's matchesType: an unknown type matches nothing, so the known one coerces
    assert Converter({"type": ["integer", "x-any"]}, lambda node, v: False).coerce("5") == 5


def test_invalid_schema_logs_a_warning_and_skips_validation(
    caplog: pytest.LogCaptureFixture,
) -> None:
    t = _schema_tool({"type": "object", "properties": {"n": {"type": "no-such-type"}}})
    args = {"n": "anything"}
    with caplog.at_level(logging.WARNING, logger="piagent.tools._schema"):
        assert validate_tool_arguments(t, args) is args
    assert "invalid JSON Schema" in caplog.text


def test_a_dangling_ref_rejects_only_its_own_value() -> None:
    """pi-ai 1.6.1: a ``$ref`` that names nothing (a dangling definition in an MCP server's
    schema) rejects the values at its place; every other call of the tool runs."""
    t = _schema_tool({"type": "object", "properties": {
        "n": {"$ref": "#/definitions/missing"}, "m": {"type": "integer"}}})
    assert validate_tool_arguments(t, {"m": "2"}) == {"m": 2}
    assert validate_tool_arguments(t, {}) == {}
    with pytest.raises(ToolArgumentError) as caught:
        validate_tool_arguments(t, {"n": 1, "m": 2})
    assert caught.value.errors == ["n: unresolved reference #/definitions/missing"]


def test_a_ref_jsonschema_cannot_resolve_logs_a_warning_and_skips_validation(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Not a local pointer (a URL, another document): left to jsonschema, which cannot
    fetch it; the tool's validation is skipped, with a warning."""
    t = _schema_tool({"type": "object", "properties": {
        "n": {"$ref": "https://schemas.invalid/missing.json"}}})
    with caplog.at_level(logging.WARNING, logger="piagent.tools._schema"):
        assert validate_tool_arguments(t, {"n": 1}) == {"n": 1}
    assert "bad $ref" in caplog.text


# --- fast checker soundness (property-based) -------------------------------------------

_SCHEMAS: list[dict[str, Any]] = [
    {
        "type": "object",
        "properties": {
            "s": {"type": "string", "minLength": 1, "maxLength": 3, "pattern": "^[ab]"},
            "i": {"type": "integer", "minimum": 0, "exclusiveMaximum": 10},
            "n": {"type": ["number", "null"]},
            "e": {"enum": ["x", 1, True, None]},
            "a": {"type": "array", "items": {"type": "boolean"}, "maxItems": 2},
            "o": {"type": "object", "additionalProperties": {"type": "integer"}},
            "u": {"anyOf": [{"type": "string"}, {"type": "integer", "maximum": 3}]},
        },
        "required": ["s"],
        "additionalProperties": False,
    },
    {
        "type": "object",
        "properties": {"c": {"const": 1}},
        "additionalProperties": {"type": "string"},
    },
    {  # stable: a value the fast checker accepts skips coercion
        "type": "object",
        "properties": {
            "s": {"type": "string", "maxLength": 3},
            "i": {"type": "integer"},
            "n": {"type": "number"},
            "a": {"type": "array", "items": {"type": "boolean"}},
            "l": {"type": "array"},
            "o": {"type": "object", "properties": {"x": {"type": "null"}},
                  "additionalProperties": {"type": "integer"}},
            "u": {"description": "anything"},
        },
        "required": ["s"],
    },
]
_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-20, 20)
    | st.floats(-20, 20)
    | st.text("abc1", max_size=4),
    lambda c: (
        st.lists(c, max_size=3) | st.dictionaries(st.sampled_from("sinaeouxc"), c, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=400, deadline=None)
@given(
    schema_index=st.sampled_from([0, 1, 2]),
    instance=st.dictionaries(st.sampled_from("sinaeoucz"), _values, max_size=5),
)
def test_validation_agrees_with_jsonschema(schema_index: int, instance: dict[str, Any]) -> None:
    """Whatever coercion produces, we accept it exactly when jsonschema does."""
    schema = _SCHEMAS[schema_index]
    t = _schema_tool(schema)
    compiled = schema_mod.compile_schema(schema)
    assert compiled.check is not None
    assert compiled.stable is (schema_index == 2)
    coerced = compiled.coerce(instance)  # pi-ai 1.6.1's coercion, never skipped here
    expected_valid = jsonschema.Draft7Validator(schema).is_valid(coerced)
    assert compiled.check(coerced) <= expected_valid  # the fast path never over-accepts
    try:
        out = validate_tool_arguments(t, instance)
    except ToolArgumentError as exc:
        assert not expected_valid
        assert exc.errors
    else:
        assert expected_valid
        assert _typed(out) == _typed(coerced)


def _typed(value: Any) -> Any:
    """``value`` with each leaf paired with its type (``5`` and ``5.0`` differ)."""
    if isinstance(value, dict):
        return {k: _typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_typed(v) for v in value]
    return (type(value).__name__, value)
