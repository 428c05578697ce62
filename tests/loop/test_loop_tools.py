"""Tool execution inside the loop: preparation, hooks, results, ordering and concurrency."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any

import pytest

from piagent import (
    AbortController,
    AbortSignal,
    AfterToolCallContext,
    AfterToolCallResult,
    AgentEvent,
    AgentLoopConfig,
    AgentTool,
    AgentToolResult,
    BeforeToolCallContext,
    BeforeToolCallResult,
    TextContent,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
    run_agent_loop,
    run_tool_call,
    tool,
)
from piagent.events import event_to_dict
from piagent.loop._call import Finalized, tool_result_message
from piagent.loop._tools import Done as _Done, Update as _Update
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls
from tests.conftest import Recorder
from tests.tools.conftest import NO_PARAMS, Execute, make_tool, ok

from .conftest import context_for

pytestmark = pytest.mark.usefixtures("no_thread_leak")



# --- helpers ---------------------------------------------------------------------------


def run(calls: list[Any], *tools: AgentTool, rec: Recorder | None = None,
        signal: AbortSignal | None = None, responses: list[Any] | None = None,
        **config: Any) -> tuple[ScriptedStreamFn, Recorder, list[Any]]:
    """One prompt whose answer makes ``calls``; then a text answer (unless scripted)."""
    fn = ScriptedStreamFn(responses if responses is not None
                          else [assistant_tool_calls(*calls), assistant_text("done")])
    rec = rec if rec is not None else Recorder()
    new = run_agent_loop([UserMessage("go")], context_for(*tools),
                         AgentLoopConfig(model=fn.model, convert_to_llm=list, **config), rec,
                         signal=signal, stream_fn=fn)
    return fn, rec, new


def text_of(result: Any) -> str:
    return "".join(block.text for block in result.content)


def sequential_rows(*ids: str) -> list[tuple[str, str]]:
    out = []
    for i in ids:
        out += [("tool_execution_start", i), ("tool_execution_end", i), ("message_start", i),
                ("message_end", i)]
    return out


# --- preparation -------------------------------------------------------------------------


def test_an_unknown_tool_becomes_an_error_result_the_model_reads() -> None:
    fn, rec, new = run([("nope", {"path": "a"})], make_tool())
    end = rec.ends()["call_1"]
    assert end.is_error is True and text_of(end.result) == "Tool nope not found"
    assert end.duration_ms is None  # it never ran
    result = rec.results()[0]
    assert result.is_error and text_of(result) == "Tool nope not found"
    assert result.tool_name == "nope" and result.details == {}
    assert fn.calls[1].context.messages[-1] is result


def test_prepare_arguments_rewrites_the_raw_arguments_before_validation() -> None:
    seen: list[Any] = []

    def execute(tool_call_id: str, params: Any, signal: AbortSignal,
                on_update: Callable[[Any], None]) -> AgentToolResult:
        seen.append(params)
        return ok()

    legacy = make_tool(execute=execute, prepare_arguments=lambda raw: {"path": raw["file"]})
    _, rec, _ = run([("read", {"file": "old.txt"})], legacy)
    assert seen == [{"path": "old.txt"}]
    assert rec.of("tool_execution_start")[0].args == {"file": "old.txt"}  # raw arguments
    assert rec.ends()["call_1"].is_error is False


def test_arguments_the_model_garbled_are_reported_not_validated() -> None:
    """A call whose arguments text was no JSON object (``arguments_error``, as pi-ai's
    parseToolCallArguments sets it) is answered with pi-ai's "Invalid arguments" text; the
    tool does not run, even though its ``{}`` arguments would pass the schema."""
    answer = assistant_tool_calls(("read", {}, "c1"))
    answer.content[0].arguments_error = "Unexpected end of JSON input\n\nReceived arguments:\n{"
    ran: list[Any] = []
    relaxed = make_tool(execute=lambda *a: ran.append(a), parameters=NO_PARAMS)
    _, rec, _ = run([], relaxed, responses=[answer, assistant_text("done")])
    failure = rec.ends()["c1"]
    assert ran == [] and failure.is_error
    assert text_of(failure.result) == (
        'Invalid arguments for tool "read": Unexpected end of JSON input\n\n'
        "Received arguments:\n{")


def test_arguments_are_coerced_to_the_schema() -> None:
    seen: list[Any] = []

    @tool
    def add(a: int, b: int) -> str:
        """Add two numbers."""
        seen.append((a, b))
        return str(a + b)

    _, rec, _ = run([("add", {"a": "5", "b": 2})], add)
    assert seen == [(5, 2)]
    assert text_of(rec.results()[0]) == "7"


def test_a_validation_error_reaches_the_model() -> None:
    ran: list[Any] = []
    fn, rec, _ = run([("read", {"path": 1, "extra": True}, "c1"), ("read", {}, "c2")],
                     make_tool(execute=lambda *a: ran.append(a)))
    assert [args[1] for args in ran] == [{"path": "1", "extra": True}]  # c1: 1 -> "1"
    failure = rec.ends()["c2"]
    assert failure.is_error
    text = text_of(failure.result)
    assert text.startswith('Validation failed for tool "read":')
    assert "path" in text
    sent = fn.calls[1].context.messages[-1]
    assert isinstance(sent, ToolResultMessage) and sent.is_error and text_of(sent) == text


# --- before_tool_call --------------------------------------------------------------------


@pytest.mark.parametrize(("reason", "text"), [("not allowed", "not allowed"),
                                              (None, "Tool execution was blocked")])
def test_before_tool_call_blocks_with_its_reason(reason: str | None, text: str) -> None:
    ran: list[Any] = []
    fn, rec, _ = run([("read", {"path": "a"})], make_tool(execute=lambda *a: ran.append(a)),
                     before_tool_call=lambda ctx, signal: BeforeToolCallResult(
                         block=True, reason=reason))
    assert ran == []
    end = rec.ends()["call_1"]
    assert end.is_error and text_of(end.result) == text and end.result.terminate is False
    assert rec.tool_rows() == sequential_rows("call_1")
    assert fn.call_count == 2  # a blocked call without terminate does not stop the run


def test_before_tool_call_sees_the_call_and_can_change_the_args() -> None:
    seen: list[Any] = []
    contexts: list[BeforeToolCallContext] = []
    transcript: list[list[Any]] = []

    def before(ctx: BeforeToolCallContext, signal: AbortSignal) -> None:
        assert isinstance(signal, AbortSignal)
        contexts.append(ctx)
        transcript.append(list(ctx.context.messages))
        ctx.args["path"] = "/sandbox/" + ctx.args["path"]

    def execute(tool_call_id: str, params: Any, signal: AbortSignal,
                on_update: Callable[[Any], None]) -> AgentToolResult:
        seen.append((tool_call_id, params))
        return ok()

    _, rec, new = run([("read", {"path": "a"})], make_tool(execute=execute),
                      before_tool_call=before)
    assert seen == [("call_1", {"path": "/sandbox/a"})]
    ctx = contexts[0]
    assert ctx.assistant_message is new[1]
    assert ctx.tool_call is new[1].content[0] and ctx.tool_call.arguments == {"path": "a"}
    assert transcript[0][-1] is new[1]  # the assistant message is already in context
    assert rec.of("tool_execution_start")[0].args == {"path": "a"}


def test_before_tool_call_that_aborts_gives_operation_aborted() -> None:
    controller = AbortController()
    ran: list[Any] = []

    def before(ctx: BeforeToolCallContext, signal: AbortSignal) -> None:
        controller.abort()

    fn, rec, _ = run([("read", {"path": "a"})], make_tool(execute=lambda *a: ran.append(a)),
                     signal=controller.signal, before_tool_call=before)
    assert ran == []
    end = rec.ends()["call_1"]
    assert end.is_error and text_of(end.result) == "Operation aborted"
    assert fn.call_count == 1


def test_a_raising_before_tool_call_is_an_error_result() -> None:
    def before(ctx: BeforeToolCallContext, signal: AbortSignal) -> None:
        raise PermissionError("denied by policy")

    fn, rec, _ = run([("read", {"path": "a"})], make_tool(), before_tool_call=before)
    end = rec.ends()["call_1"]
    assert end.is_error and text_of(end.result) == "denied by policy"
    assert fn.call_count == 2


def test_an_error_result_the_loop_makes_carries_the_failure_on_the_call_only() -> None:
    """As pi's createErrorToolResult: the result has content and empty details; the failure
    is the end event's and the message's is_error (and after_tool_call's ``is_error``)."""
    seen: list[tuple[AgentToolResult, bool]] = []

    def after(ctx: AfterToolCallContext, signal: AbortSignal) -> None:
        seen.append((ctx.result, ctx.is_error))

    def execute(*args: Any) -> AgentToolResult:
        raise OSError("disk on fire")

    _, rec, _ = run([("read", {"path": "a"}), ("nope", {})], make_tool(execute=execute),
                    after_tool_call=after)
    for call_id in ("call_1", "call_2"):
        end = rec.ends()[call_id]
        assert end.is_error is True and end.result.is_error is False
        assert "isError" not in event_to_dict(end)["result"]
        assert event_to_dict(end)["isError"] is True
    assert [r.is_error for r in rec.results()] == [True, True]
    assert [(r.is_error, flag) for r, flag in seen] == [(False, True)]
    assert seen[0][0].details["error"]["type"] == "OSError"


# --- execute, updates, threads ------------------------------------------------------------


def test_duration_ms_is_an_int_on_the_end_event_and_the_result_message() -> None:
    _, rec, _ = run([("read", {"path": "a"})], make_tool())
    end = rec.ends()["call_1"]
    assert type(end.duration_ms) is int and end.duration_ms >= 0
    assert type(rec.results()[0].duration_ms) is int


def test_a_raising_execute_is_an_error_result() -> None:
    def execute(*args: Any) -> AgentToolResult:
        raise OSError("disk on fire")

    fn, rec, _ = run([("read", {"path": "a"})], make_tool(execute=execute))
    end = rec.ends()["call_1"]
    assert end.is_error and text_of(end.result) == "OSError: disk on fire"
    assert type(end.duration_ms) is int
    assert rec.results()[0].is_error and fn.call_count == 2


def test_a_result_with_is_error_keeps_its_details() -> None:
    def execute(*args: Any) -> AgentToolResult:
        return AgentToolResult(content=[TextContent("no such file")], details={"code": 2},
                               is_error=True)

    _, rec, _ = run([("read", {"path": "a"})], make_tool(execute=execute))
    assert rec.ends()["call_1"].is_error is True
    result = rec.results()[0]
    assert result.is_error and result.details == {"code": 2}


def test_updates_are_emitted_before_the_end_on_the_loop_thread() -> None:
    def execute(tool_call_id: str, params: Any, signal: AbortSignal,
                on_update: Callable[[Any], None]) -> AgentToolResult:
        on_update(ok("10%"))
        helper = threading.Thread(target=on_update, args=(ok("50%"),))  # from another thread
        helper.start()
        helper.join(5)
        assert not helper.is_alive()
        on_update(ok("90%"))
        return ok("100%")

    _, rec, _ = run([("read", {"path": "a"})], make_tool(execute=execute))
    assert [(kind, i) for kind, i in rec.tool_rows()] == [
        ("tool_execution_start", "call_1"), ("tool_execution_update", "call_1"),
        ("tool_execution_update", "call_1"), ("tool_execution_update", "call_1"),
        ("tool_execution_end", "call_1"), ("message_start", "call_1"), ("message_end", "call_1")]
    updates = rec.of("tool_execution_update")
    assert [text_of(u.partial_result) for u in updates] == ["10%", "50%", "90%"]
    assert all(u.args == {"path": "a"} and u.tool_name == "read" for u in updates)
    assert set(rec.threads) == {threading.current_thread()}


def test_on_update_after_execute_returned_is_ignored() -> None:
    saved: list[Callable[[Any], None]] = []
    late_done = threading.Event()

    def execute(tool_call_id: str, params: Any, signal: AbortSignal,
                on_update: Callable[[Any], None]) -> AgentToolResult:
        saved.append(on_update)
        return ok()

    def listener(event: AgentEvent) -> None:
        if event.type == "tool_execution_end":
            late = threading.Thread(target=lambda: (saved[0](ok("stale")), late_done.set()))
            late.start()
            late.join(5)
            assert not late.is_alive()

    for mode in ("parallel", "sequential"):
        late_done.clear()
        saved.clear()
        _, rec, _ = run([("read", {"path": "a"})], make_tool(execute=execute),
                        rec=Recorder(on_event=listener), tool_execution=mode)
        assert late_done.is_set()
        saved[0](ok("even later"))  # after the run: still nothing, and no error
        assert rec.of("tool_execution_update") == []


def test_a_result_message_carries_every_field_and_copies_the_content() -> None:
    usage = Usage(input=3)
    result = AgentToolResult(content=[TextContent("out")], details={"d": 1},
                             structured_content={"s": 1}, usage=usage, terminate=True)
    done = Finalized(ToolCall("call_9", "read", {"path": "a"}), result, True, 12)
    message = tool_result_message(done, 1234)
    assert message == ToolResultMessage(
        tool_call_id="call_9", tool_name="read", content=[TextContent("out")],
        details={"d": 1}, usage=usage, is_error=True, duration_ms=12, timestamp=1234)
    assert message.content is not result.content
    assert tool_result_message(Finalized(done.tool_call, AgentToolResult(), False)).content == []
    assert tool_result_message(done).timestamp > 1234  # now, by default


def test_the_result_messages_of_a_parallel_batch_share_one_timestamp() -> None:
    _, rec, _ = run([("read", {"path": "a"}), ("read", {"path": "b"}), ("read", {"path": "c"})],
                    make_tool())
    results = rec.results()
    assert len(results) == 3 and len({r.timestamp for r in results}) == 1


def test_an_update_queued_after_its_calls_completion_is_dropped() -> None:
    """``on_update`` takes no lock, so an update racing ``execute()``'s return can be queued
    after the completion; the worker drops it, and still emits one queued before."""
    submitted: list[int] = []

    class Recording(Executor):  # runs nothing: it posts what the pool threads would
        def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
            _task, prepared, index, inbox = args  # (task, prepared, index, inbox) in a context
            submitted.append(index)
            inbox.put(_Update(index, ok("early")))
            inbox.put(_Done(index, Finalized(prepared.tool_call, ok(), False, 0)))
            inbox.put(_Update(index, ok("late")))
            return Future()

    _, rec, _ = run([("read", {"path": "a"}), ("read", {"path": "b"})], make_tool(),
                    tool_executor=Recording())
    assert submitted == [0, 1]
    assert [(e.type, e.tool_call_id) for e in rec.events if e.type.startswith("tool_exec")] == [
        ("tool_execution_start", "call_1"), ("tool_execution_start", "call_2"),
        ("tool_execution_update", "call_1"), ("tool_execution_end", "call_1"),
        ("tool_execution_update", "call_2"), ("tool_execution_end", "call_2")]
    assert [text_of(e.partial_result) for e in rec.of("tool_execution_update")] == ["early"] * 2


def test_two_tools_with_one_name_are_refused_by_the_context() -> None:
    first = make_tool(execute=lambda *args: ok("first"), execution_mode="sequential")
    second = make_tool(execute=lambda *args: ok("second"))
    with pytest.raises(ValueError, match=r"^AgentContext.tools has two tools named 'read' "
                                         r"\(AgentContext.tools\[0\] and AgentContext.tools\[1\]\)"):
        run([("read", {"path": "a"})], first, second)


def test_tools_execute_on_pool_threads_and_events_stay_on_the_loop_thread() -> None:
    tool_threads: list[threading.Thread] = []

    def execute(*args: Any) -> AgentToolResult:
        tool_threads.append(threading.current_thread())
        return ok()

    hook_threads: list[tuple[str, threading.Thread]] = []
    _, rec, _ = run([("read", {"path": "a"}), ("read", {"path": "b"})],
                    make_tool(execute=execute),
                    before_tool_call=lambda c, s: hook_threads.append(
                        ("before", threading.current_thread())),
                    after_tool_call=lambda c, s: hook_threads.append(
                        ("after", threading.current_thread())))
    me = threading.current_thread()
    assert set(rec.threads) == {me}
    assert all(t is not me for t in tool_threads)
    assert [t for kind, t in hook_threads if kind == "before"] == [me, me]
    assert all(t is not me for kind, t in hook_threads if kind == "after")


# --- after_tool_call ----------------------------------------------------------------------


def rich(*args: Any) -> AgentToolResult:
    return AgentToolResult(content=[TextContent("original")], details={"d": 1},
                           structured_content={"s": 1}, usage=Usage(input=3))


@pytest.mark.parametrize(("override", "content", "details", "structured", "usage_in", "error"), [
    (AfterToolCallResult(), "original", {"d": 1}, {"s": 1}, 3, False),
    (AfterToolCallResult(content=[TextContent("new")]), "new", {"d": 1}, None, 3, False),
    (AfterToolCallResult(content=[TextContent("new")], structured_content={"s": 2}),
     "new", {"d": 1}, {"s": 2}, 3, False),
    (AfterToolCallResult(details={"d": 2}), "original", {"d": 2}, {"s": 1}, 3, False),
    (AfterToolCallResult(structured_content={"s": 3}), "original", {"d": 1}, {"s": 3}, 3, False),
    (AfterToolCallResult(usage=Usage(input=9)), "original", {"d": 1}, {"s": 1}, 9, False),
    (AfterToolCallResult(is_error=True), "original", {"d": 1}, {"s": 1}, 3, True),
])
def test_after_tool_call_overrides_field_by_field(override: AfterToolCallResult, content: str,
                                                  details: Any, structured: Any, usage_in: int,
                                                  error: bool) -> None:
    seen: list[AfterToolCallContext] = []

    def after(ctx: AfterToolCallContext, signal: AbortSignal) -> AfterToolCallResult:
        seen.append(ctx)
        return override

    _, rec, new = run([("read", {"path": "a"})], make_tool(execute=rich), after_tool_call=after)
    ctx = seen[0]
    assert text_of(ctx.result) == "original" and ctx.is_error is False
    assert ctx.args == {"path": "a"} and ctx.tool_call.id == "call_1"
    assert ctx.assistant_message is new[1]
    end = rec.ends()["call_1"]
    assert (text_of(end.result), end.result.details, end.result.structured_content,
            end.result.usage.input, end.is_error) == (content, details, structured, usage_in,
                                                      error)
    message = rec.results()[0]
    assert (text_of(message), message.details, message.usage.input, message.is_error) == (
        content, details, usage_in, error)  # type: ignore[union-attr]


def test_after_tool_call_terminate_override_counts_for_the_batch() -> None:
    fn, _, _ = run([("read", {"path": "a"})], make_tool(),
                   after_tool_call=lambda c, s: AfterToolCallResult(terminate=True))
    assert fn.call_count == 1


def test_a_raising_after_tool_call_is_an_error_and_the_batch_continues() -> None:
    def after(ctx: AfterToolCallContext, signal: AbortSignal) -> None:
        if ctx.tool_call.id == "call_1":
            raise ValueError("after hook broke")

    fn, rec, _ = run([("read", {"path": "a"}), ("read", {"path": "b"})], make_tool(),
                     after_tool_call=after)
    ends = rec.ends()
    assert ends["call_1"].is_error and text_of(ends["call_1"].result) == "after hook broke"
    assert not ends["call_2"].is_error
    assert [r.is_error for r in rec.results()] == [True, False]
    assert fn.call_count == 2


# --- ordering and concurrency -------------------------------------------------------------


def gated_tool(release_order: list[str]) -> tuple[AgentTool, Callable[[AgentEvent], None]]:
    """A tool whose call ``release_order[i+1]`` runs only after call ``release_order[i]`` ended."""
    ended = {call_id: threading.Event() for call_id in release_order}

    def execute(tool_call_id: str, params: Any, signal: AbortSignal,
                on_update: Callable[[Any], None]) -> AgentToolResult:
        index = release_order.index(tool_call_id)
        if index:
            assert ended[release_order[index - 1]].wait(5)
        return ok(tool_call_id)

    def listener(event: AgentEvent) -> None:
        if event.type == "tool_execution_end" and event.tool_call_id in ended:
            ended[event.tool_call_id].set()

    return make_tool(execute=execute), listener


def test_parallel_ends_follow_completion_and_results_follow_source_order() -> None:
    read, listener = gated_tool(["call_3", "call_1", "call_2"])
    calls = [("read", {"path": p}) for p in "abc"]
    fn, rec, new = run(calls, read, rec=Recorder(on_event=listener))
    assert rec.tool_rows() == [
        ("tool_execution_start", "call_1"), ("tool_execution_start", "call_2"),
        ("tool_execution_start", "call_3"),
        ("tool_execution_end", "call_3"), ("tool_execution_end", "call_1"),
        ("tool_execution_end", "call_2"),
        ("message_start", "call_1"), ("message_end", "call_1"), ("message_start", "call_2"),
        ("message_end", "call_2"), ("message_start", "call_3"), ("message_end", "call_3")]
    turn_end = rec.of("turn_end")[0]
    assert [r.tool_call_id for r in turn_end.tool_results] == ["call_1", "call_2", "call_3"]
    assert [m.tool_call_id for m in new if isinstance(m, ToolResultMessage)] == [
        "call_1", "call_2", "call_3"]
    assert [text_of(r) for r in rec.results()] == ["call_1", "call_2", "call_3"]


def test_parallel_immediate_failures_end_during_preflight() -> None:
    read, listener = gated_tool(["call_3", "call_1"])
    calls = [("read", {"path": "a"}), ("missing", {}), ("read", {"path": "c"})]
    _, rec, _ = run(calls, read, rec=Recorder(on_event=listener))
    assert rec.tool_rows() == [
        ("tool_execution_start", "call_1"), ("tool_execution_start", "call_2"),
        ("tool_execution_end", "call_2"), ("tool_execution_start", "call_3"),
        ("tool_execution_end", "call_3"), ("tool_execution_end", "call_1"),
        ("message_start", "call_1"), ("message_end", "call_1"), ("message_start", "call_2"),
        ("message_end", "call_2"), ("message_start", "call_3"), ("message_end", "call_3")]


def concurrency_probe(barrier: threading.Barrier | None = None
                      ) -> tuple[Execute, Callable[[], int]]:
    """An execute that counts how many calls run at once.

    With a barrier, calls a and b meet there and then linger briefly, giving any call that
    the cap should hold back the chance to start beside them.
    """
    lock = threading.Lock()
    state = {"active": 0, "peak": 0}
    crowded = threading.Event()

    def execute(tool_call_id: str, params: Any, signal: AbortSignal,
                on_update: Callable[[Any], None]) -> AgentToolResult:
        with lock:
            state["active"] += 1
            state["peak"] = max(state["peak"], state["active"])
            if barrier is not None and state["active"] > barrier.parties:
                crowded.set()
        try:
            if barrier is not None and params["path"] in ("a", "b"):
                barrier.wait()
                crowded.wait(0.2)  # a bounded wait for a call that must not start
            return ok(tool_call_id)
        finally:
            with lock:
                state["active"] -= 1

    return execute, lambda: state["peak"]


def test_sequential_mode_runs_one_call_at_a_time_in_order() -> None:
    execute, peak = concurrency_probe()
    calls = [("read", {"path": p}) for p in "abc"]
    _, rec, _ = run(calls, make_tool(execute=execute), tool_execution="sequential")
    assert rec.tool_rows() == sequential_rows("call_1", "call_2", "call_3")
    assert peak() == 1


def test_one_sequential_tool_makes_the_whole_batch_sequential() -> None:
    execute, peak = concurrency_probe()
    calls = [("read", {"path": "a"}), ("write", {"path": "b"}), ("read", {"path": "c"})]
    _, rec, _ = run(calls, make_tool(execute=execute),
                    make_tool("write", execute=execute, execution_mode="sequential"))
    assert rec.tool_rows() == sequential_rows("call_1", "call_2", "call_3")
    assert peak() == 1


def test_parallel_calls_run_concurrently() -> None:
    barrier = threading.Barrier(3, timeout=5)

    def execute(tool_call_id: str, params: Any, signal: AbortSignal,
                on_update: Callable[[Any], None]) -> AgentToolResult:
        barrier.wait()  # breaks (an error result) unless all three run at once
        return ok()

    _, rec, _ = run([("read", {"path": p}) for p in "abc"], make_tool(execute=execute))
    assert [e.is_error for e in rec.of("tool_execution_end")] == [False, False, False]


def test_max_parallel_tools_caps_concurrency_and_keeps_the_orders() -> None:
    execute, peak = concurrency_probe(threading.Barrier(2, timeout=5))
    calls = [("read", {"path": p}) for p in "abcde"]
    _, rec, _ = run(calls, make_tool(execute=execute), max_parallel_tools=2)
    ends = rec.of("tool_execution_end")
    assert [e.is_error for e in ends] == [False] * 5  # calls a and b did run together
    assert peak() == 2
    ids = [f"call_{i}" for i in range(1, 6)]
    assert [e.tool_call_id for e in rec.of("tool_execution_start")] == ids
    assert sorted(e.tool_call_id for e in ends) == ids
    assert [r.tool_call_id for r in rec.results()] == ids
    kinds = [kind for kind, _ in rec.tool_rows()]
    assert kinds == ["tool_execution_start"] * 5 + ["tool_execution_end"] * 5 + [
        "message_start", "message_end"] * 5


# --- terminate ------------------------------------------------------------------------------


def terminating(*args: Any) -> AgentToolResult:
    return AgentToolResult(content=[TextContent("finished")], terminate=True)


def test_a_batch_stops_only_when_every_result_asks_to_terminate() -> None:
    done = make_tool("done", execute=terminating)
    fn, _, _ = run([("done", {"path": "a"}), ("done", {"path": "b"})], done)
    assert fn.call_count == 1
    fn, _, _ = run([("done", {"path": "a"}), ("read", {"path": "b"})], done, make_tool())
    assert fn.call_count == 2


@pytest.mark.parametrize(("other", "requests"), [("done", 1), ("read", 2)])
def test_a_blocked_call_with_terminate_takes_part_in_the_rule(other: str, requests: int) -> None:
    def before(ctx: BeforeToolCallContext, signal: AbortSignal) -> BeforeToolCallResult | None:
        if ctx.tool_call.id == "call_1":
            return BeforeToolCallResult(block=True, reason="stop here", terminate=True)
        return None

    fn, rec, _ = run([("read", {"path": "a"}), (other, {"path": "b"})], make_tool(),
                     make_tool("done", execute=terminating), before_tool_call=before)
    assert rec.ends()["call_1"].result.terminate is True
    assert fn.call_count == requests


def test_terminate_without_block_is_ignored() -> None:
    fn, _, _ = run([("read", {"path": "a"})], make_tool(),
                   before_tool_call=lambda c, s: BeforeToolCallResult(terminate=True))
    assert fn.call_count == 2


def test_queued_steering_still_makes_another_request_after_terminate() -> None:
    steering: list[Any] = []

    def done(*args: Any) -> AgentToolResult:
        steering.append(UserMessage("one more thing"))
        return terminating()

    fn = ScriptedStreamFn([assistant_tool_calls(("done", {"path": "a"})), assistant_text("ok")])
    run_agent_loop([UserMessage("go")], context_for(make_tool("done", execute=done)),
                   AgentLoopConfig(model=fn.model, convert_to_llm=list,
                                   get_steering_messages=lambda: [steering.pop()] if steering
                                   else []), Recorder(), stream_fn=fn)
    assert fn.call_count == 2
    assert fn.calls[1].context.messages[-1].content == "one more thing"  # type: ignore[union-attr]


# --- a truncated ("length") response -------------------------------------------------------


def test_length_stop_fails_every_call_without_running_anything() -> None:
    ran: list[str] = []
    hooks: list[str] = []
    tools = [make_tool(name, execute=lambda *a: ran.append("x") or ok())
             for name in ("read", "write")]
    truncated = assistant_tool_calls(("read", {"path": "a"}), ("write", {"path": "b"}),
                                     stop_reason="length")
    fn, rec, _ = run([], *tools, responses=[truncated, assistant_text("re-issued")],
                     before_tool_call=lambda c, s: hooks.append("before"),
                     after_tool_call=lambda c, s: hooks.append("after"))
    assert ran == [] and hooks == []
    assert rec.tool_rows() == sequential_rows("call_1", "call_2")
    for call_id, name in (("call_1", "read"), ("call_2", "write")):
        end = rec.ends()[call_id]
        assert end.is_error
        assert text_of(end.result) == (
            f'Tool call "{name}" was not executed: the response hit the output token limit, '
            "so its arguments may be truncated. Re-issue the tool call with complete arguments.")
    assert fn.call_count == 2
    assert [m.role for m in fn.calls[1].context.messages][-3:] == [
        "assistant", "toolResult", "toolResult"]


# --- run_tool_call --------------------------------------------------------------------------


def nested_args(**overrides: Any) -> dict[str, Any]:
    assistant = assistant_tool_calls(("read", {"path": "a"}))
    values: dict[str, Any] = {"tools": [make_tool()], "assistant_message": assistant,
                              "context": context_for(make_tool())}
    values.update(overrides)
    return values


def test_run_tool_call_goes_through_the_same_hooks() -> None:
    seen: list[str] = []

    def before(ctx: BeforeToolCallContext, signal: AbortSignal) -> None:
        seen.append("before")
        ctx.args["path"] = "changed"

    def after(ctx: AfterToolCallContext, signal: AbortSignal) -> AfterToolCallResult:
        seen.append(f"after:{text_of(ctx.result)}")
        return AfterToolCallResult(details={"checked": True})

    config = AgentLoopConfig(model=None, convert_to_llm=list, before_tool_call=before,
                             after_tool_call=after)
    call = ToolCall("n1", "read", {"path": "a"})
    outcome = run_tool_call(call, **nested_args(config=config))
    assert outcome.tool_call is call and outcome.is_error is False
    assert text_of(outcome.result) == "read {'path': 'changed'}"
    assert outcome.result.details == {"checked": True}
    assert seen == ["before", "after:read {'path': 'changed'}"]

    blocked = AgentLoopConfig(model=None, convert_to_llm=list, before_tool_call=lambda c, s:
                              BeforeToolCallResult(block=True, reason="no nesting"))
    outcome = run_tool_call(call, **nested_args(config=blocked))
    assert outcome.is_error and text_of(outcome.result) == "no nesting"


def test_run_tool_call_never_raises_for_tool_failures() -> None:
    def boom(*args: Any) -> AgentToolResult:
        raise RuntimeError("nested boom")

    cases = [
        (ToolCall("n1", "ghost", {}), nested_args(), "Tool ghost not found"),
        (ToolCall("n2", "read", {}), nested_args(), 'Validation failed for tool "read":'),
        (ToolCall("n3", "read", {"path": "a"}), nested_args(tools=[make_tool(execute=boom)]),
         "RuntimeError: nested boom"),
    ]
    for call, args, text in cases:
        outcome = run_tool_call(call, **args)
        assert outcome.is_error and text_of(outcome.result).startswith(text)


def test_run_tool_call_with_an_aborted_signal_runs_nothing() -> None:
    """pi-agent-core 1.6.0: the signal is checked first, before the lookup, the validation
    and before_tool_call; the outcome is the "Operation aborted" error."""
    seen: list[str] = []
    config = AgentLoopConfig(model=None, convert_to_llm=list,
                             before_tool_call=lambda c, s: seen.append("before"))
    controller = AbortController()
    controller.abort()
    tool = make_tool(execute=lambda *a: seen.append("execute"))
    for call in (ToolCall("n1", "ghost", {}), ToolCall("n2", "read", {}),
                 ToolCall("n3", "read", {"path": "a"})):
        outcome = run_tool_call(call, **nested_args(tools=[tool], config=config),
                                signal=controller.signal)
        assert outcome.tool_call is call and outcome.is_error
        assert text_of(outcome.result) == "Operation aborted"
    assert seen == []


def test_run_tool_call_passes_updates_and_ignores_late_ones() -> None:
    saved: list[Callable[[Any], None]] = []
    updates: list[str] = []

    def execute(tool_call_id: str, params: Any, signal: AbortSignal,
                on_update: Callable[[Any], None]) -> AgentToolResult:
        saved.append(on_update)
        on_update(ok("working"))
        return ok("done")

    outcome = run_tool_call(ToolCall("n1", "read", {"path": "a"}),
                            **nested_args(tools=[make_tool(execute=execute)]),
                            on_update=lambda partial: updates.append(text_of(partial)))
    saved[0](ok("stale"))
    assert text_of(outcome.result) == "done" and updates == ["working"]
