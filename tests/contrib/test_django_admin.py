"""The app's admin (``piagent.contrib.django.admin``) through Django's test client, as a
superuser: the changelists load, a conversation's transcript shows tool calls, results,
images and errors with every value escaped (on SQLite, PostgreSQL and MariaDB), runs show
their state and events, and a waiting tool call is approved or denied on the digest of the
arguments shown, through the site's runner, which starts the continuation run.

Users, sessions and the admin's tables live in the ``default`` (SQLite) database; the app's
rows in ``PIAGENT_DATABASE``, the database under test."""

from __future__ import annotations

import hashlib
import html
import json
import re
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from piagent import Agent
from piagent.messages import (
    AssistantMessage,
    ImageContent,
    SystemMessage,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from piagent.policy import approval_digest
from piagent.runs import LocalRunner
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls
from piagent.tools import tool

from ..conftest import WAIT, configure_django
from .conftest import prepare_django_database

configure_django()

from django.conf import settings  # noqa: E402
from django.contrib.admin.models import LogEntry  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.contrib.auth.models import Permission  # noqa: E402
from django.test import Client, override_settings  # noqa: E402

from piagent.contrib.django import DjangoStore  # noqa: E402
from piagent.contrib.django.models import (  # noqa: E402
    Approval,
    Conversation,
    Record,
    Run,
    RunEvent,
    Session,
)

PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNg"
       "YGD4DwABBAEAwS2OUAAAAABJRU5ErkJggg==")  # one pixel
ADMIN = "/admin/piagent"

# --- the site's agent: asks to delete something, then reports the results -------------------

# guards _deleted: the names the tool deleted (the runs' threads append, the tests read)
_lock = threading.Lock()
_deleted: list[str] = []


def _answer(context: Any, options: Any) -> AssistantMessage:
    last = context.messages[-1]
    if isinstance(last, UserMessage):
        return assistant_tool_calls(("delete", {"name": "<b>report</b>"}, "c-delete"))
    results = [m for m in context.messages if isinstance(m, ToolResultMessage)]
    return assistant_text("results: " + "; ".join(
        f"{m.tool_name}={' '.join(getattr(c, 'text', '') for c in m.content)}"
        for m in results))


@tool(needs_approval=True)
def delete(name: str) -> str:
    """Delete a thing."""
    with _lock:
        _deleted.append(name)
    return f"deleted {name}"


def build_agent(session_id: str) -> Agent:
    """``PIAGENT_AGENTS["default"]`` of these tests."""
    scripted = ScriptedStreamFn([_answer] * 5)
    return Agent(model=scripted.model, stream_fn=scripted, tools=[delete],
                 system_prompt="admin tests")


# --- fixtures --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def site_tables() -> None:
    """Every app's tables in ``default``: users, sessions, the admin's log, the app's rows."""
    prepare_django_database("default")


def _site(alias: str) -> Any:
    return override_settings(ROOT_URLCONF="tests.contrib.django_admin_urls",
                             PIAGENT_DATABASE=alias,
                             PIAGENT_AGENTS={"default": f"{__name__}.build_agent"},
                             PIAGENT_LEASE_S=30, PIAGENT_RECOVER_EVERY_S=60)


@pytest.fixture
def sqlite_site(site_tables: None) -> Iterator[str]:
    """The admin on SQLite (``default``)."""
    with _site("default"):
        yield "default"


@pytest.fixture
def site(site_tables: None, alias: str) -> Iterator[str]:
    """The admin on each database in turn."""
    with _site(alias):
        yield alias


def _user(**flags: Any) -> Any:
    return get_user_model()._default_manager.create_user(
        f"u-{uuid.uuid4().hex[:12]}", password="x", **flags)


@pytest.fixture
def superuser(site_tables: None) -> Any:
    return get_user_model()._default_manager.create_superuser(
        f"admin-{uuid.uuid4().hex[:12]}", password="x")


@pytest.fixture
def admin_client(superuser: Any) -> Client:
    client = Client()
    client.force_login(superuser)
    return client


def key_of(session_id: str) -> str:
    """The app's lookup key of a session id (``Session.key``, ``Run.session_key``)."""
    return hashlib.sha256(session_id.encode("utf-8")).hexdigest()


def _sid() -> str:
    return f"admin-{uuid.uuid4().hex}"


