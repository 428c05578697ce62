"""The app's views (``piagent.contrib.django.urls``) with Django's test ``Client`` and, for the
stream, a real server: login, CSRF, a user's own conversations only (404 for another's, in
every view), a scripted chat streaming text and tool events, stop, steer, approve and deny
with the digest, a reload resuming after ``Last-Event-ID``. The site's settings:
``test_django_site.py``."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from piagent.testing import assistant_text, assistant_tool_calls
from piagent.tools import AgentTool, AgentToolResult, ToolUpdateFn, tool

from ..conftest import WAIT, Gate, configure_django, serving_wsgi
from .conftest import Site, sse_frames

configure_django()

from django.core.exceptions import ImproperlyConfigured  # noqa: E402
from django.test import Client, override_settings  # noqa: E402

WORKER = "X-Piagent-Worker"


def counting_tool() -> AgentTool:
    @tool
    def count(n: int, on_update: ToolUpdateFn) -> AgentToolResult:
        """Count to n.

        Args:
            n: how far.
        """
        for i in range(1, n + 1):
            on_update(AgentToolResult(content=[], details={"step": i, "of": n}))
        return AgentToolResult(content=[], details={"counted": n})

    return count


def types(events: list[tuple[str, dict[str, Any]]]) -> list[str]:
    return [e["type"] for _, e in events]


# --- the chat ----------------------------------------------------------------------------------


def test_a_scripted_chat_streams_text_and_tool_events_and_keeps_the_transcript(
        site: Site) -> None:
    site.use([assistant_tool_calls(("count", {"n": 3}), text="Counting. "),
              assistant_text("Counted to three.")], [counting_tool()])
    browser = site.browser()
    key = browser.new()
    page = browser.client.get(f"/agent/c/{key}/")
    assert page.status_code == 200 and b"piagent-config" in page.content
    config = json.loads(page.content.decode().split('id="piagent-config" type="application/'
                                                    'json">', 1)[1].split("</script>", 1)[0])
    assert config["send"] == f"/agent/c/{key}/send/"
    assert config["events"] == f"/agent/c/{key}/events/__run__/"
    run_id = browser.send(key, "count to three, please")
    events = browser.events(key, run_id)
    kinds = types(events)
    assert kinds[0] == "agent_start" and kinds[-1] == "agent_end"
    assert kinds.count("tool_execution_update") == 3
    deltas = "".join(e["assistantMessageEvent"]["delta"] for _, e in events
                     if e["type"] == "message_update"
                     and e["assistantMessageEvent"]["type"] == "text_delta")
    assert deltas == "Counting. Counted to three."
    assert [i for i, _ in events] == sorted({i for i, _ in events}, key=events_order(events))
    shown = browser.history(key)
    assert shown["run"] == {"id": run_id, "state": "done"}
    assert [m["role"] for m in shown["messages"]] == ["user", "assistant", "toolResult",
                                                      "assistant"]
    assert shown["approvals"] == []
    listed = browser.client.get("/agent/")
    assert b"count to three, please" in listed.content  # the title, in the list


def events_order(events: list[tuple[str, dict[str, Any]]]) -> Any:
    order = {i: n for n, (i, _) in enumerate(events)}
    return order.__getitem__


def test_sending_while_a_run_is_live_is_409_and_stop_aborts_it(site: Site) -> None:
    gate = Gate()
    site.use([assistant_tool_calls(("gate", {})), assistant_text("never")], [gate.tool])
    browser = site.browser()
    key = browser.new()
    run_id = browser.send(key, "wait at the gate")
    assert gate.started.wait(WAIT)
    busy = browser.post(f"/agent/c/{key}/send/", {"message": "again"})
    assert busy.status_code == 409 and "error" in busy.json()
    assert browser.history(key)["messages"] == []  # the live run's prompt is in its events
    stopped = browser.post(f"/agent/c/{key}/stop/")
    assert stopped.status_code == 200
    assert stopped.json() == {"stopped": run_id, "settled": True}
    assert gate.aborted.is_set()
    assert types(browser.events(key, run_id))[-1] == "agent_end"
    assert browser.history(key)["run"]["state"] == "aborted"
    again = browser.post(f"/agent/c/{key}/stop/")
    assert again.json() == {"stopped": None, "settled": True}
    nothing = browser.post(f"/agent/c/{key}/steer/", {"text": "hello?"})
    assert nothing.status_code == 409


def test_a_steering_message_reaches_the_live_run(site: Site) -> None:
    gate = Gate()
    fn = site.use([assistant_tool_calls(("gate", {})), assistant_text("steered")],
                  [gate.tool])
    browser = site.browser()
    key = browser.new()
    run_id = browser.send(key, "wait at the gate")
    assert gate.started.wait(WAIT)
    steered = browser.post(f"/agent/c/{key}/steer/", {"text": "go left"})
    assert steered.status_code == 200 and steered.json() == {"ok": True}
    gate.opened.set()
    events = browser.events(key, run_id)
    users = [e["message"] for _, e in events
             if e["type"] == "message_start" and e["message"]["role"] == "user"]
    assert [m["content"][0]["text"] for m in users] == ["wait at the gate", "go left"]
    last_request = fn.calls[-1]
    assert "go left" in json.dumps([getattr(m, "content", "") for m in
                                    last_request.context.messages], default=str)
    roles = [m["role"] for m in browser.history(key)["messages"]]
    assert roles == ["user", "assistant", "toolResult", "user", "assistant"]


def deleting_tool() -> AgentTool:
    @tool(needs_approval=True)
    def delete_note(title: str) -> str:
        """Delete a note.

        Args:
            title: which.
        """
        return f"deleted {title}"

    return delete_note


@pytest.mark.parametrize("approved", [True, False], ids=["approve", "deny"])
def test_a_waiting_call_is_decided_with_its_digest(site: Site, approved: bool) -> None:
    site.use([assistant_tool_calls(("delete_note", {"title": "shopping"})),
              assistant_text("as you wish")], [deleting_tool()])
    browser = site.browser()
    key = browser.new()
    run_id = browser.send(key, "delete note shopping")
    events = browser.events(key, run_id)
    (request,) = [e for _, e in events if e["type"] == "tool_approval_request"]
    shown = browser.history(key)
    assert shown["run"]["state"] == "waiting"
    (pending,) = shown["approvals"]
    assert pending["digest"] == request["digest"] and pending["decision"] is None
    busy = browser.post(f"/agent/c/{key}/send/", {"message": "and another"})
    assert busy.status_code == 409  # calls wait for a decision
    path = f"/agent/c/{key}/{'approve' if approved else 'deny'}/"
    wrong = browser.post(path, {"tool_call_id": pending["toolCallId"], "digest": "0" * 64})
    assert wrong.status_code == 409 and "digest" in wrong.json()["error"]
    missing = browser.post(path, {"tool_call_id": pending["toolCallId"]})
    assert missing.status_code == 400
    decided = browser.post(path, {"tool_call_id": pending["toolCallId"],
                                  "digest": pending["digest"]})
    assert decided.status_code == 200, decided.content
    then = decided.json()["run_id"]
    assert then and then != run_id
    assert types(browser.events(key, then))[-1] == "agent_end"
    twice = browser.post(path, {"tool_call_id": pending["toolCallId"],
                                "digest": pending["digest"]})
    assert twice.status_code == 409
    messages = browser.history(key)["messages"]
    result = next(m for m in messages if m["role"] == "toolResult")
    assert result["isError"] is (not approved)
    assert ("deleted shopping" in json.dumps(result)) is approved
    assert messages[-1]["content"][0]["text"] == "as you wish"


# --- who may see what --------------------------------------------------------------------------


def test_another_users_conversation_is_404_in_every_view(site: Site) -> None:
    site.use([assistant_text("mine")])
    owner, other = site.browser(), site.browser()
    key = owner.new()
    run_id = owner.send(key, "hello")
    assert types(owner.events(key, run_id))[-1] == "agent_end"
    body = {"message": "x", "text": "x", "tool_call_id": "call_1", "digest": "d"}
    gets = [f"/agent/c/{key}/", f"/agent/c/{key}/history/",
            f"/agent/c/{key}/events/{run_id}/"]
    posts = [f"/agent/c/{key}/{name}/" for name in ("send", "steer", "stop", "approve",
                                                     "deny")]
    for url in gets:
        response = other.client.get(url)
        assert response.status_code == 404, url
        assert response[WORKER].isdigit()
    for url in posts:
        response = other.post(url, body)
        assert response.status_code == 404, url
    assert f"/agent/c/{key}/".encode() not in other.client.get("/agent/").content
    # the owner's run under another conversation of the owner is no run of it either
    second = owner.new()
    assert owner.client.get(f"/agent/c/{second}/events/{run_id}/").status_code == 404
    assert owner.client.get(f"/agent/c/{key}/events/{'f' * 32}/").status_code == 404


def test_an_anonymous_request_is_sent_to_login_or_refused(site: Site) -> None:
    site.use([assistant_text("hi")])
    anonymous = Client(enforce_csrf_checks=True)
    for url in ("/agent/", "/agent/c/abc/", "/agent/c/abc/history/"):
        response = anonymous.get(url)
        assert response.status_code == 302, url
        assert response["Location"] == f"/login/?next={url}"
        assert response[WORKER].isdigit()
    assert anonymous.post("/agent/c/abc/send/", "{}",
                          content_type="application/json").status_code == 302
    with override_settings(PIAGENT_LOGIN_REQUIRED=False):
        assert anonymous.get("/agent/").status_code == 403
    with override_settings(PIAGENT_LOGIN_REQUIRED="yes"), \
            pytest.raises(ImproperlyConfigured, match="PIAGENT_LOGIN_REQUIRED"):
        anonymous.get("/agent/")


def test_a_new_project_without_a_login_page_signs_in_on_the_apps_own(site: Site) -> None:
    """``LOGIN_URL`` left at Django's default, which nothing of the site answers: an
    anonymous visitor is sent to the app's sign-in page, which signs any active user in
    (not only staff, as the admin's would) and goes on to the chat; a site's own
    ``LOGIN_URL`` wins."""
    from django.conf import global_settings
    from django.contrib.auth import get_user_model

    site.use([assistant_text("hi")])
    get_user_model().objects.create_user("ada-" + uuid.uuid4().hex[:8], password="pw")
    name = get_user_model().objects.latest("pk").get_username()
    visitor = Client(enforce_csrf_checks=True)
    with override_settings(LOGIN_URL=global_settings.LOGIN_URL):
        response = visitor.get("/agent/c/abc/")
        assert response.status_code == 302
        assert response["Location"] == "/agent/login/?next=/agent/c/abc/"
        page = visitor.get(response["Location"])
        assert page.status_code == 200 and b'id="sign-in"' in page.content
        token = page.cookies["csrftoken"].value
        wrong = visitor.post("/agent/login/", {"username": name, "password": "no",
                                               "next": "/agent/", "csrfmiddlewaretoken": token})
        assert wrong.status_code == 200 and b'id="login-error"' in wrong.content
        signed = visitor.post("/agent/login/", {"username": name, "password": "pw",
                                                "next": "/agent/",
                                                "csrfmiddlewaretoken": token})
        assert signed.status_code == 302 and signed["Location"] == "/agent/"
        assert visitor.get("/agent/").status_code == 200
    assert Client().get("/agent/")["Location"] == "/login/?next=/agent/"  # the site's own


def test_a_post_without_the_csrf_token_is_refused(site: Site) -> None:
    site.use([assistant_text("hi")])
    browser = site.browser()
    key = browser.new()
    for name in ("send", "steer", "stop", "approve", "deny"):
        response = browser.client.post(f"/agent/c/{key}/{name}/", json.dumps({"message": "x"}),
                                       content_type="application/json")
        assert response.status_code == 403, name
        assert response[WORKER].isdigit()
    refused = browser.client.post("/agent/new/")
    assert refused.status_code == 403
    assert browser.history(key)["run"] is None  # nothing ran


def test_bad_bodies_and_methods(site: Site) -> None:
    site.use([assistant_text("hi")])
    browser = site.browser()
    key = browser.new()
    assert browser.post(f"/agent/c/{key}/send/", {"message": "  "}).status_code == 400
    bad = browser.client.post(f"/agent/c/{key}/send/", "[1", content_type="application/json",
                              headers={"X-CSRFToken": browser.token})
    assert bad.status_code == 400 and "JSON" in bad.json()["error"]
    assert browser.client.get(f"/agent/c/{key}/send/").status_code == 405
    assert browser.post("/agent/").status_code == 405
    made = browser.client.post("/agent/new/", json.dumps({"agent": "nobody"}),
                               content_type="application/json",
                               headers={"X-CSRFToken": browser.token})
    assert made.status_code == 400 and "'default'" in made.json()["error"]
    made = browser.client.post("/agent/new/", "{}", content_type="application/json",
                               headers={"X-CSRFToken": browser.token})
    assert made.status_code == 201 and made.json()["url"].startswith("/agent/c/")


# --- the stream through a real server ----------------------------------------------------------


def test_a_reload_resumes_the_stream_after_last_event_id(site: Site) -> None:
    import requests
    from django.core.handlers.wsgi import WSGIHandler

    gate = Gate()
    site.use([assistant_tool_calls(("gate", {}), text="Waiting. "), assistant_text("Through.")],
             [gate.tool], sqlite_store=True)  # PIAGENT_STORE's store, streamed the same
    browser = site.browser()
    key = browser.new()
    run_id = browser.send(key, "through the gate")
    assert gate.started.wait(WAIT)
    with serving_wsgi(WSGIHandler(), "test-django-views") as url, requests.Session() as http:
        http.cookies.update({k: v.value for k, v in browser.client.cookies.items()})
        events_url = f"{url}/agent/c/{key}/events/{run_id}/"
        seen: list[tuple[str, dict[str, Any]]] = []
        with http.get(events_url, stream=True, timeout=WAIT) as first:
            assert first.status_code == 200 and first.headers[WORKER].isdigit()
            for event_id, event in sse_frames(first.iter_content(None)):
                if event_id is not None and event is not None:
                    seen.append((event_id, event))
                if event is not None and event["type"] == "tool_execution_start":
                    break  # the page reloads mid-run
        gate.opened.set()
        with http.get(events_url, stream=True, timeout=WAIT,
                      headers={"Last-Event-ID": seen[-1][0]}) as second:
            rest = [(i, e) for i, e in sse_frames(second.iter_content(None))
                    if i is not None and e is not None]
        assert {i for i, _ in seen}.isdisjoint({i for i, _ in rest})
        everything = types(seen + rest)
        assert everything[0] == "agent_start" and everything[-1] == "agent_end"
        assert everything.count("agent_start") == 1
        assert types(browser.events(key, run_id)) == everything  # nothing lost, nothing twice
        bad = http.get(events_url, headers={"Last-Event-ID": "nonsense"}, timeout=WAIT)
        assert bad.status_code == 400
