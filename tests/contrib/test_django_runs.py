"""The runs backend of ``DjangoStore`` (``DjangoRunBackend``) on SQLite, PostgreSQL and
MariaDB, where the runner tests (tests/runs/, the ``django-*`` stores) do not reach: a
lapsed live run becomes ``lost`` when the session starts again, ids and texts kept exactly,
a run refused inside a transaction, purge in batches, ``manage.py piagent_purge_runs``."""

from __future__ import annotations

import io
import sqlite3
import threading
import uuid
from typing import Any

import pytest

from piagent import Agent, AgentBusyError
from piagent.runs import LocalRunner, RunNotFoundError
from piagent.runs.backend import SessionBusy, backend_for
from piagent.testing import ScriptedStreamFn, assistant_text

from ..conftest import WAIT, configure_django
from .conftest import prepare_django_database

configure_django()

from django.core.management import call_command  # noqa: E402
from django.core.management.base import CommandError  # noqa: E402
from django.db import OperationalError, transaction  # noqa: E402

from piagent.contrib.django import DjangoRunBackend, DjangoStore  # noqa: E402


def _backend(alias: str) -> DjangoRunBackend:
    backend = backend_for(DjangoStore(alias))
    assert isinstance(backend, DjangoRunBackend)
    return backend


def _id() -> str:
    return uuid.uuid4().hex


def test_a_live_run_whose_lease_ran_out_is_lost_when_the_session_starts_again(
        alias: str) -> None:
    backend = _backend(alias)
    session = f"lapse-{_id()}"
    first, second, third = _id(), _id(), _id()
    backend.create_run(first, session, "gone", 1e-9)  # its lease ran out at once
    backend.send_control(session, first, "abort", "for the lost run")
    assert backend.info(first).state == "lost"  # type: ignore[union-attr]
    backend.create_run(second, session, "me", 60.0)
    lost = backend.info(first)
    assert lost is not None and lost.state == "lost" and lost.ended_at is not None
    with pytest.raises(SessionBusy, match="already has a live run") as caught:
        backend.create_run(third, session, "me", 60.0)
    assert caught.value.run_id == second and isinstance(caught.value, AgentBusyError)
    assert backend.claim_controls(session, second) == []  # the lost run's abort went with it
    backend.finish(second, "me", "done", None)
    backend.create_run(third, session, "me", 60.0)
    backend.finish(third, "me", "done", None)


def test_ids_and_texts_are_kept_exactly(alias: str) -> None:
    backend = _backend(alias)
    run_id = _id()
    session = "Ünïcode \x00 and \\ and a trailing space "
    backend.create_run(run_id, session, "me", 60.0)
    assert backend.info(run_id.upper()) is None  # MariaDB's collation would fold the case
    backend.send_control(session, run_id, "abort", "why \x00 \\0 🦜")
    backend.send_control(session.rstrip(), None, "steer", "another session's")
    [control] = backend.claim_controls(session, run_id)
    assert (control.kind, control.payload) == ("abort", "why \x00 \\0 🦜")
    backend.finish(run_id, "me", "error", "bad \x00 thing", (0, ['{"type":"agent_end"}']))
    info = backend.info(run_id)
    assert info is not None and (info.session_id, info.state, info.error_message) == (
        session, "error", "bad \x00 thing")
    with backend.watch(run_id) as watch:
        assert watch.read(-1) == [(0, '{"type":"agent_end"}')]
    backend.purge(0)


def test_a_run_is_not_started_inside_a_transaction(alias: str) -> None:
    fn = ScriptedStreamFn([assistant_text("never")])
    runner = LocalRunner(DjangoStore(alias), lambda sid: Agent(model=fn.model, stream_fn=fn))
    with transaction.atomic(using=alias), pytest.raises(RuntimeError,
                                                        match="non_atomic_requests"):
        runner.start(f"atomic-{_id()}", "hi")