def _messages(response: Any) -> list[str]:
    """The admin messages a followed response shows."""
    assert response.status_code == 200, (response.redirect_chain, response.content[:300])
    found = re.findall(r'<li class="(?:success|error|warning|info)">(.*?)</li>',
                       response.content.decode(), re.DOTALL)
    return [html.unescape(re.sub(r"<[^>]+>", "", m)) for m in found]


# --- what the admin shows ----------------------------------------------------------------------

def test_every_changelist_loads_and_escapes(sqlite_site: str, admin_client: Client,
                                            superuser: Any) -> None:
    store = DjangoStore(sqlite_site)
    sid = _sid()
    store.append(sid, [UserMessage("hello")])
    Conversation.objects.using(sqlite_site).create(
        key=key_of(sid), session_id=sid, user=superuser, title="<em>my chat</em>")
    store.charge_budget("user:<b>alice</b>", cost=0.25, tokens=12, requests=3)
    index = admin_client.get("/admin/")
    assert index.status_code == 200
    for model in ("session", "run", "approval", "budget"):
        assert f"{ADMIN}/{model}/" in index.content.decode()
        page = admin_client.get(f"{ADMIN}/{model}/")
        assert page.status_code == 200, (model, page.content[:500])
    conversations = admin_client.get(f"{ADMIN}/session/").content.decode()
    assert sid in conversations and superuser.get_username() in conversations
    assert "&lt;em&gt;my chat&lt;/em&gt;" in conversations and "<em>my chat" not in conversations
    budgets = admin_client.get(f"{ADMIN}/budget/").content.decode()
    assert "user:&lt;b&gt;alice&lt;/b&gt;" in budgets and "<b>alice" not in budgets
    assert "0.25" in budgets and ">12<" in budgets and ">3<" in budgets
    # read-only: nothing is added, changed or deleted here
    assert admin_client.get(f"{ADMIN}/session/add/").status_code == 403
    assert admin_client.get(f"{ADMIN}/budget/add/").status_code == 403


def test_the_transcript_shows_calls_results_images_and_errors_escaped(
        site: str, admin_client: Client) -> None:
    store = DjangoStore(site)
    sid = _sid()
    store.append(sid, [
        UserMessage([TextContent("<b>hello</b> & <script>alert(1)</script>"),
                     ImageContent(PNG, "image/png")]),
        AssistantMessage(content=[ThinkingContent("<i>pondering</i>"), TextContent("calling"),
                                  ToolCall(id="call-1", name="fetch",
                                           arguments={"url": "<a href='x'>"})],
                         stop_reason="toolUse"),
        ToolResultMessage(tool_call_id="call-1", tool_name="fetch",
                          content=[TextContent("<img src=x onerror=alert(2)>"),
                                   ImageContent(PNG, "image/jpeg")], is_error=True),
        AssistantMessage(content=[], stop_reason="error", error_message="boom <u>x</u>"),
        AssistantMessage(content=[TextContent("half")], stop_reason="aborted",
                         error_message="Request was aborted"),
        SystemMessage("new rules <hr>"),
        UserMessage([ImageContent('"><script>alert(3)</script>', "image/png"),
                     ImageContent(PNG, 'image/png"><script>')]),
    ])
    pk = Session.objects.using(site).get(key=key_of(sid)).pk
    page = admin_client.get(f"{ADMIN}/session/{pk}/change/")
    assert page.status_code == 200
    text = page.content.decode()
    # every role, in order
    positions = [text.index(f'id="record-{seq}"') for seq in range(7)]
    assert positions == sorted(positions)
    assert "&lt;b&gt;hello&lt;/b&gt; &amp; &lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "thinking: &lt;i&gt;pondering&lt;/i&gt;" in text
    assert "<strong>fetch</strong> <code>call-1</code>" in text
    assert html.escape(json.dumps({"url": "<a href='x'>"}, indent=2)) in text
    assert "&lt;img src=x onerror=alert(2)&gt;" in text
    assert "result is an error" in text
    assert "error: boom &lt;u&gt;x&lt;/u&gt;" in text
    assert "aborted: Request was aborted" in text
    assert "new rules &lt;hr&gt;" in text
    assert f'src="data:image/png;base64,{PNG}"' in text
    assert f'src="data:image/jpeg;base64,{PNG}"' in text
    assert text.count("data:image/") == 2  # the two images that are not images are described
    assert "that is not shown" in text
    for raw in ("<script>alert", "<b>hello", "<i>pondering", "<img src=x", "<u>x", "<hr>",
                "<a href='x'>"):
        assert raw not in text, raw


