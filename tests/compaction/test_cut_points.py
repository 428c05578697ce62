"""pi-coding-agent's compaction rules, case by case: the token estimate, the threshold, the
cut point (never between a tool call and its result; split turns), the projection of a
compacted transcript, and the ``compactionSummary`` message as pi writes and frames it.

Several cases follow pi-mono's ``packages/coding-agent/test/compaction.test.ts`` (its
``calculateContextTokens``, ``getLastAssistantUsage``, ``shouldCompact``, ``findCutPoint``
and ``buildSessionContext`` cases), written here for piagent's transcript.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from piagent import (
    AssistantMessage,
    CompactionSummaryMessage,
    ImageContent,
    SystemMessage,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
    default_convert_to_llm,
    message_from_dict,
    message_to_dict,
    messages_from_json,
)
from piagent.compaction import (
    Compaction,
    context_tokens,
    estimate_tokens,
    prepare,
    project,
    serialize_conversation,
    should_compact,
    usage_tokens,
)
from piagent.messages import COMPACTION_SUMMARY_PREFIX, COMPACTION_SUMMARY_SUFFIX


def usage(input: int, output: int, cache_read: int = 0, cache_write: int = 0) -> Usage:
    return Usage(input=input, output=output, cache_read=cache_read, cache_write=cache_write,
                 total_tokens=input + output + cache_read + cache_write)


def u(text: str) -> UserMessage:
    return UserMessage(text)


def a(text: str, used: Usage | None = None, stop: Any = "stop") -> AssistantMessage:
    return AssistantMessage(content=[TextContent(text)], usage=used or usage(100, 50),
                            stop_reason=stop)


def call(call_id: str, text: str = "") -> AssistantMessage:
    content: list[Any] = [TextContent(text)] if text else []
    content.append(ToolCall(call_id, "read", {"path": f"src/{call_id}.py"}))
    return AssistantMessage(content=content, stop_reason="toolUse")


def result(call_id: str, text: str) -> ToolResultMessage:
    return ToolResultMessage(call_id, "read", [TextContent(text)])


# --- tokens --------------------------------------------------------------------------------


def test_usage_tokens_is_pi_calculate_context_tokens() -> None:
    assert usage_tokens(usage(1000, 500, 200, 100)) == 1800
    assert usage_tokens(usage(0, 0)) == 0
    assert usage_tokens(Usage(input=10, output=5, cache_read=1, cache_write=1)) == 17


def test_estimate_tokens_is_chars_over_four() -> None:
    assert estimate_tokens(u("abcde")) == 2  # ceil(5 / 4)
    assert estimate_tokens(u("")) == 0
    assert estimate_tokens(UserMessage([TextContent("abcd"), ImageContent("x", "image/png")])) \
        == 1 + 1200  # an image counts as 4,800 chars
    thinking = AssistantMessage(content=[ThinkingContent("t" * 8), TextContent("x" * 4)])
    assert estimate_tokens(thinking) == 3
    tool_call = AssistantMessage(content=[ToolCall("c", "read", {"path": "a"})])
    assert estimate_tokens(tool_call) == -(-(4 + len('{"path":"a"}')) // 4)
    assert estimate_tokens(result("c", "y" * 9)) == 3
    assert estimate_tokens(CompactionSummaryMessage("s" * 40)) == 10
    system = SystemMessage("p" * 8, sections={"a": "b" * 4})
    assert estimate_tokens(system) == 3


def test_context_tokens_take_the_last_usage_plus_what_follows() -> None:
    messages = [u("Hello"), a("Hi", usage(100, 50)), u("How are you?"),
                a("Good", usage(200, 100)), u("x" * 40)]
    assert context_tokens(messages) == 300 + 10
    # an aborted or failed response has no usable usage (pi's getLastAssistantUsage)
    aborted = a("Aborted", usage(300, 150), stop="aborted")
    assert context_tokens([u("Hello"), a("Hi", usage(100, 50)), u("?"), aborted]) == 150 + 1 + 2
    # no usage at all: every message estimated
    assert context_tokens([u("abcd"), u("abcdefgh")]) == 3


def test_should_compact_is_pi_threshold() -> None:
    assert should_compact(95_000, 100_000, 10_000)
    assert not should_compact(89_000, 100_000, 10_000)
    assert not should_compact(90_000, 100_000, 10_000)  # strictly more than the room left


def test_compaction_settings_defaults_and_checks() -> None:
    settings = Compaction()
    assert (settings.reserve_tokens, settings.keep_recent_tokens) == (16_384, 20_000)
    with pytest.raises(ValueError, match="reserve_tokens"):
        Compaction(reserve_tokens=-1)
    with pytest.raises(ValueError, match="keep_recent_tokens"):
        Compaction(keep_recent_tokens="many")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="instructions"):
        Compaction(instructions=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="model"):
        Compaction(model="gpt")  # type: ignore[arg-type]


# --- cut points ------------------------------------------------------------------------------


def test_cut_lands_on_a_user_or_assistant_message() -> None:
    log: list[Any] = []
    for i in range(10):
        log += [u(f"User {i} " + "x" * 400), a(f"Assistant {i} " + "y" * 400)]
    prep = prepare(log, 250)
    assert prep is not None
    kept = log[prep.first_kept]
    assert isinstance(kept, (UserMessage, AssistantMessage))
    assert prep.to_summarize == log[:prep.first_kept] or prep.is_split_turn


def test_everything_fits_nothing_to_compact() -> None:
    log = [u("1"), a("a"), u("2"), a("b")]
    assert prepare(log, 50_000) is None
    assert prepare([a("a")], 1000) is None  # no cut point but the first message


def test_a_cut_inside_a_turn_splits_it() -> None:
    log = [u("Turn 1"), a("A1"), u("Turn 2"), a("A2-1 " + "x" * 4000), a("A2-2 " + "x" * 4000),
           a("A2-3 " + "x" * 4000)]
    prep = prepare(log, 1500)
    assert prep is not None
    assert isinstance(log[prep.first_kept], AssistantMessage)
    assert prep.is_split_turn
    assert prep.to_summarize == log[:2]  # the history before the turn
    assert prep.turn_prefix == log[2:prep.first_kept]  # the turn's start, summarised apart


def test_a_tool_call_is_never_parted_from_its_result() -> None:
    log: list[Any] = [u("do it")]
    for i in range(12):
        log += [call(f"c{i}"), result(f"c{i}", "r" * 2000)]
    for keep in range(100, 8000, 150):
        prep = prepare(log, keep)
        if prep is None:
            continue
        kept = log[prep.first_kept:]
        assert not isinstance(kept[0], ToolResultMessage)
        asked = {b.id for m in kept if isinstance(m, AssistantMessage) for b in m.tool_calls}
        answered = {m.tool_call_id for m in kept if isinstance(m, ToolResultMessage)}
        assert answered <= asked  # every kept result's call is kept
        summarised = prep.to_summarize + prep.turn_prefix
        asked_before = {b.id for m in summarised if isinstance(m, AssistantMessage)
                        for b in m.tool_calls}
        assert not asked_before & answered


def test_trailing_results_over_the_budget_keep_their_call() -> None:
    log = [u("go"), call("c1"), result("c1", "r" * 40_000)]
    prep = prepare(log, 1000)
    assert prep is not None
    assert log[prep.first_kept] is log[1]  # the call, not the result


def test_an_earlier_summary_is_updated_not_nested() -> None:
    log: list[Any] = [u("1 " + "x" * 4000), a("a " + "x" * 4000)]
    log.append(CompactionSummaryMessage("## Goal\nfirst", 2000, first_kept=1))
    log += [u("2 " + "x" * 4000), a("b " + "x" * 4000), u("3 " + "x" * 4000), a("c")]
    prep = prepare(log, 1100)
    assert prep is not None
    assert prep.previous_summary == "## Goal\nfirst"
    assert not any(isinstance(m, CompactionSummaryMessage) for m in prep.to_summarize)
    assert prep.to_summarize == [log[1]]  # the previous kept part comes first
    assert prep.first_kept == 4 and prep.is_split_turn and prep.turn_prefix == [log[3]]


def test_file_operations_of_the_summarised_part_and_the_earlier_summary() -> None:
    previous = CompactionSummaryMessage("s", details={"readFiles": ["old.py"],
                                                       "modifiedFiles": ["gone.py"]})
    log: list[Any] = [u("x"), previous, u("edit " + "x" * 4000),
                      AssistantMessage(content=[ToolCall("e", "edit", {"path": "b.py"}),
                                                ToolCall("r", "read", {"path": "b.py"}),
                                                ToolCall("w", "read", {"path": "c.py"})]),
                      result("e", "ok"), result("r", "ok"), result("w", "ok"),
                      u("next " + "y" * 4000), a("done")]
    prep = prepare(log, 1000)
    assert prep is not None
    assert prep.read_files == {"old.py", "b.py", "c.py"}
    assert prep.modified_files == {"gone.py", "b.py"}


# --- what requests see ----------------------------------------------------------------------


def test_projection_of_one_compaction() -> None:
    u1, a1, u2, a2 = u("1"), a("a"), u("2"), a("b")
    summary = CompactionSummaryMessage("Summary of 1,a,2,b", first_kept=2)
    u3, a3 = u("3"), a("c")
    view = project([u1, a1, u2, a2, summary, u3, a3])
    assert view.messages == [summary, u2, a2, u3, a3]
    assert view.indices == [4, 2, 3, 5, 6]


def test_projection_takes_only_the_latest_summary() -> None:
    u1, a1 = u("1"), a("a")
    first = CompactionSummaryMessage("First summary", first_kept=0)
    u2, b, u3, c = u("2"), a("b"), u("3"), a("c")
    second = CompactionSummaryMessage("Second summary", first_kept=5)
    u4, d = u("4"), a("d")
    view = project([u1, a1, first, u2, b, u3, c, second, u4, d])
    assert view.messages == [second, u3, c, u4, d]
    # a kept range that holds the older summary leaves it out
    third = CompactionSummaryMessage("Third", first_kept=1)
    assert project([u1, a1, first, u2, b, third]).messages == [third, a1, u2, b]


def test_projection_keeps_everything_when_the_first_message_is_kept() -> None:
    u1, a1, u2, b = u("1"), a("a"), u("2"), a("b")
    summary = CompactionSummaryMessage("First summary", first_kept=0)
    assert project([u1, a1, summary, u2, b]).messages == [summary, u1, a1, u2, b]


def test_projection_folds_the_summarised_system_messages() -> None:
    system = SystemMessage("You are helpful.")
    later = SystemMessage(sections={"rules": "be brief"})
    summary = CompactionSummaryMessage("s", first_kept=3)
    view = project([system, u("1"), later, u("2"), summary])
    head = view.messages[0]
    assert isinstance(head, SystemMessage) and head.text == "You are helpful."
    assert head.sections == {"rules": "be brief"}
    assert view.messages[1:] == [summary, view.messages[2]] and view.indices[0] == -1


# --- the message ------------------------------------------------------------------------------


def test_pi_written_compaction_summary_loads_and_dumps_the_same() -> None:
    written = {"role": "compactionSummary", "summary": "## Goal\nShip it", "tokensBefore": 48213,
               "timestamp": 1760000000000}
    message = message_from_dict(written)
    assert isinstance(message, CompactionSummaryMessage)
    assert (message.summary, message.tokens_before) == ("## Goal\nShip it", 48213)
    assert message_to_dict(message) == written
    ours = CompactionSummaryMessage("s", 5, 1, first_kept=3, details={"readFiles": []})
    assert message_from_dict(json.loads(json.dumps(message_to_dict(ours)))) == ours
    # a transcript pi wrote, the summary among its messages
    loaded = messages_from_json(json.dumps([written, {"role": "user", "content": "hi",
                                                      "timestamp": 1}]))
    assert isinstance(loaded[0], CompactionSummaryMessage)


def test_the_model_reads_the_summary_as_pi_frames_it() -> None:
    summary = CompactionSummaryMessage("## Goal\nShip it", timestamp=7)
    converted = default_convert_to_llm([u("before"), summary])
    framed = converted[1]
    assert isinstance(framed, UserMessage) and framed.timestamp == 7
    assert framed.text == ("The conversation history before this point was compacted into "
                           "the following summary:\n\n<summary>\n## Goal\nShip it\n</summary>")
    assert framed.text == COMPACTION_SUMMARY_PREFIX + "## Goal\nShip it" + COMPACTION_SUMMARY_SUFFIX


def test_serialized_conversation_labels_each_message_and_cuts_long_results() -> None:
    text = serialize_conversation([
        u("hello"), AssistantMessage(content=[ThinkingContent("secret"), TextContent("hi"),
                                              ToolCall("c", "read", {"path": "a.py"})]),
        result("c", "z" * 2500)])
    assert "[User]: hello" in text and "[Assistant]: hi" in text
    assert '[Assistant tool calls]: read(path="a.py")' in text
    assert "secret" not in text  # thinking left out, as pi does
    assert "[... 500 more characters truncated]" in text


def test_running_estimate_follows_a_growing_list_as_context_tokens() -> None:
    from piagent.compaction import RunningEstimate

    messages: list[Any] = [u("a" * 40)]
    estimate = RunningEstimate(messages, 0)
    steps = [a("b" * 8, usage(0, 0)), u("c" * 12), a("d", usage(500, 20)), result("x", "e" * 16),
             u("f" * 4), a("g", usage(0, 0), stop="error")]
    assert estimate.tokens() == context_tokens(messages)
    for message in steps:
        messages.append(message)
        assert estimate.tokens() == context_tokens(messages)
    later = RunningEstimate(messages, 4)  # usage before index 4 does not count
    assert later.tokens() == context_tokens(messages, 4) == sum(map(estimate_tokens, messages))
    assert estimate.tracks(messages) and not estimate.tracks(list(messages))
