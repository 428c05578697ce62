"""The admin's decisions on tool calls waiting for approval: Approve or Deny on the digest
of the arguments shown (on the call's page, or the changelist's actions), through the site's
runner, which starts the continuation run (SQLite, PostgreSQL, MariaDB); a stale digest,
changed arguments, another call's key, a missing permission or a forged post decide nothing;
and in headless Chromium: sign in, read the transcript, approve."""

from __future__ import annotations

import re
import shutil
import uuid
from typing import Any

import pytest

from piagent.messages import AssistantMessage, ToolResultMessage
from piagent.policy import approval_digest
from piagent.runs import LocalRunner

from ..conftest import WAIT, configure_django, headless_chromium, serving_wsgi, unavailable
from .conftest import ADMIN, ADMIN_DELETED, admin_agent, admin_messages, key_of, new_session_id

configure_django()

from django.conf import settings  # noqa: E402
from django.contrib.admin.models import LogEntry  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.contrib.auth.models import Permission  # noqa: E402
from django.test import Client  # noqa: E402

from piagent.contrib.django import DjangoStore  # noqa: E402
from piagent.contrib.django.models import Approval, Record, Run, Session  # noqa: E402


def _user(**flags: Any) -> Any:
    return get_user_model()._default_manager.create_user(
        f"u-{uuid.uuid4().hex[:12]}", password="x", **flags)


# --- approvals -----------------------------------------------------------------------------------

def runner() -> LocalRunner:
    """A runner of another process, as it were: it starts the first run and waits for any
    (the admin decides through the site's own)."""
    return LocalRunner(DjangoStore(settings.PIAGENT_DATABASE), admin_agent)


def _waiting(site: str) -> tuple[str, Any]:
    """A session whose run ended waiting for approval of ``delete``: (its id, the row)."""
    sid = new_session_id()
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
        admin_db: str, superuser: Any) -> None:
    site = admin_db
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
    said = " ".join(admin_messages(response))
    assert "approved" in said and "goes on" in said, said
    first, continuation = _runs(site, sid)
    assert continuation in said
    assert runner().wait(continuation, WAIT)
    assert runner().status(continuation).state == "done"
    assert "<b>report</b>" in ADMIN_DELETED
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


def test_a_stale_digest_is_refused_and_nothing_is_decided(admin_sqlite: str,
                                                          admin_client: Client) -> None:
    sid, row = _waiting(admin_sqlite)
    shown = _form(admin_client.get(f"{ADMIN}/approval/{row.pk}/change/").content.decode())
    stale = approval_digest("delete", {"name": "something else"})
    response = admin_client.post(f"{ADMIN}/approval/{row.pk}/change/",
                                 {**shown, "digest": stale, "approve": "Approve"}, follow=True)
    said = " ".join(admin_messages(response))
    assert "refused" in said and "nothing was decided" in said, said
    assert "does not match" in said
    assert [p.decision for p in runner().pending_approvals(sid)] == [None]
    assert len(_runs(admin_sqlite, sid)) == 1
    # a form without the digest decides nothing either, nor one naming another call
    response = admin_client.post(f"{ADMIN}/approval/{row.pk}/change/",
                                 {"tool_call_id": shown["tool_call_id"], "deny": "Deny"},
                                 follow=True)
    assert "nothing was decided" in " ".join(admin_messages(response))
    response = admin_client.post(f"{ADMIN}/approval/{row.pk}/change/",
                                 {**shown, "tool_call_id": "c-delete-other", "deny": "Deny"},
                                 follow=True)
    assert "not '" in " ".join(admin_messages(response))
    assert [p.decision for p in runner().pending_approvals(sid)] == [None]
    # the page shows the digest it was shown with, and with it the call is denied
    response = admin_client.post(f"{ADMIN}/approval/{row.pk}/change/",
                                 {**shown, "deny": "Deny", "reason": "not <that>"}, follow=True)
    assert "denied" in " ".join(admin_messages(response))
    continuation = _runs(admin_sqlite, sid)[-1]
    assert runner().wait(continuation, WAIT)
    result = next(m for m in DjangoStore(admin_sqlite).load(sid)
                  if isinstance(m, ToolResultMessage))
    assert result.is_error and "not <that>" in result.content[0].text  # type: ignore[union-attr]


