"""``events(after=...)`` accepts only ids the run has stored: a later one would skip events
(``agent_end`` among them) or, for a finished run, answer nothing for ever."""

from __future__ import annotations

import pytest

from piagent import Agent
from piagent.runs import LocalRunner
from piagent.sessions import SessionStore
from piagent.testing import ScriptedStreamFn, assistant_text

from ..conftest import WAIT
from .conftest import DJANGO, store_fixture

store = store_fixture("memory", "sqlite", *DJANGO)


def test_an_id_the_run_never_stored_is_refused(store: SessionStore) -> None:
    fn = ScriptedStreamFn([assistant_text("hello")])
    runner = LocalRunner(store, lambda session_id: Agent(model=fn.model, stream_fn=fn))
    run_id = runner.start("s", "hi")
    seen = [item for item in runner.events(run_id, timeout=WAIT) if item is not None]
    assert seen[-1].event["type"] == "agent_end"
    last = seen[-1].id
    beyond = f"{int(last) + 1000:010d}"
    with pytest.raises(ValueError, match=rf"after='{beyond}' names no event of run "
                                         rf"'{run_id}' \(its events so far: {len(seen)}\)"):
        runner.events(run_id, after=beyond)
    # every id it did store is accepted and resumes just after it
    assert [i for i in runner.events(run_id, after=last) if i is not None] == []
    assert [i for i in runner.events(run_id, after=seen[0].id) if i is not None] == seen[1:]
