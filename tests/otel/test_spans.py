"""The span tree of a run: names, parents, attributes and status, with parallel tools, a
steer, a tool error and an abort (an in-memory exporter on the test's own provider)."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from opentelemetry import trace

from piagent import Agent, Model, Usage, UserMessage, otel, tool
from piagent.messages import Cost
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls

from ..conftest import WAIT
from .conftest import Spans

MODEL = Model(id="gpt-test", api="openai-completions", provider="openai",
              base_url="https://api.example.com/v1")


def _turn_one() -> Any:
    message = assistant_tool_calls(("lookup", {"q": "a"}), ("lookup", {"q": "b"}),
                                   ("fail", {}))
    message.usage = Usage(input=10, output=5, cache_read=2, cache_write=1, total_tokens=18,
                          cost=Cost(total=0.25))
    message.response_id = "resp-1"
    return message


def _agent(spans: Spans, **options: Any) -> tuple[Agent, ScriptedStreamFn]:
    barrier = threading.Barrier(3, timeout=WAIT)  # breaks unless the three calls overlap
    holder: list[Agent] = []

    @tool
    def lookup(q: str) -> str:
        """Look something up.

        Args:
            q: what to look up.
        """
        barrier.wait()
        with spans.tracer.start_as_current_span(f"db.query {q}"):
            return f"found {q}"

    @tool
    def fail() -> str:
        """Fail."""
        holder[0].steer("also check c")
        barrier.wait()
        raise RuntimeError("the disk is full")

    def aborting(context: Any, opts: Any) -> Any:
        holder[0].abort("user pressed stop")
        return assistant_text("never seen")

    stream = ScriptedStreamFn([_turn_one(), aborting])
    agent = Agent(model=MODEL, tools=[lookup, fail], stream_fn=stream, session_id="conv-7",
                  **options)
    holder.append(agent)
    return agent, stream


def test_two_turns_parallel_tools_a_steer_a_tool_error_and_an_abort(spans: Spans) -> None:
    agent, _ = _agent(spans)
    with spans.tracer.start_as_current_span("web.request") as request:
        agent.prompt("look up a and b", timeout=WAIT)  # on the run's own worker thread
    assert agent.state.messages[-1].stop_reason == "aborted"

    names = sorted(span.name for span in spans.finished())
    assert names == ["chat gpt-test", "chat gpt-test", "db.query a", "db.query b",
                     "execute_tool fail", "execute_tool lookup", "execute_tool lookup",
                     "invoke_agent support", "web.request"]
    run = spans.one("invoke_agent support")
    trace_id = request.get_span_context().trace_id
    assert {span.context.trace_id for span in spans.finished()} == {trace_id}
    assert run.parent is not None and run.parent.span_id == request.get_span_context().span_id
    assert run.kind == trace.SpanKind.INTERNAL
    run_id = run.context.span_id

    first, second = sorted(spans.named("chat gpt-test"), key=lambda s: s.start_time or 0)
    tools = spans.named("execute_tool lookup") + spans.named("execute_tool fail")
    for child in (first, second, *tools):
        assert child.parent is not None and child.parent.span_id == run_id
    for name, tool_span in (("db.query a", "a"), ("db.query b", "b")):
        query = spans.one(name)
        owner = [t for t in tools if t.context.span_id == query.parent.span_id]  # type: ignore[union-attr]
        assert len(owner) == 1 and owner[0].name == "execute_tool lookup", tool_span
    # the three tool spans overlap (they waited for each other at a barrier)
    assert max(t.start_time or 0 for t in tools) < min(t.end_time or 0 for t in tools)
    assert all((first.end_time or 0) <= (t.start_time or 0) for t in tools)
    assert all((t.end_time or 0) <= (second.start_time or 0) for t in tools)

    assert first.kind == trace.SpanKind.CLIENT
    assert dict(first.attributes or {}) == {
        "gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-test", "server.address": "api.example.com",
        "server.port": 443, "gen_ai.conversation.id": "conv-7",
        "gen_ai.response.time_to_first_chunk": first.attributes["gen_ai.response.time_to_first_chunk"],  # type: ignore[index]
        "gen_ai.usage.input_tokens": 13, "gen_ai.usage.output_tokens": 5,
        "gen_ai.usage.cache_read.input_tokens": 2, "gen_ai.usage.cache_creation.input_tokens": 1,
        "piagent.usage.cost": 0.25, "gen_ai.response.model": "gpt-test",
        "gen_ai.response.id": "resp-1", "gen_ai.response.finish_reasons": ("tool_call",),
        "piagent.stop_reason": "toolUse"}
    assert first.status.status_code == trace.StatusCode.UNSET

    assert second.status.status_code == trace.StatusCode.ERROR
    assert second.status.description == "user pressed stop"
    assert second.attributes["error.type"] == "aborted"  # type: ignore[index]
    assert second.attributes["gen_ai.response.finish_reasons"] == ("aborted",)  # type: ignore[index]

    failed = spans.one("execute_tool fail")
    assert dict(failed.attributes or {}) == {
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "fail",
        "gen_ai.tool.call.id": "call_3", "gen_ai.tool.type": "function",
        "error.type": "tool_error"}
    assert failed.status.status_code == trace.StatusCode.ERROR
    assert sorted(t.attributes["gen_ai.tool.call.id"] for t in tools) == [  # type: ignore[index]
        "call_1", "call_2", "call_3"]
    for ok in spans.named("execute_tool lookup"):
        assert ok.status.status_code == trace.StatusCode.UNSET
        assert "gen_ai.tool.call.arguments" not in (ok.attributes or {})  # content is off

    assert dict(run.attributes or {}) == {
        "gen_ai.operation.name": "invoke_agent", "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-test", "gen_ai.agent.name": "support",
        "gen_ai.conversation.id": "conv-7",
        "gen_ai.usage.input_tokens": 13, "gen_ai.usage.output_tokens": 5,
        "gen_ai.usage.cache_read.input_tokens": 2, "gen_ai.usage.cache_creation.input_tokens": 1,
        "piagent.usage.cost": 0.25, "piagent.stop_reason": "aborted",
        "error.type": "aborted"}
    assert run.status.status_code == trace.StatusCode.ERROR
    assert [(e.name, dict(e.attributes or {})) for e in run.events] == [
        ("piagent.steer", {"piagent.messages": 1})]
    assert not any("gen_ai.input.messages" in (s.attributes or {}) for s in spans.finished())


def test_an_explicit_parent_wins_over_the_current_span(spans: Spans) -> None:
    with spans.tracer.start_as_current_span("job") as job:
        pass
    stream = ScriptedStreamFn([assistant_text("hi")])
    agent = Agent(model=MODEL, stream_fn=stream, telemetry=job)
    with spans.tracer.start_as_current_span("unrelated"):
        agent.prompt("hello", timeout=WAIT)
    run = spans.one("invoke_agent support")
    assert run.parent is not None and run.parent.span_id == job.get_span_context().span_id
    assert run.status.status_code == trace.StatusCode.UNSET
    with pytest.raises(TypeError, match="StreamOptions.telemetry must be an OpenTelemetry "
                                        "Span or Context, or None, got str."):
        Agent(model=MODEL, telemetry="parent")


def test_content_is_captured_only_when_the_variable_says_so(
        spans: Spans, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "SPAN_ONLY")

    @tool
    def echo(text: str) -> str:
        """Echo.

        Args:
            text: what to echo.
        """
        return text

    stream = ScriptedStreamFn([assistant_tool_calls(("echo", {"text": "ping"})),
                               assistant_text("pong")])
    Agent(model=MODEL, tools=[echo], stream_fn=stream, system_prompt="Be brief.").prompt("go")
    tool_span = spans.one("execute_tool echo")
    assert json.loads(tool_span.attributes["gen_ai.tool.call.arguments"]) == {"text": "ping"}  # type: ignore[index,arg-type]
    assert tool_span.attributes["gen_ai.tool.call.result"] == "ping"  # type: ignore[index]
    last = max(spans.named("chat gpt-test"), key=lambda s: s.start_time or 0)
    sent = json.loads(last.attributes["gen_ai.input.messages"])  # type: ignore[index,arg-type]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool"]
    assert sent[0]["parts"] == [{"type": "text", "content": "go"}]
    assert json.loads(last.attributes["gen_ai.system_instructions"]) == [  # type: ignore[index,arg-type]
        {"type": "text", "content": "Be brief."}]
    assert json.loads(last.attributes["gen_ai.output.messages"]) == [  # type: ignore[index,arg-type]
        {"role": "assistant", "parts": [{"type": "text", "content": "pong"}],
         "finish_reason": "stop"}]


def test_a_raising_hook_ends_every_open_span_with_its_error(spans: Spans) -> None:
    def broken(context: Any, signal: Any) -> Any:
        raise ValueError("bad transform")

    agent = Agent(model=MODEL, stream_fn=ScriptedStreamFn([assistant_text("x")]),
                  transform_context=broken)
    agent.prompt("go")
    run = spans.one("invoke_agent support")
    assert run.status.status_code == trace.StatusCode.ERROR
    assert run.attributes["error.type"] == "ValueError"  # type: ignore[index]
    assert [e.name for e in run.events] == ["exception"]


def test_a_listener_raising_at_agent_start_still_ends_the_runs_span(spans: Spans) -> None:
    agent = Agent(model=MODEL, stream_fn=ScriptedStreamFn([assistant_text("x")]))

    def broken(event: Any, signal: Any) -> None:
        if event.type == "agent_start":
            raise RuntimeError("listener broke")

    agent.subscribe(broken)
    assert agent.prompt("go").error_message == "RuntimeError: listener broke"
    run = spans.one("invoke_agent support")
    assert run.status.status_code == trace.StatusCode.ERROR
    assert run.attributes["error.type"] == "RuntimeError"  # type: ignore[index]


def test_nothing_is_traced_once_uninstrumented(spans: Spans) -> None:
    otel.uninstrument()
    assert not otel.is_instrumented()
    Agent(model=MODEL, stream_fn=ScriptedStreamFn([assistant_text("x")])).prompt("go")
    assert spans.finished() == []
    with pytest.raises(TypeError, match="tracer_provider must be an OpenTelemetry"):
        otel.instrument("provider")


def test_usage_of_messages_no_model_call_made_is_not_counted(spans: Spans) -> None:
    earlier = assistant_text("from another session")
    earlier.usage = Usage(input=1000, output=1000, cost=Cost(total=9.0))
    answer = assistant_text("now")
    answer.usage = Usage(input=3, output=2, cost=Cost(total=0.5))
    agent = Agent(model=MODEL, stream_fn=ScriptedStreamFn([answer]))
    agent.prompt([UserMessage("before"), earlier, UserMessage("and now?")])
    run = spans.one("invoke_agent support")
    assert run.attributes["gen_ai.usage.output_tokens"] == 2  # type: ignore[index]
    assert run.attributes["piagent.usage.cost"] == 0.5  # type: ignore[index]
    assert run.attributes["piagent.stop_reason"] == "stop"  # type: ignore[index]


def test_without_a_system_prompt_no_system_message_or_instructions_are_traced(
        spans: Spans, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 49 item 4: a transcript whose system message only declares tools sent no
    instructions: ``gen_ai.input.messages`` does not start with an empty system message,
    and there is no ``gen_ai.system_instructions``."""
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "SPAN_ONLY")

    @tool
    def echo(text: str) -> str:
        """Echo.

        Args:
            text: what to echo.
        """
        return text

    stream = ScriptedStreamFn([assistant_text("pong")])
    agent = Agent(model=MODEL, tools=[echo], stream_fn=stream)
    agent.prompt("go")
    assert agent.state.messages[0].role == "system"  # the tools' declarations
    chat = spans.one("chat gpt-test")
    sent = json.loads(chat.attributes["gen_ai.input.messages"])  # type: ignore[index,arg-type]
    assert sent == [{"role": "user", "parts": [{"type": "text", "content": "go"}]}]
    assert "gen_ai.system_instructions" not in (chat.attributes or {})


