"""``HttpClient`` keeps as many idle sessions as were ever in use at once while requests
are in flight or runs go on, so many concurrent conversations reuse their connections
instead of opening one per request; once neither is, it keeps only the 4 latest used (the
load has passed: no fd per conversation once run); a factory that fails does not count as a
session in use."""

from __future__ import annotations

import pytest
import requests

from piagent.providers._pool import _IDLE_SESSIONS, HttpClient
from piagent.stream import run_ended, run_started


class _Session(requests.Session):
    closed = False

    def close(self) -> None:
        self.closed = True
        super().close()


def _client() -> tuple[HttpClient, list[_Session]]:
    made: list[_Session] = []

    def factory() -> requests.Session:
        made.append(_Session())
        return made[-1]

    return HttpClient("pool", factory), made


def test_idle_sessions_kept_follow_the_most_in_use_at_once_while_some_are() -> None:
    client, made = _client()
    try:
        held = client.checkout()  # one long request stays in flight throughout
        first = [client.checkout() for _ in range(30)]  # 30 more at once
        for session in first:
            client.checkin(session)
        again = [client.checkout() for _ in range(30)]  # all reused, none made
        assert len(made) == 31
        assert {id(s) for s in again} == {id(s) for s in first}
        assert not any(s.closed for s in made)
        for session in again:
            client.checkin(session)
        one = client.checkout()  # sequential requests reuse the latest used session
        client.checkin(one)
        assert client.checkout() is one
        client.checkin(one)
        assert len(made) == 31 and not any(s.closed for s in made)
        client.checkin(held)
    finally:
        client.close()


def test_the_last_request_back_closes_the_idle_sessions_beyond_four() -> None:
    client, made = _client()
    try:
        batch = [client.checkout() for _ in range(30)]
        for session in batch[:-1]:
            client.checkin(session)
        assert not any(s.closed for s in made)  # one still in flight: all 29 kept
        client.checkin(batch[-1])  # the last one back
        kept = [s for s in made if not s.closed]
        assert _IDLE_SESSIONS == 4
        assert kept == batch[-4:]  # the latest returned, which are handed out first
        assert {client.checkout() for _ in range(4)} == set(kept)
        assert len(made) == 30
        assert client.checkout() is made[-1] and len(made) == 31  # a fifth is new
    finally:
        client.close()


def test_while_a_run_goes_on_the_pool_keeps_them_and_its_end_closes_the_surplus() -> None:
    client, made = _client()
    run_started()  # between two turns no request is in flight, yet the run goes on
    try:
        batch = [client.checkout() for _ in range(10)]
        for session in batch:
            client.checkin(session)
        assert not any(s.closed for s in made)  # the last one back: a run still goes on
    finally:
        run_ended()  # the last run ends: the pool keeps the 4 latest used
    try:
        assert [s for s in made if not s.closed] == batch[-4:]
    finally:
        client.close()


def test_sequential_requests_use_one_session() -> None:
    client, made = _client()
    try:
        for _ in range(5):
            client.checkin(client.checkout())
        assert len(made) == 1 and not made[0].closed
    finally:
        client.close()


def test_a_failing_factory_does_not_raise_the_number_kept() -> None:
    def factory() -> requests.Session:
        raise OSError("no sessions today")

    client = HttpClient("failing", factory)
    for _ in range(20):
        with pytest.raises(OSError, match="no sessions today"):
            client.checkout()
    assert client._out == 0 and client._keep == _IDLE_SESSIONS
