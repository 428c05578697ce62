"""``HttpClient`` keeps as many idle sessions as were ever in use at once (at least 8), so
many concurrent conversations reuse their connections instead of opening one per request;
a factory that fails does not count as a session in use."""

from __future__ import annotations

import pytest
import requests

from piagent.providers._pool import HttpClient


def test_idle_sessions_kept_follow_the_most_in_use_at_once() -> None:
    made: list[requests.Session] = []

    def factory() -> requests.Session:
        made.append(requests.Session())
        return made[-1]

    client = HttpClient("pool", factory)
    try:
        first = [client.checkout() for _ in range(30)]  # 30 requests at once
        for session in first:
            client.checkin(session)
        again = [client.checkout() for _ in range(30)]  # all reused, none made
        assert len(made) == 30
        assert {id(s) for s in again} == {id(s) for s in first}
        for session in again:
            client.checkin(session)
        one = client.checkout()  # sequential requests reuse one session
        client.checkin(one)
        assert client.checkout() is one
        client.checkin(one)
        assert len(made) == 30
    finally:
        client.close()
        for session in made:
            session.close()


def test_a_failing_factory_does_not_raise_the_number_kept() -> None:
    def factory() -> requests.Session:
        raise OSError("no sessions today")

    client = HttpClient("failing", factory)
    for _ in range(20):
        with pytest.raises(OSError, match="no sessions today"):
            client.checkout()
    assert client._out == 0 and client._keep == 8
