"""Every provider fault of ``faultserver.FAULTS`` × the 4 wire APIs, through a real ``Agent``.

For each pair the run ends (every wait bounded; a stall is ended by an abort), ``agent_end``
is the last event, the transcript starts with the user's input, the outcome is the one the
fault promises (a benign fault succeeds; otherwise ``state.error_message`` is set, names
the failure, and never holds the API key), and no ``piagent-*`` thread outlives the run.
A redirect is never followed: the other origin never sees a request.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from piagent import Agent, AssistantMessage, Model, UserMessage
from tests.conftest import WAIT, Recorder, piagent_threads

from .conftest import FIGURES, open_fds
from .faultserver import APIS, FAULTS, KEY_HEADER, PROVIDER, FaultServer

KEY = "sk-reliability-SECRET-0123456789abcdef"


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[FaultServer, FaultServer]]:
    other = FaultServer()
    server = FaultServer()
    server.redirect_to = other.url
    fds = open_fds()
    try:
        yield server, other
    finally:
        server.close()
        other.close()
        assert list(other.requests) == [], "a redirect was followed to another origin"
        # every response said Connection: close; sockets may wait for the pool's GC, so
        # only growth beyond a handful would be a leak
        FIGURES.set("faults.fd_growth", open_fds() - fds)


def run_fault(server: FaultServer, fault: str, api: str) -> tuple[Agent, Recorder, bool]:
    """One prompt against ``fault``; returns the agent, its events, and whether it ended."""
    spec = FAULTS[fault]
    model = Model(id="m", api=api, provider=PROVIDER[api], base_url=server.base_url(fault, api))
    agent = Agent(model=model, api_key=KEY, max_retry_delay_ms=spec.cap_ms)
    recorder = Recorder(agent)
    run = agent.prompt("hello", block=False)
    if spec.outcome(api) == "aborted":
        assert server.stalled(fault, api).wait(WAIT), "the fault server never stalled"
        agent.abort("test abort")
    ended = run.wait(WAIT)
    if not ended:  # a hang: count it, then make sure the run does end
        FIGURES.add("faults.hangs")
        agent.abort("hang")
        run.wait(WAIT)
    return agent, recorder, ended


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_provider_fault_ends_the_run_cleanly(servers: tuple[FaultServer, FaultServer],
                                               fault: str, api: str) -> None:
    server, other = servers
    spec = FAULTS[fault]
    agent, recorder, ended = run_fault(server, fault, api)
    FIGURES.add("faults.tried")
    assert ended, f"{fault} × {api}: the run did not end within {WAIT} s"
    assert piagent_threads() == [], "a thread of the run outlived it"

    types = recorder.types()
    assert types[0] == "agent_start"
    assert types[-1] == "agent_end"
    assert types.count("agent_end") == 1
    messages = agent.state.messages
    assert isinstance(messages[0], UserMessage) and messages[0].text == "hello"
    last = messages[-1]
    assert isinstance(last, AssistantMessage)
    error = agent.state.error_message
    expect = spec.outcome(api)
    if expect == "ok":
        assert (last.stop_reason, last.text, error) == ("stop", spec.text, None), error
    elif expect == "aborted":
        assert last.stop_reason == "aborted"
        assert error is not None and "test abort" in error
    else:
        assert last.stop_reason == "error"
        assert error, f"{fault} × {api}: no error message"
        assert error == last.error_message
        assert spec.says in error
        FIGURES.add("faults.errors")
    assert KEY not in (error or "")
    assert list(other.requests) == []
    sent = server.requests_for(fault, api)
    assert sent, "the request never reached the server"
    assert all(KEY in r.headers[KEY_HEADER[api]] for r in sent)