def test_the_changelist_actions_carry_each_rows_digest(admin_sqlite: str,
                                                       admin_client: Client) -> None:
    sid, row = _waiting(admin_sqlite)
    listing = admin_client.get(f"{ADMIN}/approval/").content.decode()
    call = re.search(rf'name="piagent-call-{row.pk}" value="([^"]*)"', listing)
    digest = re.search(rf'name="piagent-digest-{row.pk}" value="([^"]*)"', listing)
    assert call and digest
    posted = {"action": "approve_selected", "_selected_action": [str(row.pk)],
              f"piagent-call-{row.pk}": call.group(1)}
    refused = admin_client.post(f"{ADMIN}/approval/", {
        **posted, f"piagent-digest-{row.pk}": "0" * 64}, follow=True)
    assert "refused" in " ".join(admin_messages(refused))
    assert [p.decision for p in runner().pending_approvals(sid)] == [None]
    approved = admin_client.post(f"{ADMIN}/approval/", {
        **posted, f"piagent-digest-{row.pk}": digest.group(1)}, follow=True)
    assert "approved" in " ".join(admin_messages(approved))
    assert runner().wait(_runs(admin_sqlite, sid)[-1], WAIT)


def test_only_staff_with_the_change_permission_decide(admin_sqlite: str) -> None:
    sid, row = _waiting(admin_sqlite)
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
    assert len(_runs(admin_sqlite, sid)) == 1


def test_arguments_changed_in_the_transcript_are_refused(admin_sqlite: str,
                                                        admin_client: Client) -> None:
    sid, row = _waiting(admin_sqlite)
    shown = _form(admin_client.get(f"{ADMIN}/approval/{row.pk}/change/").content.decode())
    # the stored call now asks for something else than what the page showed
    records = Record.objects.using(admin_sqlite).filter(session__key=key_of(sid),
                                                       kind="assistant")
    record = records.get()
    record.data = record.data.replace("<b>report</b>", "everything")
    record.save(using=admin_sqlite)
    response = admin_client.post(f"{ADMIN}/approval/{row.pk}/change/",
                                 {**shown, "approve": "Approve"}, follow=True)
    said = " ".join(admin_messages(response))
    assert "refused" in said and "arguments changed" in said, said
    assert [p.decision for p in runner().pending_approvals(sid)] == [None]
    assert len(_runs(admin_sqlite, sid)) == 1
    assert "everything" not in ADMIN_DELETED


# --- in a browser ------------------------------------------------------------------------------

@pytest.mark.browser
def test_in_a_browser_the_admin_shows_the_transcript_and_approves(admin_sqlite: str) -> None:
    if shutil.which("chromium") is None and shutil.which("chromium-browser") is None or \
            shutil.which("chromedriver") is None:
        unavailable("the admin's browser test needs chromium and chromedriver on PATH "
                    "(run .ci/install-browser.sh)")
    from django.core.handlers.wsgi import WSGIHandler
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    name = f"admin-{uuid.uuid4().hex[:12]}"
    get_user_model()._default_manager.create_superuser(name, password="pw-" + name)
    sid, row = _waiting(admin_sqlite)
    session_pk = Session.objects.using(admin_sqlite).get(key=key_of(sid)).pk
    with serving_wsgi(WSGIHandler(), "test-django-admin") as url, \
            headless_chromium() as driver:
        driver.get(f"{url}/admin/login/?next=/admin/piagent/session/{session_pk}/change/")
        driver.find_element(By.NAME, "username").send_keys(name)
        driver.find_element(By.NAME, "password").send_keys("pw-" + name)
        driver.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
        WebDriverWait(driver, 2 * WAIT).until(
            lambda d: d.find_elements(By.CSS_SELECTOR, ".piagent-transcript"))
        transcript = driver.find_element(By.CSS_SELECTOR, ".piagent-transcript").text
        assert "tool call delete c-delete" in transcript
        assert '"name": "<b>report</b>"' in transcript  # shown as text, not as markup
        driver.find_element(By.LINK_TEXT, "delete").click()  # the call waiting for approval
        assert driver.find_element(By.CSS_SELECTOR, ".piagent-digest").text == \
            approval_digest("delete", {"name": "<b>report</b>"})
        driver.find_element(By.NAME, "reason").send_keys("go ahead")
        driver.find_element(By.NAME, "approve").click()
        WebDriverWait(driver, 2 * WAIT).until(
            lambda d: d.find_elements(By.CSS_SELECTOR, ".messagelist .success"))
        said = driver.find_element(By.CSS_SELECTOR, ".messagelist .success").text
        assert "approved" in said
        continuation = _runs(admin_sqlite, sid)[-1]
        assert continuation in said
        assert runner().wait(continuation, WAIT)
        driver.find_element(By.LINK_TEXT, continuation).click()  # the runs, filtered
        driver.get(f"{url}/admin/piagent/session/{session_pk}/change/")
        transcript = driver.find_element(By.CSS_SELECTOR, ".piagent-transcript").text
        assert "results: delete=deleted <b>report</b>" in transcript