def test_a_run_shows_its_state_times_and_events_in_order(sqlite_site: str,
                                                         admin_client: Client) -> None:
    sid, now = _sid(), time.time()
    DjangoStore(sqlite_site).append(sid, [UserMessage("hi")])
    runs = Run.objects.using(sqlite_site)
    lost = runs.create(run_id=f"r-{uuid.uuid4().hex}", session_key=key_of(sid),
                       session_id=sid, state="running", owner="host:1:gone",
                       lease_expires_at=now - 5, created_at=now - 60, started_at=now - 59)
    failed = runs.create(run_id=f"r-{uuid.uuid4().hex}", session_key=key_of(sid),
                         session_id=sid, state="error", owner="host:2:r",
                         error_message="model <said> no", lease_expires_at=now - 100,
                         created_at=now - 200, started_at=now - 199, ended_at=now - 100)
    events = [{"type": "agent_start"},
              {"type": "message_end", "message": {"role": "user", "content": "<b>hi</b>"}},
              {"type": "tool_execution_start", "toolCallId": "c", "toolName": "look",
               "args": {"q": 1}},
              {"type": "tool_execution_end", "toolCallId": "c", "toolName": "look",
               "result": {}, "isError": True},
              {"type": "agent_end", "messages": []}]
    RunEvent.objects.using(sqlite_site).bulk_create(
        [RunEvent(run_id=lost.run_id, seq=i, data=json.dumps(e)) for i, e in enumerate(events)])
    listing = admin_client.get(f"{ADMIN}/run/?q={sid}").content.decode()
    assert lost.run_id in listing and failed.run_id in listing
    assert re.search(rf"{lost.run_id}.*?lost", listing, re.DOTALL)
    assert "model &lt;said&gt; no" in listing
    lost_only = admin_client.get(f"{ADMIN}/run/?q={sid}&state=lost").content.decode()
    assert lost.run_id in lost_only and failed.run_id not in lost_only
    page = admin_client.get(f"{ADMIN}/run/{lost.pk}/change/").content.decode()
    assert ">lost<" in page and "host:1:gone" in page
    order = [page.index(f"<code>{e['type']}</code>") for e in events]
    assert order == sorted(order)
    assert "user: &lt;b&gt;hi&lt;/b&gt;" in page and "<b>hi" not in page
    assert 'look {&quot;q&quot;: 1}' in page and "look (error)" in page
    session_pk = Session.objects.using(sqlite_site).get(key=key_of(sid)).pk
    assert f"{ADMIN}/session/{session_pk}/change/" in page
    conversation = admin_client.get(f"{ADMIN}/session/{session_pk}/change/").content.decode()
    assert f"{ADMIN}/run/{lost.pk}/change/" in conversation


# --- approvals -----------------------------------------------------------------------------------

def runner() -> LocalRunner:
    """A runner of another process, as it were: it starts the first run and waits for any
    (the admin decides through the site's own)."""
    return LocalRunner(DjangoStore(settings.PIAGENT_DATABASE), build_agent)


def _waiting(site: str) -> tuple[str, Any]:
    """A session whose run ended waiting for approval of ``delete``: (its id, the row)."""
    sid = _sid()
    run_id = runner().start(sid, "go")
    assert runner().wait(run_id, WAIT)
    assert runner().status(run_id).state == "waiting"
    row = Approval.objects.using(site).get(session__key=key_of(sid), kind="pending")
    return sid, row


def _form(page: str) -> dict[str, str]:
    fields = dict(re.findall(r'name="(tool_call_id|digest)" value="([^"]*)"', page))
    assert set(fields) == {"tool_call_id", "digest"}, page
    return fields


def _runs(site: str, sid: str) -> list[str]:
    return list(Run.objects.using(site).filter(session_key=key_of(sid)).order_by(
        "created_at").values_list("run_id", flat=True))


