"""``JsonlStore``: the store contract, readable files, torn lines and corrupt ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from piagent.sessions import JsonlStore, SessionCorruptError, SessionStore

from .conformance import SessionStoreConformance, a_user, same


class TestJsonlStore(SessionStoreConformance):
    def make_store(self, tmp_path: Path) -> SessionStore:
        return JsonlStore(tmp_path / "sessions")

    def reopen(self, store: SessionStore, tmp_path: Path) -> SessionStore:
        return JsonlStore(tmp_path / "sessions")


def test_one_readable_file_per_session(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path)
    store.append("user-42", [a_user("hi"), a_user("there")])
    store.mark_started("user-42", "c1")
    lines = (tmp_path / "user-42.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines] == [
        {"piagentSession": "user-42", "version": 1},
        {"seq": 0, "message": {"role": "user", "content": [{"type": "text", "text": "hi"}],
                               "timestamp": 1}, "more": True},
        {"seq": 1, "message": {"role": "user", "content": [{"type": "text", "text": "there"}],
                               "timestamp": 1}},
        {"seq": 2, "started": "c1"},
    ]
    assert store.path_of("a/../b").name == "a%2F..%2Fb.jsonl"
    assert store.path_of(".hidden").name == "%2Ehidden.jsonl"
    assert len(store.path_of("é" * 200).name.encode()) < 255


def test_torn_last_line_is_dropped_with_a_warning(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path)
    store.append("s", [a_user("one"), a_user("two")])
    path = store.path_of("s")
    with path.open("ab") as f:
        f.write(b'{"seq": 2, "message": {"role": "us')  # the process died here
    with pytest.warns(RuntimeWarning, match="torn last line"):
        assert same(store.load("s"), [a_user("one"), a_user("two")])
    store.append("s", [a_user("three")])  # the torn part is cut before the new line
    assert same(JsonlStore(tmp_path).load("s"), [a_user("one"), a_user("two"), a_user("three")])
    assert path.read_bytes().endswith(b"\n")


def test_an_append_cut_short_is_dropped_whole(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path)
    store.append("s", [a_user("one")])
    path = store.path_of("s")
    with path.open("ab") as f:  # the first line of a two-message append, then death
        f.write(b'{"seq":1,"message":{"role":"user","content":"x","timestamp":1},"more":true}\n')
    with pytest.warns(RuntimeWarning, match="append cut short"):
        assert same(store.load("s"), [a_user("one")])


def test_a_bad_line_before_the_last_raises(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path)
    store.append("s", [a_user("one")])
    store.append("s", [a_user("two")])
    store.append("s", [a_user("three")])
    path = store.path_of("s")
    lines = path.read_bytes().split(b"\n")
    lines[2] = b"garbage"
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(SessionCorruptError, match=r"Session 's': record 1 ") as info:
        store.load("s")
    assert info.value.seq == 1


def test_an_unknown_role_is_corrupt_not_dropped(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path)
    store.append("s", [a_user("one")])
    with store.path_of("s").open("ab") as f:
        f.write(b'{"seq":1,"message":{"role":"alien","timestamp":1}}\n')
    with pytest.raises(SessionCorruptError, match="record 1 .*alien"):
        store.load("s")