def test_purge_goes_in_batches_and_keeps_live_runs(alias: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    backend = _backend(alias)
    backend.purge(0)
    monkeypatch.setattr(backend, "purge_batch", 2)
    ended = [_id() for _ in range(5)]
    for run_id in ended:
        backend.create_run(run_id, f"purge-{run_id}", "me", 60.0)
        backend.append_events(run_id, 0, ['{"type":"agent_start"}'])
        backend.finish(run_id, "me", "done", None)
    live = _id()
    backend.create_run(live, f"purge-{live}", "me", 60.0)
    assert sorted(backend.purge(0)) == sorted(ended)
    assert all(backend.info(run_id) is None for run_id in ended)
    assert backend.info(live) is not None
    backend.finish(live, "me", "done", None)
    backend.purge(0)


def test_the_purge_command(alias: str) -> None:
    fn = ScriptedStreamFn([assistant_text("one"), assistant_text("two")])
    runner = LocalRunner(DjangoStore(alias), lambda sid: Agent(model=fn.model, stream_fn=fn))
    run_id = runner.start(f"command-{_id()}", "hi")
    assert runner.wait(run_id, WAIT)
    out = io.StringIO()
    call_command("piagent_purge_runs", older_than="7d", database=alias, stdout=out)
    assert out.getvalue() == "Purged 0 runs that ended more than 604800 s ago.\n"
    assert runner.status(run_id).state == "done"
    out = io.StringIO()
    call_command("piagent_purge_runs", "--older-than", "0", "--database", alias, stdout=out)
    assert out.getvalue().startswith("Purged ")
    with pytest.raises(RunNotFoundError):
        runner.status(run_id)


@pytest.mark.parametrize(("age", "seconds"), [("90", 90.0), ("1.5h", 5400.0), ("30m", 1800.0),
                                              ("2w", 1209600.0), ("45s", 45.0)])
def test_the_purge_command_reads_durations(age: str, seconds: float) -> None:
    from piagent.contrib.django.management.commands.piagent_purge_runs import parse_age

    assert parse_age(age) == seconds


def test_the_commands_refuse_bad_options() -> None:
    with pytest.raises(CommandError, match="--older-than must be a number of seconds or a "
                                           "duration such as 90s, 30m, 12h, 7d or 2w; got '7y'"):
        call_command("piagent_purge_runs", older_than="7y")
    with pytest.raises(CommandError, match="--database 'nowhere' is not in settings.DATABASES"):
        call_command("piagent_purge_runs", older_than="1d", database="nowhere")
    with pytest.raises(CommandError, match="--older-than"):
        call_command("piagent_purge_runs")
    with pytest.raises(CommandError, match="--timeout must be a number of seconds > 0"):
        call_command("piagent_recover_runs", timeout=0)
    with pytest.raises(CommandError, match="needs a runner on a store other processes reach"):
        call_command("piagent_recover_runs", runner=object())


REFUSALS = 25  # more than the tries of a write that meets another conflict (_store._ATTEMPTS)


def test_on_sqlite_a_write_waits_for_another_writer_to_finish() -> None:
    """SQLite refuses at once ("database is locked", no busy timeout) a transaction that
    read before it writes while another connection holds the write lock: a run claiming its
    steering while a purge's batch is being written. The claim tries again after a pause
    until the other writer is done (for seconds: more tries than the 20 of other conflicts),
    instead of failing the run's supervisor."""
    from django.db import connections

    prepare_django_database("default")
    backend = _backend("default")
    session, run = f"locked-{_id()}", _id()
    backend.create_run(run, session, "me", 60.0)
    backend.send_control(session, run, "steer", "hello")
    refused = threading.Event()  # the claim met the lock REFUSALS times
    refusals: list[int] = []
    outcome: list[object] = []

    def note_refusals(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        try:
            return execute(sql, params, many, context)
        except OperationalError as exc:
            if "locked" in str(exc):
                refusals.append(1)
                if len(refusals) == REFUSALS:
                    refused.set()
            raise

    def claim() -> None:
        try:
            with connections["default"].execute_wrapper(note_refusals):
                outcome.append(backend.claim_controls(session, run))
        except BaseException as exc:  # noqa: BLE001 - reported below
            outcome.append(exc)
        finally:
            connections["default"].close()

    other = sqlite3.connect(connections["default"].settings_dict["NAME"], timeout=WAIT)
    other.isolation_level = None
    other.execute("BEGIN IMMEDIATE")  # another writer holds the lock
    claimer = threading.Thread(target=claim)
    claimer.start()
    try:
        assert refused.wait(WAIT), outcome
    finally:
        other.execute("ROLLBACK")
        other.close()
        claimer.join(WAIT)
    assert not claimer.is_alive()
    assert len(outcome) == 1 and not isinstance(outcome[0], BaseException), outcome
    assert [(c.kind, c.payload) for c in outcome[0]] == [("steer", "hello")]  # type: ignore[attr-defined]
    backend.finish(run, "me", "done", None)