def test_approve_on_the_digest_shown_decides_and_starts_the_continuation(
        site: str, superuser: Any) -> None:
    admin_client = Client(enforce_csrf_checks=True)  # as a browser: the form's token
    admin_client.force_login(superuser)
    sid, row = _waiting(site)
    session_pk = Session.objects.using(site).get(key=key_of(sid)).pk
    conversation = admin_client.get(f"{ADMIN}/session/{session_pk}/change/").content.decode()
    assert f'<a href="{ADMIN}/approval/{row.pk}/change/">delete</a>' in conversation
    listing = admin_client.get(f"{ADMIN}/approval/").content.decode()
    assert f"{ADMIN}/approval/{row.pk}/change/" in listing
    assert "&lt;b&gt;report&lt;/b&gt;" in listing and "<b>report" not in listing
    page = admin_client.get(f"{ADMIN}/approval/{row.pk}/change/").content.decode()
    digest = approval_digest("delete", {"name": "<b>report</b>"})
    assert _form(page) == {"tool_call_id": runner().pending_approvals(sid)[0].call_key,
                           "digest": digest}
    assert "&quot;name&quot;: &quot;&lt;b&gt;report&lt;/b&gt;&quot;" in page
    assert "<b>report" not in page
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert token
    response = admin_client.post(f"{ADMIN}/approval/{row.pk}/change/",
                                 {**_form(page), "approve": "Approve", "reason": "fine",
                                  "csrfmiddlewaretoken": token.group(1)}, follow=True)
    said = " ".join(_messages(response))
    assert "approved" in said and "goes on" in said, said
    first, continuation = _runs(site, sid)
    assert continuation in said
    assert runner().wait(continuation, WAIT)
    assert runner().status(continuation).state == "done"
    assert "<b>report</b>" in _deleted
    last = DjangoStore(site).load(sid)[-1]
    assert isinstance(last, AssistantMessage)
    assert last.text == "results: delete=deleted <b>report</b>"
    assert not Approval.objects.using(site).filter(session__key=key_of(sid),
                                                   decision__isnull=True).exists()
    assert row.pk not in [int(pk) for pk in re.findall(
        r"/approval/(\d+)/change/", admin_client.get(f"{ADMIN}/approval/").content.decode())]
    logged = LogEntry.objects.filter(object_id=str(row.pk),
                                     content_type__model="approval").first()
    assert logged is not None and "Approved delete (c-delete)" in logged.get_change_message()


def test_a_stale_digest_is_refused_and_nothing_is_decided(sqlite_site: str,
                                                          admin_client: Client) -> None:
    sid, row = _waiting(sqlite_site)
    shown = _form(admin_client.get(f"{ADMIN}/approval/{row.pk}/change/").content.decode())
    stale = approval_digest("delete", {"name": "something else"})
    response = admin_client.post(f"{ADMIN}/approval/{row.pk}/change/",
                                 {**shown, "digest": stale, "approve": "Approve"}, follow=True)
    said = " ".join(_messages(response))
    assert "refused" in said and "nothing was decided" in said, said
    assert "does not match" in said
    assert [p.decision for p in runner().pending_approvals(sid)] == [None]
    assert len(_runs(sqlite_site, sid)) == 1
    # a form without the digest decides nothing either, nor one naming another call
    response = admin_client.post(f"{ADMIN}/approval/{row.pk}/change/",
                                 {"tool_call_id": shown["tool_call_id"], "deny": "Deny"},
                                 follow=True)
    assert "nothing was decided" in " ".join(_messages(response))
    response = admin_client.post(f"{ADMIN}/approval/{row.pk}/change/",
                                 {**shown, "tool_call_id": "c-delete-other", "deny": "Deny"},
                                 follow=True)
    assert "not '" in " ".join(_messages(response))
    assert [p.decision for p in runner().pending_approvals(sid)] == [None]
    # the page shows the digest it was shown with, and with it the call is denied
    response = admin_client.post(f"{ADMIN}/approval/{row.pk}/change/",
                                 {**shown, "deny": "Deny", "reason": "not <that>"}, follow=True)
    assert "denied" in " ".join(_messages(response))
    continuation = _runs(sqlite_site, sid)[-1]
    assert runner().wait(continuation, WAIT)
    result = next(m for m in DjangoStore(sqlite_site).load(sid)
                  if isinstance(m, ToolResultMessage))
    assert result.is_error and "not <that>" in result.content[0].text  # type: ignore[union-attr]


def test_the_changelist_actions_carry_each_rows_digest(sqlite_site: str,
                                                       admin_client: Client) -> None:
    sid, row = _waiting(sqlite_site)
    listing = admin_client.get(f"{ADMIN}/approval/").content.decode()
    call = re.search(rf'name="piagent-call-{row.pk}" value="([^"]*)"', listing)
    digest = re.search(rf'name="piagent-digest-{row.pk}" value="([^"]*)"', listing)
    assert call and digest
    posted = {"action": "approve_selected", "_selected_action": [str(row.pk)],
              f"piagent-call-{row.pk}": call.group(1)}
    refused = admin_client.post(f"{ADMIN}/approval/", {
        **posted, f"piagent-digest-{row.pk}": "0" * 64}, follow=True)
    assert "refused" in " ".join(_messages(refused))
    assert [p.decision for p in runner().pending_approvals(sid)] == [None]
    approved = admin_client.post(f"{ADMIN}/approval/", {
        **posted, f"piagent-digest-{row.pk}": digest.group(1)}, follow=True)
    assert "approved" in " ".join(_messages(approved))
    assert runner().wait(_runs(sqlite_site, sid)[-1], WAIT)


