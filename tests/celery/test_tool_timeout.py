"""A Celery worker whose run's tool never answers in time: the tool's timeout answers the
call, the task ends, the worker takes the next one, and SIGTERM stops the worker at once
although the abandoned tool thread still runs (nothing joins it at exit)."""

from __future__ import annotations

import signal
import subprocess

from ..conftest import SLOW_WAIT, wait_until
from .conftest import Cluster, run_change


def test_a_timed_out_tool_does_not_hold_the_workers_task_or_its_exit(cluster: Cluster) -> None:
    worker = cluster.start("timeouts")
    runner = cluster.runner
    run_id = runner.start("hang-1", "go")
    wait_until((cluster.dir / "entered-hang-1").exists, "the hang tool to start",
               wake=run_change(runner, run_id))
    assert runner.wait(run_id, SLOW_WAIT)
    assert runner.status(run_id).state == "done"
    stored = cluster.app.store.load("hang-1")  # type: ignore[union-attr]
    assert [m.role for m in stored][-3:] == ["assistant", "toolResult", "assistant"]
    assert stored[-2].is_error and stored[-1].text == ("echo Tool 'hang' timed out after 0.5 s; it was abandoned and its "
                         "result will not be used.")
    second = runner.start("echo-1", "next")  # the worker takes the next task
    assert runner.wait(second, SLOW_WAIT) and runner.status(second).state == "done"
    cluster.workers.pop("timeouts")
    worker.send_signal(signal.SIGTERM)  # the hang tool still waits (30 s > SLOW_WAIT)
    try:
        worker.wait(SLOW_WAIT)
    except subprocess.TimeoutExpired:
        worker.kill()
        worker.wait(SLOW_WAIT)
        raise AssertionError(f"the worker did not exit:\n{cluster.log('timeouts')}") from None
