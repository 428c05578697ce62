"""Tools and the run's worker see the contextvars of the caller of ``prompt()`` / the loop.

The run's worker thread runs in a copy of its caller's context, and each tool handed to a
pool (the run's own or a caller-owned ``tool_executor``) in a copy of the worker's: a value
set before the call is seen; a value a tool sets stays with that call.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from piagent import Agent, AgentContext, UserMessage, agent_loop
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls
from tests.conftest import WAIT
from tests.tools.conftest import make_tool, ok

from .conftest import make_config

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="unset")


class Seen:
    """A tool recording the ``request_id`` each call sees, then setting its own."""

    def __init__(self) -> None:
        self.values: list[tuple[str, str]] = []
        self.lock = threading.Lock()  # guards values (appended from pool threads)
        self.tool = make_tool("read", self.execute)

    def execute(self, call_id: str, params: Any, *args: Any) -> Any:
        with self.lock:
            self.values.append((call_id, request_id.get()))
        request_id.set(f"changed by {call_id}")  # must not reach the caller or a sibling
        return ok()


def two_calls() -> list[Any]:
    return [assistant_tool_calls(("read", {"path": "a"}), ("read", {"path": "b"})),
            assistant_tool_calls(("read", {"path": "c"})), assistant_text("done")]


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="caller-pool")
    yield pool
    pool.shutdown(wait=True)


@pytest.mark.parametrize("owned", [False, True], ids=["run pool", "tool_executor"])
def test_tools_see_the_value_set_by_the_caller_of_prompt(
        owned: bool, executor: ThreadPoolExecutor) -> None:
    seen = Seen()
    fn = ScriptedStreamFn(two_calls())
    agent = Agent(model=fn.model, stream_fn=fn, tools=[seen.tool],
                  tool_executor=executor if owned else None)
    token = request_id.set("req-42")
    try:
        run = agent.prompt("go")
        assert run.error_message is None
        assert request_id.get() == "req-42"  # what the tools set stayed with them
    finally:
        request_id.reset(token)
    assert [value for _, value in seen.values] == ["req-42"] * 3


def test_agent_loop_runs_in_the_callers_context() -> None:
    seen = Seen()
    fn = ScriptedStreamFn(two_calls())
    token = request_id.set("req-7")
    try:
        stream = agent_loop([UserMessage("go")], AgentContext([], [seen.tool]),
                            make_config(fn), stream_fn=fn)
    finally:
        request_id.reset(token)  # the worker took its copy when it was started
    assert [m.role for m in stream.result(WAIT)][-1] == "assistant"
    assert [value for _, value in seen.values] == ["req-7"] * 3
