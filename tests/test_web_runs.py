"""``piagent.web`` for runs addressed by id (durable.md §3, §5): frames carry ``id:`` lines,
a client that reconnects with ``Last-Event-ID`` gets every later event exactly once (over a
real HTTP server), an idle run gets keep-alive comments, a departed reader leaves the run
running, and an unknown run id is a 404 saying so, in Flask and in Django."""

from __future__ import annotations

import pytest

from piagent.web import encode_sse


def test_encode_sse_writes_an_id_line_first() -> None:
    assert encode_sse({"type": "agent_start"}, id="000042") == \
        b'id: 000042\ndata: {"type":"agent_start"}\n\n'
    assert encode_sse({"a": 1}, "update", id="7") == b'id: 7\nevent: update\ndata: {"a":1}\n\n'
    assert encode_sse({"a": 1}) == b'data: {"a":1}\n\n'


@pytest.mark.parametrize("bad", ["1\n2", "1\r", "a\0"])
def test_encode_sse_refuses_an_id_that_would_split_the_frame(bad: str) -> None:
    with pytest.raises(ValueError, match="id must not contain a newline"):
        encode_sse({}, id=bad)


def test_encode_sse_refuses_a_non_str_id() -> None:
    with pytest.raises(TypeError, match="id must be a str, got int"):
        encode_sse({}, id=7)  # type: ignore[arg-type]
