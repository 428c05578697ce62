"""The behaviour every ``SessionStore`` keeps (docs/sessions.md), for any store to reuse.

Subclass ``SessionStoreConformance`` in a ``Test…`` class and define ``make_store`` (and
``reopen`` for a durable store: a fresh store object over the same data)::

    class TestSQLiteStore(SessionStoreConformance):
        def make_store(self, tmp_path: Path) -> SessionStore:
            return SQLiteStore(tmp_path / "s.db")

        def reopen(self, store: SessionStore, tmp_path: Path) -> SessionStore:
            return SQLiteStore(tmp_path / "s.db")

pytest collects every ``test_*`` method below for that class. ``messages()`` is a
hypothesis strategy of every standard message and a registered application message
(``Note``), reusable by other tests.
"""

from __future__ import annotations

import dataclasses
import enum
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from piagent.errors import UnknownMessageTypeError
from piagent.messages import (
    AgentMessage,
    AssistantMessage,
    Cost,
    ImageContent,
    SystemMessage,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolDeclaration,
    ToolResultMessage,
    Usage,
    UserMessage,
    messages_to_json,
    register_message_type,
)
from piagent.sessions import SessionStore

from ..conftest import WAIT

# --- a registered application message --------------------------------------------------


class Mood(enum.Enum):
    CALM = "calm"
    URGENT = "urgent"


@dataclasses.dataclass
class Note:
    """An application message (a UI note) that stores must keep like any other."""

    text: str
    tags: list[str] = dataclasses.field(default_factory=list)
    mood: Mood = Mood.CALM
    timestamp: int = 0
    role: str = "note"


register_message_type("note", Note)

# --- strategies ----------------------------------------------------------------------------

# text as JSON carries it (no lone surrogates: they cannot be encoded as UTF-8)
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
SMALL_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
INTS = st.integers(min_value=-(2**63), max_value=2**63)
FLOATS = st.floats(allow_nan=False, allow_infinity=False)
TIMESTAMPS = st.integers(min_value=0, max_value=2**53)

JSON_VALUES: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | INTS | FLOATS | SMALL_TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(SMALL_TEXT, inner, max_size=3),
    max_leaves=8,
)
JSON_OBJECTS = st.dictionaries(SMALL_TEXT, JSON_VALUES, max_size=4)
OPT_TEXT = st.none() | SMALL_TEXT

text_blocks = st.builds(TextContent, TEXT, OPT_TEXT)
image_blocks = st.builds(ImageContent, st.text("ABCDEF0123456789+/=", max_size=20),
                         st.sampled_from(["image/png", "image/jpeg"]))
thinking_blocks = st.builds(ThinkingContent, TEXT, OPT_TEXT, st.booleans())
tool_calls = st.builds(ToolCall, SMALL_TEXT, SMALL_TEXT, JSON_OBJECTS, OPT_TEXT)
costs = st.builds(Cost, FLOATS, FLOATS, FLOATS, FLOATS, FLOATS)
usages = st.builds(Usage, INTS, INTS, INTS, INTS, INTS, costs)

system_messages = st.builds(
    SystemMessage,
    content=TEXT,
    sections=st.none() | st.dictionaries(SMALL_TEXT, OPT_TEXT, max_size=3),
    tools_added=st.none() | st.lists(st.builds(ToolDeclaration, SMALL_TEXT, TEXT, JSON_OBJECTS),
                                     max_size=2),
    tools_removed=st.none() | st.lists(SMALL_TEXT, max_size=2),
    timestamp=TIMESTAMPS,
)
user_messages = st.builds(
    UserMessage,
    content=TEXT | st.lists(text_blocks | image_blocks, max_size=3),
    timestamp=TIMESTAMPS,
)
assistant_messages = st.builds(
    AssistantMessage,
    content=st.lists(text_blocks | thinking_blocks | tool_calls, max_size=3),
    api=SMALL_TEXT, provider=SMALL_TEXT, model=SMALL_TEXT, usage=usages,
    stop_reason=st.sampled_from(["stop", "length", "toolUse", "error", "aborted"]),
    error_message=OPT_TEXT,
    thinking_level=st.none() | st.sampled_from(["off", "low", "high"]),
    timestamp=TIMESTAMPS,
)
tool_result_messages = st.builds(
    ToolResultMessage,
    tool_call_id=SMALL_TEXT, tool_name=SMALL_TEXT,
    content=st.lists(text_blocks | image_blocks, max_size=3),
    details=JSON_VALUES, usage=st.none() | usages, is_error=st.booleans(),
    duration_ms=st.none() | st.integers(min_value=0, max_value=10**9),
    timestamp=TIMESTAMPS,
)
notes = st.builds(Note, TEXT, st.lists(SMALL_TEXT, max_size=3), st.sampled_from(list(Mood)),
                  TIMESTAMPS)


