"""Replaying system messages: prompt content, sections, tools (docs/transcripts.md)."""

from __future__ import annotations

from piagent import (
    SystemMessage,
    ToolDeclaration,
    UserMessage,
    collapse_system_messages,
    create_initial_system_message,
    get_current_system_message,
    get_current_system_prompt,
    get_current_tools,
    get_tool_state_changes,
    render_system_message_update,
    to_tool_declaration,
)
from piagent.transcript import has_non_additive_tool_changes, has_tool_redefinitions


def decl(name: str, description: str = "") -> ToolDeclaration:
    return ToolDeclaration(name, description, {"type": "object"})


def test_system_prompt_replay_appends_content_and_patches_sections() -> None:
    messages = [
        SystemMessage("base", sections={"a": "<a>1</a>", "b": "<b>1</b>"}, timestamp=0),
        UserMessage("hi"),
        SystemMessage("also do this"),
        SystemMessage("", sections={"a": "<a>2</a>", "b": None, "c": "<c>1</c>"}),
    ]
    assert get_current_system_prompt(messages) == (
        "base\n\nalso do this\n\n<a>2</a>\n\n<c>1</c>")
    assert get_current_system_prompt([SystemMessage("base", sections={"a": "<a>1</a>",
                                                                      "b": "<b>1</b>"})]) == (
        "base\n\n<a>1</a>\n\n<b>1</b>")
    assert get_current_system_prompt([UserMessage("x")]) == ""


def test_tools_replay_removals_before_additions_and_readd_moves_to_end() -> None:
    messages = [
        SystemMessage(tools_added=[decl("a"), decl("b"), decl("c")], timestamp=0),
        SystemMessage(tools_removed=["a"], tools_added=[decl("a", "new")]),
        SystemMessage(tools_removed=["b"]),
    ]
    assert [(t.name, t.description) for t in get_current_tools(messages)] == [
        ("c", ""), ("a", "new")]
    # any iterable, read once; a subclass of SystemMessage declares too
    class Custom(SystemMessage):
        pass

    assert [t.name for t in get_current_tools(
        m for m in [*messages, UserMessage("u"), Custom(tools_added=[decl("d")])])] == [
        "c", "a", "d"]


def test_current_system_message_and_collapse() -> None:
    messages = [SystemMessage("one", tools_added=[decl("t")], timestamp=5), UserMessage("u"),
                SystemMessage("two", sections={"s": "x"})]
    head = get_current_system_message(messages)
    assert head is not None
    assert (head.content, head.sections, head.timestamp) == ("one\n\ntwo", {"s": "x"}, 5)
    assert head.tools_added == [decl("t")]
    collapsed = collapse_system_messages(messages)
    assert [m.role for m in collapsed] == ["system", "user"]
    assert collapse_system_messages(collapsed) == collapsed
    assert get_current_system_message([UserMessage("u")]) is None


def test_initial_system_message() -> None:
    assert create_initial_system_message("", []) is None
    message = create_initial_system_message("Be brief", [decl("t")])
    assert message is not None
    assert (message.content, message.tools_added, message.timestamp) == ("Be brief", [decl("t")], 0)


def test_tool_state_changes_treat_redefinition_as_remove_plus_add() -> None:
    changes = get_tool_state_changes([decl("a"), decl("b"), decl("c")],
                                     [decl("c"), decl("b", "changed"), decl("d")])
    assert [t.name for t in changes.tools_added] == ["b", "d"]
    assert changes.tools_removed == ["a", "b"]
    assert get_tool_state_changes([decl("a")], [decl("a")]).empty


def test_render_update_and_redefinition_checks() -> None:
    update = SystemMessage(sections={"rules": "Be kind", "old": None})
    assert render_system_message_update(update) == (
        'Updated system prompt section "rules":\n\nBe kind\n\nRemoved system prompt section "old".')
    additive = [SystemMessage(tools_added=[decl("a")]), SystemMessage(tools_added=[decl("b")])]
    assert not has_non_additive_tool_changes(additive) and not has_tool_redefinitions(additive)
    redefined = [*additive, SystemMessage(tools_added=[decl("a", "v2")])]
    assert has_tool_redefinitions(redefined) and has_non_additive_tool_changes(redefined)


def test_to_tool_declaration_copies_parameters() -> None:
    params = {"type": "object", "properties": {"x": {"type": "integer"}}}
    declaration = to_tool_declaration(ToolDeclaration("t", "d", params))
    params["properties"]["x"]["type"] = "string"
    assert declaration.parameters["properties"]["x"]["type"] == "integer"


def test_redeclaring_without_removal_keeps_the_tool_in_place() -> None:
    messages = [SystemMessage(tools_added=[decl("a"), decl("b")], timestamp=0),
                SystemMessage(tools_added=[decl("a", "v2")])]
    assert [(t.name, t.description) for t in get_current_tools(messages)] == [
        ("a", "v2"), ("b", "")]