def test_every_gen_ai_name_piagent_emits_is_in_the_registry(
        spans: Spans, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 49 item 4: every ``gen_ai.*`` attribute on piagent's spans is a name of the
    GenAI registry (opentelemetry-semantic-conventions, pinned in the test extra); the rest
    are ``piagent.*``, ``server.*`` or ``error.type``."""
    from importlib.metadata import version

    from opentelemetry.semconv._incubating.attributes import gen_ai_attributes

    assert version("opentelemetry-semantic-conventions") == "0.66b2"  # setup.cfg's pin
    registry = {value for name, value in vars(gen_ai_attributes).items()
                if name.isupper() and isinstance(value, str)}
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "SPAN_ONLY")
    agent, _ = _agent(spans, system_prompt="Be brief.")  # parallel tools, a failing one,
    # a steer, an abort, usage
    agent.prompt("go", timeout=WAIT)
    reasoning = assistant_text("done")
    reasoning.usage = Usage(input=1, output=1, reasoning=1)
    Agent(model=MODEL, stream_fn=ScriptedStreamFn([reasoning]), system_prompt="Hi.",
          session_id="conv-8", max_tokens=10, temperature=0.5).prompt("go")
    emitted = {key for span in spans.finished() for key in (span.attributes or {})}
    emitted |= {key for span in spans.finished() for event in span.events
                for key in (event.attributes or {})}
    for wanted in ("gen_ai.system_instructions", "gen_ai.input.messages",
                   "gen_ai.usage.reasoning.output_tokens", "gen_ai.tool.call.result",
                   "gen_ai.request.temperature", "piagent.usage.cost"):
        assert wanted in emitted
    gen_ai = {key for key in emitted if key.startswith("gen_ai.")}
    assert gen_ai - registry == set()
    others = emitted - gen_ai
    assert all(key.startswith(("piagent.", "server.")) or key == "error.type" for key in others)
