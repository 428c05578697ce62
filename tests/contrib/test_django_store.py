"""``DjangoStore`` keeps the store contract (``tests/sessions/conformance.py``), the
approvals' (``tests/sessions/test_approval_store.py``) and the budgets'
(``tests/test_policy.py``) on SQLite, PostgreSQL and MariaDB: the databases of
``django_settings.py``, created and migrated once per process, dropped at its end. The app's
migrations match its models."""

from __future__ import annotations

import io
import threading
from pathlib import Path

import pytest

from piagent.messages import ImageContent, TextContent, UserMessage
from piagent.sessions import SessionCorruptError, SessionStore

from ..conftest import WAIT, configure_django
from ..sessions.conformance import SessionStoreConformance, a_user, same

# the approvals' and budgets' contracts, run here on this module's ``store`` fixture
from ..sessions.test_approval_store import (  # noqa: F401
    test_a_decision_needs_an_approval_decision,
    test_a_repeated_call_id_waits_again,
    test_a_waiting_batch_its_decisions_and_held_results,
    test_every_durable_store_keeps_approvals,
    test_marking_again_replaces_and_clear_forgets,
    test_of_two_deciders_racing_exactly_one_completes_the_batch,
)
from ..test_policy import test_each_store_charges_in_its_own_method_and_no_charge_is_lost  # noqa: F401
from .conftest import run_agent_twice

configure_django()

from django.core.management import call_command  # noqa: E402

from piagent.contrib.django import DjangoStore  # noqa: E402


@pytest.fixture
def store(alias: str) -> DjangoStore:
    return DjangoStore(alias)


class TestDjangoStore(SessionStoreConformance):
    @pytest.fixture(autouse=True)
    def _alias(self, alias: str) -> None:
        self.alias = alias

    def make_store(self, tmp_path: Path) -> SessionStore:
        return DjangoStore(self.alias)

    def reopen(self, store: SessionStore, tmp_path: Path) -> SessionStore:
        return DjangoStore(self.alias)


def test_ids_differing_in_case_or_trailing_spaces_are_other_sessions(
        store: DjangoStore) -> None:
    # MariaDB's default collations fold case and ignore trailing spaces; lookups go by hash
    prefix = DjangoStore.__name__ + str(id(store))
    names = [f"{prefix}chat", f"{prefix}Chat", f"{prefix}chat ", f"{prefix}chät"]
    for name in names:
        store.append(name, [a_user(name)])
    for name in names:
        assert same(store.load(name), [a_user(name)])
    assert [s for s in store.session_ids() if s.startswith(prefix)] == sorted(names)
    store.charge_budget(prefix + "k", requests=1)
    assert store.charge_budget(prefix + "K", requests=1).requests == 1


def test_a_large_message_and_any_character_round_trip(store: DjangoStore) -> None:
    big = UserMessage([TextContent("🦜 é \x00 " * 30_000),
                       ImageContent("A" * 300_000, "image/png")], timestamp=1)
    store.append("big", [big])
    assert same(store.load("big"), [big])
    store.delete("big")


def test_an_undecodable_record_names_session_and_sequence(store: DjangoStore) -> None:
    from piagent.contrib.django.models import Record

    store.append("broken", [a_user("fine"), a_user("soon broken")])
    Record.objects.using(store.using).filter(session__session_id="broken", seq=1).update(
        data='{"role":"x"}')
    with pytest.raises(SessionCorruptError, match="'broken': record 1") as caught:
        store.load("broken")
    assert (caught.value.session_id, caught.value.seq) == ("broken", 1)
    store.delete("broken")


def test_threads_append_and_mark_one_session(store: DjangoStore) -> None:
    """Four threads (four connections) writing one session at once: nothing lost, each
    writer's messages in its order, no batch split, sequence numbers dense."""
    from piagent.contrib.django.models import Record

    sid = f"shared-{id(store)}"
    start = threading.Barrier(4, timeout=WAIT)
    failures: list[BaseException] = []

    def write(n: int) -> None:
        try:
            start.wait()
            for i in range(15):
                store.append(sid, [a_user(f"{n}:{i}"), a_user(f"{n}:{i}b")])
                if i % 5 == 0:
                    store.mark_started(sid, f"call-{n}-{i}")
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)
        # no close_all(): the store closes a thread's connection when the thread ends (an
        # open one dropped would warn, and warnings fail the tests)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT * 6)
    assert failures == []
    texts = [m.content[0].text for m in store.load(sid)]  # type: ignore[union-attr]
    for n in range(4):
        assert [t for t in texts if t.startswith(f"{n}:")] == [
            f"{n}:{i}{b}" for i in range(15) for b in ("", "b")]
    for k, text in enumerate(texts):
        if text.endswith("b"):
            assert texts[k - 1] == text[:-1]
    seqs = list(Record.objects.using(store.using).filter(session__session_id=sid)
                .order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(120 + 12))
    assert len(store.started(sid)) == 12
    store.delete(sid)


def test_the_migrations_match_the_models() -> None:
    out = io.StringIO()
    call_command("makemigrations", "piagent", check=True, dry_run=True, stdout=out)
    assert "No changes detected" in out.getvalue()


def test_wrong_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match=r"using='nowhere' is not in settings.DATABASES"):
        DjangoStore("nowhere")
    with pytest.raises(ValueError, match="using must name a database"):
        DjangoStore("")
    with pytest.raises(TypeError, match="tool_call_id must be a str"):
        DjangoStore().mark_started("s", 3)  # type: ignore[arg-type]




def test_an_agent_keeps_its_conversation(alias: str) -> None:
    run_agent_twice(lambda: DjangoStore(alias))
