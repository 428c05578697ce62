"""``/clear`` in ``piagent chat`` drops what a stopped run left in the queues."""

from __future__ import annotations

import io
import threading
from collections.abc import Callable
from typing import Union

from piagent import AbortSignal, Agent, UserMessage, tool
from piagent.cli import EventPrinter, chat_loop
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls

WAIT = 10.0
Step = Union[str, BaseException, Callable[[], "str | BaseException"]]


class Typist:
    """Feeds chat_loop one line at a time; a step may first wait for something."""

    def __init__(self, steps: list[Step]) -> None:
        self.steps = list(steps)

    def __call__(self) -> str:
        if not self.steps:
            raise EOFError
        step = self.steps.pop(0)
        if callable(step):
            step = step()
        if isinstance(step, BaseException):
            raise step
        return step


def test_clear_drops_steering_left_by_a_stopped_run() -> None:
    started = threading.Event()

    @tool
    def wait_forever(signal: AbortSignal) -> str:
        """Wait until aborted."""
        started.set()
        signal.wait(WAIT)
        return "stopped"

    scripted = ScriptedStreamFn([assistant_tool_calls(("wait_forever", {})),
                                 assistant_text("fresh answer")])
    agent = Agent(model=scripted.model, stream_fn=scripted, tools=[wait_forever])

    def after_start(then: Step) -> Callable[[], Step]:
        return lambda: then if started.wait(WAIT) else AssertionError("tool never started")

    def when_idle(then: Step) -> Callable[[], Step]:
        return lambda: then if agent.wait_for_idle(WAIT) else AssertionError("still running")

    out = io.StringIO()
    printer = EventPrinter(out)
    agent.subscribe(printer)
    code = chat_loop(agent, Typist([
        "go", after_start("only the old thing"), KeyboardInterrupt(),
        when_idle("/clear"), "new question", when_idle("/quit")]), printer)
    text = out.getvalue()
    assert code == 0
    assert "(queued messages will go with your next message; /clear drops them)" in text
    assert "(dropped 1 queued message)" in text
    assert "assistant> fresh answer" in text
    sent = [m.text for m in scripted.calls[-1].context.messages if isinstance(m, UserMessage)]
    assert sent == ["go", "new question"]  # the stopped run's steering did not ride along