def messages() -> st.SearchStrategy[AgentMessage]:
    """Any standard message or a registered ``Note``."""
    return (system_messages | user_messages | assistant_messages | tool_result_messages
            | notes)  # type: ignore[return-value]


def a_user(text: str) -> UserMessage:
    return UserMessage(content=[TextContent(text)], timestamp=1)


def calls(*ids: str) -> AssistantMessage:
    return AssistantMessage(content=[ToolCall(i, "echo", {"x": 1}) for i in ids], api="a",
                            provider="p", model="m", stop_reason="toolUse", timestamp=2)


def answer(call_id: str) -> ToolResultMessage:
    return ToolResultMessage(call_id, "echo", [TextContent("ok")], timestamp=3)


def same(a: list[AgentMessage], b: list[AgentMessage]) -> bool:
    return messages_to_json(a) == messages_to_json(b)


# --- the contract ------------------------------------------------------------------------


class SessionStoreConformance:
    """Every ``test_*`` here is the contract; subclasses say how to make the store."""

    def make_store(self, tmp_path: Path) -> SessionStore:
        raise NotImplementedError

    def reopen(self, store: SessionStore, tmp_path: Path) -> SessionStore:
        """A new store object over the same data (the same object for an in-memory store)."""
        return store

    @pytest.fixture
    def store(self, tmp_path: Path) -> SessionStore:
        return self.make_store(tmp_path)

    @staticmethod
    def new_id() -> str:
        return f"s-{uuid.uuid4().hex}"

    def test_is_a_session_store(self, store: SessionStore) -> None:
        assert isinstance(store, SessionStore)

    def test_unknown_session_is_empty(self, store: SessionStore) -> None:
        sid = self.new_id()
        assert store.load(sid) == []
        assert store.started(sid) == set()
        assert sid not in store.session_ids()
        store.delete(sid)  # no error

    def test_append_then_load_in_order(self, store: SessionStore, tmp_path: Path) -> None:
        sid = self.new_id()
        first = [SystemMessage("be brief", timestamp=0), a_user("hi")]
        store.append(sid, first)
        store.append(sid, [calls("c1")])
        store.append(sid, [answer("c1"), Note("seen", ["ui"], Mood.URGENT, 4)])
        expected = [*first, calls("c1"), answer("c1"), Note("seen", ["ui"], Mood.URGENT, 4)]
        assert same(store.load(sid), expected)
        assert store.load(sid) == expected
        assert same(self.reopen(store, tmp_path).load(sid), expected)
        assert sid in store.session_ids()

    def test_append_nothing_changes_nothing(self, store: SessionStore) -> None:
        sid = self.new_id()
        store.append(sid, [])
        assert store.load(sid) == []
        assert sid not in store.session_ids()

    def test_append_is_all_or_nothing(self, store: SessionStore) -> None:
        @dataclasses.dataclass
        class Unregistered:
            role: str = "unregistered-kind"

        sid = self.new_id()
        store.append(sid, [a_user("kept")])
        with pytest.raises(UnknownMessageTypeError):
            store.append(sid, [a_user("lost"), Unregistered()])  # type: ignore[list-item]
        assert same(store.load(sid), [a_user("kept")])

    def test_wrong_messages_argument_is_refused(self, store: SessionStore) -> None:
        with pytest.raises(TypeError, match="sequence of messages"):
            store.append(self.new_id(), "hello")  # type: ignore[arg-type]

    def test_replace_and_delete(self, store: SessionStore, tmp_path: Path) -> None:
        sid, other = self.new_id(), self.new_id()
        store.append(sid, [a_user("one"), a_user("two")])
        store.append(other, [a_user("other")])
        store.replace(sid, [a_user("three")])
        assert same(store.load(sid), [a_user("three")])
        store.append(sid, [a_user("four")])
        assert same(self.reopen(store, tmp_path).load(sid), [a_user("three"), a_user("four")])
        store.replace(sid, [])
        assert store.load(sid) == []
        store.append(sid, [a_user("five")])
        store.delete(sid)
        assert store.load(sid) == []
        assert sid not in store.session_ids()
        assert same(store.load(other), [a_user("other")])
        assert other in store.session_ids()

    def test_session_ids_are_sorted(self, store: SessionStore) -> None:
        prefix = self.new_id()
        names = [f"{prefix}-b", f"{prefix}-a", f"{prefix}-c"]
        for name in names:
            store.append(name, [a_user(name)])
        listed = [s for s in store.session_ids() if s.startswith(prefix)]
        assert listed == sorted(names)

    @pytest.mark.parametrize("bad", ["", "x" * 201, 7, None, b"bytes"])
    def test_session_id_is_checked(self, store: SessionStore, bad: Any) -> None:
        for call in (lambda: store.load(bad), lambda: store.append(bad, [a_user("x")]),
                     lambda: store.replace(bad, []), lambda: store.delete(bad),
                     lambda: store.mark_started(bad, "c"), lambda: store.started(bad)):
            with pytest.raises(ValueError, match="at most 200 characters"):
                call()

    def test_longest_and_unusual_session_ids_work(self, store: SessionStore,
                                                  tmp_path: Path) -> None:
        for sid in ("x" * 200, "user 42/../é ☃", "a.jsonl", "'; DROP TABLE x; --",
                    "nul\x00in\\0 it\\"):
            store.replace(sid, [a_user(sid)])
            assert same(self.reopen(store, tmp_path).load(sid), [a_user(sid)])
            assert sid in store.session_ids()
            store.delete(sid)

    def test_started_marks_until_answered(self, store: SessionStore, tmp_path: Path) -> None:
        sid = self.new_id()
        store.append(sid, [a_user("go"), calls("c1", "c2", "c3")])
        store.mark_started(sid, "c1")
        store.mark_started(sid, "c2")
        store.mark_started(sid, "c2")  # twice is once
        assert store.started(sid) == {"c1", "c2"}
        assert self.reopen(store, tmp_path).started(sid) == {"c1", "c2"}
        store.append(sid, [answer("c1")])
        assert store.started(sid) == {"c2"}
        # the marks are records, never messages
        assert same(store.load(sid), [a_user("go"), calls("c1", "c2", "c3"), answer("c1")])

    def test_marks_of_unusual_call_ids(self, store: SessionStore, tmp_path: Path) -> None:
        sid, odd = self.new_id(), ("nul\x00id", "back\\0slash\\", "é ☃")
        store.append(sid, [calls(*odd)])
        for call_id in odd:
            store.mark_started(sid, call_id)
        assert self.reopen(store, tmp_path).started(sid) == set(odd)
        store.append(sid, [answer(odd[0])])
        assert store.started(sid) == set(odd[1:])

    def test_replace_keeps_marks_of_unanswered_calls_only(self, store: SessionStore) -> None:
        sid = self.new_id()
        store.append(sid, [calls("c1", "c2")])
        store.mark_started(sid, "c1")
        store.mark_started(sid, "c2")
        store.replace(sid, [calls("c1", "c2"), answer("c2")])
        assert store.started(sid) == {"c1"}
        store.replace(sid, [a_user("fresh")])
        assert store.started(sid) == set()
        store.mark_started(sid, "c9")
        store.delete(sid)
        assert store.started(sid) == set()

    def test_replace_keeps_marks_of_the_last_batch_only(self, store: SessionStore) -> None:
        # a batch a later reply went past is over: resume() finishes only the last one
        sid = self.new_id()
        store.append(sid, [calls("c1")])
        store.mark_started(sid, "c1")
        store.replace(sid, [calls("c1"), a_user("something else")])
        assert store.started(sid) == {"c1"}  # still the last assistant message's call
        store.replace(sid, [calls("c1"), a_user("something else"), calls("c2")])
        assert store.started(sid) == set()
        store.delete(sid)

    def test_a_repeated_call_id_is_a_new_call(self, store: SessionStore,
                                              tmp_path: Path) -> None:
        # ids repeat (piagent.testing numbers call_1 in every message; servers per response):
        # a mark belongs to the last batch, and only a later result answers it
        sid = self.new_id()
        store.append(sid, [a_user("go"), calls("c1")])
        store.mark_started(sid, "c1")
        store.append(sid, [answer("c1"), calls("c1", "c2")])
        assert store.started(sid) == set()  # the new c1 has not started
        store.mark_started(sid, "c1")
        assert store.started(sid) == {"c1"}
        assert self.reopen(store, tmp_path).started(sid) == {"c1"}
        store.append(sid, [answer("c1")])
        assert store.started(sid) == set()
        store.mark_started(sid, "c2")
        store.replace(sid, store.load(sid))
        assert self.reopen(store, tmp_path).started(sid) == {"c2"}

    def test_marks_of_a_batch_a_later_reply_went_past_are_over(self, store: SessionStore,
                                                               tmp_path: Path) -> None:
        sid = self.new_id()
        store.append(sid, [calls("c1")])
        store.mark_started(sid, "c1")  # never answered: the process stopped
        store.append(sid, [a_user("something else"), calls("c1")])
        assert store.started(sid) == set()
        assert self.reopen(store, tmp_path).started(sid) == set()
        store.mark_started(sid, "c1")
        assert self.reopen(store, tmp_path).started(sid) == {"c1"}

    def test_replace_keeps_the_marks_of_calls_sharing_an_id(self, store: SessionStore,
                                                            tmp_path: Path) -> None:
        # two calls of one batch with one id are marked "<id> @ <call_key>" (the Agent)
        sid = self.new_id()
        store.append(sid, [a_user("go"), calls("d", "d", "e")])
        store.mark_started(sid, "d @ 1:1")
        store.replace(sid, store.load(sid))
        assert self.reopen(store, tmp_path).started(sid) == {"d @ 1:1"}
        store.replace(sid, [a_user("go"), calls("e")])
        assert store.started(sid) == set()

    def test_threads_append_concurrently(self, store: SessionStore) -> None:
        sid, writers, each = self.new_id(), 4, 25
        barrier = threading.Barrier(writers, timeout=WAIT)
        failures: list[BaseException] = []

        def write(n: int) -> None:
            try:
                barrier.wait()
                for i in range(each):
                    store.append(sid, [a_user(f"{n}:{i}")])
            except BaseException as exc:  # reported below
                failures.append(exc)

        threads = [threading.Thread(target=write, args=(n,)) for n in range(writers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(WAIT * 6)
        assert failures == []
        texts = [m.content[0].text for m in store.load(sid)  # type: ignore[union-attr]
                 if isinstance(m, UserMessage)]
        assert len(texts) == writers * each
        for n in range(writers):
            assert [t for t in texts if t.startswith(f"{n}:")] == [f"{n}:{i}" for i in range(each)]

    @settings(max_examples=40, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture,
                                     HealthCheck.differing_executors])  # per store class
    @given(batches=st.lists(st.lists(messages(), max_size=4), max_size=4))
    def test_every_message_round_trips(self, store: SessionStore,
                                       batches: list[list[AgentMessage]]) -> None:
        sid = self.new_id()
        for batch in batches:
            store.append(sid, batch)
        flat = [m for batch in batches for m in batch]
        assert messages_to_json(store.load(sid)) == messages_to_json(flat)
        store.replace(sid, flat[::-1])
        assert messages_to_json(store.load(sid)) == messages_to_json(flat[::-1])
        store.delete(sid)