def test_only_staff_with_the_change_permission_decide(sqlite_site: str) -> None:
    sid, row = _waiting(sqlite_site)
    url = f"{ADMIN}/approval/{row.pk}/change/"
    form = {"tool_call_id": row.tool_call_id,
            "digest": approval_digest("delete", {"name": "<b>report</b>"}), "approve": "1"}
    anonymous = Client()
    assert anonymous.get(url).status_code == 302
    assert anonymous.post(url, form).status_code == 302
    visitor = Client()
    visitor.force_login(_user())
    assert visitor.get(url)["Location"].startswith("/admin/login/")
    assert visitor.post(url, form).status_code == 302
    viewer = _user(is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_approval",
                                                       content_type__app_label="piagent"))
    staff = Client()
    staff.force_login(viewer)
    page = staff.get(url)
    assert page.status_code == 200 and 'name="digest"' not in page.content.decode()
    assert staff.post(url, form).status_code == 403
    assert staff.post(f"{ADMIN}/approval/", {
        "action": "approve_selected", "_selected_action": [str(row.pk)]}).status_code in (
        200, 302, 403)
    # a superuser's form posted from elsewhere (no CSRF token) decides nothing
    forged = Client(enforce_csrf_checks=True)
    forged.force_login(get_user_model()._default_manager.create_superuser(
        f"admin-{uuid.uuid4().hex[:12]}", password="x"))
    assert forged.post(url, form).status_code == 403
    assert [p.decision for p in runner().pending_approvals(sid)] == [None]
    assert len(_runs(sqlite_site, sid)) == 1


def test_arguments_changed_in_the_transcript_are_refused(sqlite_site: str,
                                                        admin_client: Client) -> None:
    sid, row = _waiting(sqlite_site)
    shown = _form(admin_client.get(f"{ADMIN}/approval/{row.pk}/change/").content.decode())
    # the stored call now asks for something else than what the page showed
    records = Record.objects.using(sqlite_site).filter(session__key=key_of(sid),
                                                       kind="assistant")
    record = records.get()
    record.data = record.data.replace("<b>report</b>", "everything")
    record.save(using=sqlite_site)
    response = admin_client.post(f"{ADMIN}/approval/{row.pk}/change/",
                                 {**shown, "approve": "Approve"}, follow=True)
    said = " ".join(_messages(response))
    assert "refused" in said and "arguments changed" in said, said
    assert [p.decision for p in runner().pending_approvals(sid)] == [None]
    assert len(_runs(sqlite_site, sid)) == 1
    assert "everything" not in _deleted


def test_a_long_transcript_shows_its_latest_messages(sqlite_site: str,
                                                     admin_client: Client) -> None:
    sid = _sid()
    DjangoStore(sqlite_site).append(sid, [UserMessage(f"message {i}") for i in range(1003)])
    pk = Session.objects.using(sqlite_site).get(key=key_of(sid)).pk
    page = admin_client.get(f"{ADMIN}/session/{pk}/change/").content.decode()
    assert "3 earlier messages not shown (the latest 1000 are)" in page
    assert [int(n) for n in re.findall(r'id="record-(\d+)"', page)] == list(range(3, 1003))


def test_a_long_run_shows_its_first_events(sqlite_site: str, admin_client: Client) -> None:
    sid, now = _sid(), time.time()
    run = Run.objects.using(sqlite_site).create(
        run_id=f"r-{uuid.uuid4().hex}", session_key=key_of(sid), session_id=sid, state="done",
        owner="host:1:r", lease_expires_at=now, created_at=now, ended_at=now)
    update = json.dumps({"type": "message_update", "assistantMessageEvent": {
        "type": "text_delta", "delta": "<w>"}})
    RunEvent.objects.using(sqlite_site).bulk_create(
        [RunEvent(run_id=run.run_id, seq=i, data=update) for i in range(2003)])
    page = admin_client.get(f"{ADMIN}/run/{run.pk}/change/").content.decode()
    assert "3 later events not shown (the first 2000 are)" in page
    assert page.count("text_delta &lt;w&gt;") == 2000 and "<w>" not in page
