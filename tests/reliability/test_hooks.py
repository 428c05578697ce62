"""Every hook and every listener raising, at every point it is called, in both tool modes.

A clean run of a three-turn script (two parallel tool calls, one more call, an answer)
counts how often each hook is called and how many events a listener sees; then one run per
(hook, k) raises at the k-th call, and one run per event index has a listener raise there.
Each run must end (bounded), end with ``agent_end``, keep the user's input in the
transcript exactly once, keep the result of every call whose tool ran (and of every
``tool_execution_end``), name the failure (``state.error_message``, or the call's error
result for the tool hooks, which fail the call rather than the run), and leave no thread.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from piagent import (
    Agent,
    AgentTool,
    AgentToolResult,
    TextContent,
    ToolResultMessage,
    UserMessage,
    tool,
)
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls
from tests.conftest import WAIT, Recorder, piagent_threads

from .conftest import FIGURES

HOOKS = ("convert_to_llm", "transform_context", "before_tool_call", "after_tool_call",
         "finish_turn", "prepare_request", "prepare_next_turn", "get_api_key")
TOOL_HOOKS = ("before_tool_call", "after_tool_call")  # these fail the call, not the run
MODES = ("parallel", "sequential")


@dataclass
class Ran:
    """The ids of the calls whose tool body ran (pool threads append)."""

    lock: threading.Lock = field(default_factory=threading.Lock)  # guards ids
    ids: list[str] = field(default_factory=list)

    def add(self, call_id: str) -> None:
        with self.lock:
            self.ids.append(call_id)


def make_tool(ran: Ran) -> AgentTool:
    @tool
    def echo(text: str, tool_call_id: str, on_update: Any) -> str:
        """Echo the text back.

        Args:
            text: What to echo.
        """
        ran.add(tool_call_id)
        on_update(AgentToolResult(content=[TextContent("working")]))
        return "echo " + text
    return echo


def script() -> ScriptedStreamFn:
    return ScriptedStreamFn([
        assistant_tool_calls(("echo", {"text": "a"}, "call_a"), ("echo", {"text": "b"}, "call_b")),
        assistant_tool_calls(("echo", {"text": "c"}, "call_c")),
        assistant_text("done"),
    ])


def passthrough(hook: str) -> Callable[..., Any]:
    """What the hook does when it does not raise (the Agent's own behaviour)."""
    if hook == "convert_to_llm":
        from piagent.agent import default_convert_to_llm
        return default_convert_to_llm
    if hook == "transform_context":
        return lambda messages, signal: messages
    if hook == "get_api_key":
        return lambda provider: None
    return lambda *args: None


class Raiser:
    """A hook that behaves normally, except at call number ``at`` (0-based) where it raises;
    ``at=None`` never raises (it only counts)."""

    def __init__(self, hook: str, at: int | None) -> None:
        self.hook = hook
        self.at = at
        self.calls = 0
        self.normal = passthrough(hook)
        self.lock = threading.Lock()  # guards calls: after_tool_call runs on pool threads

    @property
    def text(self) -> str:
        return f"boom in {self.hook} #{self.at}"

    def __call__(self, *args: Any) -> Any:
        with self.lock:
            n = self.calls
            self.calls += 1
        if n == self.at:
            raise RuntimeError(self.text)
        return self.normal(*args)


def make_agent(mode: str, ran: Ran, **hooks: Any) -> tuple[Agent, Recorder]:
    scripted = script()
    agent = Agent(model=scripted.model, stream_fn=scripted, tools=[make_tool(ran)],
                  tool_execution=mode, **hooks)  # type: ignore[arg-type]
    return agent, Recorder(agent)


def check_run(agent: Agent, recorder: Recorder, ran: Ran) -> list[ToolResultMessage]:
    """What every failing run must keep; returns the transcript's tool results."""
    types = recorder.types()
    assert types[0] == "agent_start"
    assert types[-1] == "agent_end"
    messages = agent.state.messages
    users = [m for m in messages if isinstance(m, UserMessage)]
    assert [u.text for u in users] == ["go"], "the user's input is not in the transcript once"
    results = [m for m in messages if isinstance(m, ToolResultMessage)]
    ids = Counter(r.tool_call_id for r in results)
    assert all(n == 1 for n in ids.values()), f"a result recorded twice: {ids}"
    missing = [i for i in ran.ids if i not in ids]
    assert missing == [], f"executed calls without a result in the transcript: {missing}"
    ended = [e.tool_call_id for e in recorder.of("tool_execution_end")]
    assert [i for i in ended if i not in ids] == []
    assert piagent_threads() == []
    return results


def clean_counts(mode: str) -> tuple[dict[str, int], int]:
    ran = Ran()
    raisers = {hook: Raiser(hook, None) for hook in HOOKS}
    agent, recorder = make_agent(mode, ran, **raisers)
    agent.prompt("go", timeout=WAIT)
    assert agent.state.error_message is None
    assert sorted(ran.ids) == ["call_a", "call_b", "call_c"]
    return {hook: r.calls for hook, r in raisers.items()}, len(recorder.events)


COUNTS = {mode: clean_counts(mode) for mode in MODES}
HOOK_POINTS = [(mode, hook, k) for mode in MODES for hook in HOOKS
               for k in range(COUNTS[mode][0][hook])]
LISTENER_POINTS = [(mode, i) for mode in MODES for i in range(COUNTS[mode][1])]


def test_every_hook_is_called_in_the_clean_run() -> None:
    for mode in MODES:
        counts = COUNTS[mode][0]
        assert all(counts[hook] >= 1 for hook in HOOKS), counts


@pytest.mark.parametrize(("mode", "hook", "at"), HOOK_POINTS,
                         ids=[f"{m}-{h}-{k}" for m, h, k in HOOK_POINTS])
def test_a_hook_raising_at_any_call_ends_the_run_cleanly(mode: str, hook: str, at: int) -> None:
    ran = Ran()
    raiser = Raiser(hook, at)
    agent, recorder = make_agent(mode, ran, **{hook: raiser})
    agent.prompt("go", timeout=WAIT)  # TimeoutError would be a hang
    FIGURES.add("hooks.raising_runs")
    results = check_run(agent, recorder, ran)
    if hook in TOOL_HOOKS:
        failed = [r for r in results if raiser.text in r.text]
        assert len(failed) == 1 and failed[0].is_error, [r.text for r in results]
    else:
        error = agent.state.error_message
        assert error is not None and raiser.text in error
        assert agent.state.messages[-1].stop_reason == "error"


@pytest.mark.parametrize(("mode", "at"), LISTENER_POINTS,
                         ids=[f"{m}-{i}" for m, i in LISTENER_POINTS])
def test_a_listener_raising_at_any_event_ends_the_run_cleanly(mode: str, at: int) -> None:
    ran = Ran()
    agent, recorder = make_agent(mode, ran)
    seen: list[str] = []
    text = f"listener boom at event {at}"

    def listener(event: Any, signal: Any) -> None:
        seen.append(event.type)
        if len(seen) - 1 == at:
            raise RuntimeError(text)

    agent.subscribe(listener)
    agent.prompt("go", timeout=WAIT)
    FIGURES.add("hooks.listener_runs")
    check_run(agent, recorder, ran)
    error = agent.state.error_message
    assert error is not None and text in error
    last = agent.state.messages[-1]
    assert last.role == "assistant" and last.stop_reason == "error"
    # a later listener still saw the end of the run
    assert recorder.types()[-1] == "agent_end"
