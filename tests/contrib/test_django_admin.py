"""The app's admin (``piagent.contrib.django.admin``) through Django's test client, as a
superuser: the changelists load, read-only; a conversation's transcript shows tool calls,
results, images and errors with every value escaped (on SQLite, PostgreSQL and MariaDB);
runs show their state (lost past the lease) and their events in order; long transcripts and
runs are cut with a note. The decisions: test_django_admin_approvals.py."""

from __future__ import annotations

import html
import json
import re
import time
import uuid
from typing import Any

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

from ..conftest import configure_django
from .conftest import ADMIN, key_of, new_session_id

configure_django()

from django.test import Client  # noqa: E402

from piagent.contrib.django import DjangoStore  # noqa: E402
from piagent.contrib.django.models import Conversation, Run, RunEvent, Session  # noqa: E402

PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNg"
       "YGD4DwABBAEAwS2OUAAAAABJRU5ErkJggg==")  # one pixel


# --- what the admin shows ----------------------------------------------------------------------

def test_every_changelist_loads_and_escapes(admin_sqlite: str, admin_client: Client,
                                            superuser: Any) -> None:
    store = DjangoStore(admin_sqlite)
    sid = new_session_id()
    store.append(sid, [UserMessage("hello")])
    Conversation.objects.using(admin_sqlite).create(
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
        admin_db: str, admin_client: Client) -> None:
    site = admin_db
    store = DjangoStore(site)
    sid = new_session_id()
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


def test_a_run_shows_its_state_times_and_events_in_order(admin_sqlite: str,
                                                         admin_client: Client) -> None:
    sid, now = new_session_id(), time.time()
    DjangoStore(admin_sqlite).append(sid, [UserMessage("hi")])
    runs = Run.objects.using(admin_sqlite)
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
    RunEvent.objects.using(admin_sqlite).bulk_create(
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
    session_pk = Session.objects.using(admin_sqlite).get(key=key_of(sid)).pk
    assert f"{ADMIN}/session/{session_pk}/change/" in page
    conversation = admin_client.get(f"{ADMIN}/session/{session_pk}/change/").content.decode()
    assert f"{ADMIN}/run/{lost.pk}/change/" in conversation


def test_a_long_transcript_shows_its_latestadmin_messages(admin_sqlite: str,
                                                     admin_client: Client) -> None:
    sid = new_session_id()
    DjangoStore(admin_sqlite).append(sid, [UserMessage(f"message {i}") for i in range(1003)])
    pk = Session.objects.using(admin_sqlite).get(key=key_of(sid)).pk
    page = admin_client.get(f"{ADMIN}/session/{pk}/change/").content.decode()
    assert "3 earlier messages not shown (the latest 1000 are)" in page
    assert [int(n) for n in re.findall(r'id="record-(\d+)"', page)] == list(range(3, 1003))


def test_a_long_run_shows_its_first_events(admin_sqlite: str, admin_client: Client) -> None:
    sid, now = new_session_id(), time.time()
    run = Run.objects.using(admin_sqlite).create(
        run_id=f"r-{uuid.uuid4().hex}", session_key=key_of(sid), session_id=sid, state="done",
        owner="host:1:r", lease_expires_at=now, created_at=now, ended_at=now)
    update = json.dumps({"type": "message_update", "assistantMessageEvent": {
        "type": "text_delta", "delta": "<w>"}})
    RunEvent.objects.using(admin_sqlite).bulk_create(
        [RunEvent(run_id=run.run_id, seq=i, data=update) for i in range(2003)])
    page = admin_client.get(f"{ADMIN}/run/{run.pk}/change/").content.decode()
    assert "3 later events not shown (the first 2000 are)" in page
    assert page.count("text_delta &lt;w&gt;") == 2000 and "<w>" not in page
