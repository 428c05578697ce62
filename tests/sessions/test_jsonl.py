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


def test_appends_from_two_store_objects_interleave_with_every_seq_once(tmp_path: Path) -> None:
    """An append reads only what other writers added since its last one (two ``JsonlStore``
    objects on one directory stand for two processes); replacing, deleting and a torn
    line written by someone else are all noticed."""
    a, b = JsonlStore(tmp_path), JsonlStore(tmp_path)
    a.append("s", [a_user("1")])
    b.append("s", [a_user("2"), a_user("3")])
    a.append("s", [a_user("4")])
    a.mark_started("s", "c1")
    b.mark_started("s", "c1")  # already marked by the other writer: not written twice
    b.append("s", [a_user("5")])
    assert same(a.load("s"), [a_user(t) for t in "12345"])
    path = a.path_of("s")
    records = [json.loads(line) for line in path.read_text().splitlines()[1:]]
    assert [r["seq"] for r in records] == list(range(6))
    assert [r.get("started") for r in records].count("c1") == 1
    b.replace("s", [a_user("x")])
    a.append("s", [a_user("y")])
    assert same(b.load("s"), [a_user("x"), a_user("y")])
    with path.open("ab") as f:
        f.write(b'{"seq": 2, "message": {"ro')  # another writer died mid-line
    b.append("s", [a_user("z")])
    assert same(a.load("s"), [a_user("x"), a_user("y"), a_user("z")])
    b.delete("s")
    a.append("s", [a_user("new")])
    assert same(b.load("s"), [a_user("new")])
