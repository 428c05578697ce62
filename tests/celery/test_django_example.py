"""``examples/django_celery`` with real processes: the Django web process (``manage.py
runserver``), a Celery worker (``celery -A tasks worker``), Redis and PostgreSQL.

Two browsers (two cookie jars) chat at once: each run executes on the worker, each page
streams its own run from the web process with ``id:`` lines and resumes after
``Last-Event-ID``; Stop aborts a run on the worker; each transcript is the user's own. A
worker killed with SIGKILL mid-run has its run resumed by another worker within
``lease_s + 10`` s with the example's broker settings (``visibility_timeout`` 3600 s), the
page's stream going on with one ``run_resumed`` event and no second ``agent_start``. A
call that waits for approval is refused with a stale digest and approved with the right one;
the run that goes on is executed by the worker.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ..conftest import SLOW_WAIT, wait_until
from ..sessions.pg import drop_schema, postgres_dsn, unique_schema
from .conftest import ROOT, exit_of, redis_base

requests = pytest.importorskip("requests")
pytest.importorskip("django")
EXAMPLE = ROOT / "examples" / "django_celery"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


LEASE_S = 6.0  # the example's PIAGENT_LEASE_S here (30 s by default): a shorter wait


class Site(str):
    """The example's base URL, its Celery worker process (``worker``), the environment the
    processes share (``env``) and the folder of their logs (``tmp``)."""

    worker: subprocess.Popen[bytes]
    env: dict[str, str]
    tmp: Path
    processes: list[subprocess.Popen[bytes]]  # every process the fixture stops at the end


def _start_worker(env: dict[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    with log_path.open("ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "tasks", "worker", "--pool", "threads",
             "-c", "4", "-Q", env["PIAGENT_QUEUE"], "-n", f"example-{uuid.uuid4().hex[:6]}@%h",
             "--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "info"],
            cwd=EXAMPLE, env=env, stdout=log, stderr=subprocess.STDOUT)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    redis_url = f"{redis_base()}/{1 + os.getpid() % 15}"
    dsn = postgres_dsn()
    schema = unique_schema()
    tmp = tmp_path_factory.mktemp("django_celery")
    port = _free_port()
    env = dict(os.environ, PIAGENT_POSTGRES=dsn, PIAGENT_SCHEMA=schema,
               PIAGENT_REDIS=redis_url, PIAGENT_QUEUE=f"piagent-example-{uuid.uuid4().hex[:8]}",
               PIAGENT_STEP_S="0.05", DJANGO_DEBUG="0", PIAGENT_LEASE_S=str(LEASE_S),
               PYTHONPATH=os.pathsep.join([str(ROOT), str(EXAMPLE),
                                           os.environ.get("PYTHONPATH", "")]))
    with (tmp / "web.log").open("ab") as web_log:
        processes = [
            _start_worker(env, tmp / "worker.log"),
            subprocess.Popen([sys.executable, "manage.py", "runserver", "--noreload",
                              f"127.0.0.1:{port}"], cwd=EXAMPLE, env=env, stdout=web_log,
                             stderr=subprocess.STDOUT),
        ]
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        for process in processes:
            if process.poll() is not None:
                raise AssertionError(f"a process of the example exited:\n"
                                     f"{(tmp / 'worker.log').read_text()[-3000:]}\n"
                                     f"{(tmp / 'web.log').read_text()[-3000:]}")
        try:
            requests.get(url, timeout=1)
        except requests.ConnectionError:
            return False
        return "ready" in (tmp / "worker.log").read_text(errors="replace")

    try:
        wait_until(up, "the web process and the worker", wake=exit_of(processes[1]),
                   timeout=60.0)
        site = Site(url)
        site.worker, site.env, site.tmp, site.processes = processes[0], env, tmp, processes
        yield site
    finally:
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                process.wait(SLOW_WAIT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(SLOW_WAIT)
        drop_schema(dsn, schema)


def _stream(browser: Any, url: str, run_id: str, after: str | None = None,
            stop_at: str = "agent_end") -> list[tuple[str, str, dict[str, Any]]]:
    headers = {"Last-Event-ID": after} if after else {}
    out: list[tuple[str, str, dict[str, Any]]] = []
    with browser.get(f"{url}/events/{run_id}", headers=headers, stream=True,
                     timeout=SLOW_WAIT) as response:
        assert response.status_code == 200
        assert response.headers["Content-Type"].startswith("text/event-stream")
        response.encoding = "utf-8"  # what SSE always is (the header names no charset)
        fields: dict[str, str] = {}
        for line in response.iter_lines(decode_unicode=True):
            if line:
                name, _, value = line.partition(": ")
                fields[name] = value
                continue
            if "data" in fields:
                out.append((fields["id"], fields["event"], json.loads(fields["data"])))
                if fields["event"] == stop_at:
                    break
            fields = {}
    return out


def _final_text(events: list[tuple[str, str, dict[str, Any]]]) -> str:
    ends = [e for _, kind, e in events if kind == "message_end"
            and e["message"]["role"] == "assistant"]
    return "".join(b.get("text", "") for b in ends[-1]["message"]["content"])


def _page_shows(page: str, run_id: str, events: list[tuple[str, str, dict[str, Any]]]
                ) -> dict[str, Any]:
    """What the page's script draws for ``events`` (node, a minimal DOM: page_driver.mjs)."""
    played = [[kind, data] for _, kind, data in events]
    done = subprocess.run(["node", str(Path(__file__).with_name("page_driver.mjs"))],
                          input=json.dumps({"html": page, "runId": run_id, "events": played}),
                          capture_output=True, text=True, timeout=SLOW_WAIT, check=True)
    shown: dict[str, Any] = json.loads(done.stdout)
    return shown


def test_two_browsers_chat_with_runs_on_the_worker(site: str) -> None:
    alice, bob = requests.Session(), requests.Session()
    for browser in (alice, bob):
        assert browser.get(site, timeout=SLOW_WAIT).status_code == 200
    assert alice.cookies["piagent_session"] != bob.cookies["piagent_session"]
    runs = {name: b.post(f"{site}/chat", json={"message": f"count to {n}"}, timeout=SLOW_WAIT)
            .json()["run_id"] for name, b, n in (("alice", alice, 2), ("bob", bob, 3))}
    seen = {"alice": _stream(alice, site, runs["alice"]), "bob": _stream(bob, site, runs["bob"])}
    assert _final_text(seen["alice"]) == "Done: Counted to 2. Anything else?"
    assert _final_text(seen["bob"]) == "Done: Counted to 3. Anything else?"
    ids = [i for i, _, _ in seen["bob"]]
    assert ids == sorted(ids) and seen["bob"][-1][1] == "agent_end"
    # a reconnect resumes just after the last id it saw
    again = _stream(bob, site, runs["bob"], after=ids[2])
    assert [i for i, _, _ in again] == ids[3:]
    # bob's run is not alice's to read, and each page shows its own transcript
    assert alice.get(f"{site}/events/{runs['bob']}", timeout=SLOW_WAIT).status_code == 403
    assert "count to 2" in alice.get(site, timeout=SLOW_WAIT).text
    assert "count to 2" not in bob.get(site, timeout=SLOW_WAIT).text


def test_stop_aborts_the_run_on_the_worker(site: Site) -> None:
    carol = requests.Session()
    carol.get(site, timeout=SLOW_WAIT)
    run_id = carol.post(f"{site}/chat", json={"message": "count to 500"},
                        timeout=SLOW_WAIT).json()["run_id"]
    started = _stream(carol, site, run_id, stop_at="tool_execution_update")
    assert started[-1][1] == "tool_execution_update"
    assert carol.post(f"{site}/stop", json={"run_id": run_id}, timeout=SLOW_WAIT).json() == {
        "ok": True}
    rest = _stream(carol, site, run_id, after=started[-1][0])
    assert rest[-1][1] == "agent_end"
    # issue 49 item 5: the page says why the answer stopped, live and after a reload
    [aborted] = [e["message"] for _, kind, e in rest if kind == "message_end"
                 and e["message"]["role"] == "assistant"]
    assert (aborted["stopReason"], aborted["errorMessage"]) == ("aborted", "stopped by the user")
    page = carol.get(site, timeout=SLOW_WAIT).text
    assert '<div class="note">(aborted: stopped by the user)</div>' in page
    assert page.index('<div class="user">count to 500</div>') < page.index("(aborted: ")
    live = _page_shows(page, run_id, started + rest)
    assert live["closed"] and live["rows"][-1] == {"cls": "note",
                                                   "text": "(aborted: stopped by the user)"}
    # the session is free again once the worker recorded the end (just after agent_end)
    answers: list[Any] = []

    def started_again() -> bool:
        answers.append(carol.post(f"{site}/chat", json={"message": "hi"}, timeout=SLOW_WAIT))
        return bool(answers[-1].status_code == 200)

    wait_until(started_again, "a new run of the session", wake=exit_of(site.worker))
    assert {a.status_code for a in answers[:-1]} <= {409}
    _stream(carol, site, answers[-1].json()["run_id"])


def test_approve_a_waiting_call_and_the_worker_goes_on(site: Site) -> None:
    dave = requests.Session()
    dave.get(site, timeout=SLOW_WAIT)
    run_id = dave.post(f"{site}/chat", json={"message": "delete note shopping"},
                       timeout=SLOW_WAIT).json()["run_id"]
    first = _stream(dave, site, run_id)
    [(_, _, asked)] = [e for e in first if e[1] == "tool_approval_request"]
    assert (asked["toolName"], asked["args"]) == ("delete_note", {"title": "shopping"})
    busy = dave.post(f"{site}/chat", json={"message": "hi"}, timeout=SLOW_WAIT)
    assert busy.status_code == 409 and "waiting for approval" in busy.json()["error"]
    stale = dave.post(f"{site}/approve", timeout=SLOW_WAIT,
                      json={"tool_call_id": asked["toolCallId"], "digest": "0" * 64})
    assert stale.status_code == 409 and asked["toolCallId"] in stale.json()["error"]
    approved = dave.post(f"{site}/approve", timeout=SLOW_WAIT,
                         json={"tool_call_id": asked["toolCallId"], "digest": asked["digest"]})
    assert approved.status_code == 200, approved.text
    rest = _stream(dave, site, approved.json()["run_id"])
    assert [e for _, kind, e in rest if kind == "tool_execution_end"][0]["result"][
        "content"][0]["text"] == "Deleted the note \u201cshopping\u201d."
    assert _final_text(rest) == "Done: Deleted the note \u201cshopping\u201d. Anything else?"


@pytest.mark.browser
def test_a_repeated_call_id_is_approved_each_time_in_a_browser(site: Site) -> None:
    # the scripted model numbers its calls call_1, ... in every reply: each delete_note
    # call of the session has the id call_1, and each is a new call the page approves
    import shutil

    if shutil.which("chromedriver") is None or not (
            shutil.which("chromium") or shutil.which("chromium-browser")):
        pytest.skip("needs chromium and chromedriver on PATH (run .ci/install-browser.sh)")
    pytest.importorskip("selenium")
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from ..conftest import headless_chromium

    def assistant_texts(driver: Any) -> list[str]:
        return [e.text.strip() for e in driver.find_elements(By.CSS_SELECTOR, "#log .assistant")]

    with headless_chromium() as driver:
        wait = WebDriverWait(driver, 2 * SLOW_WAIT)
        driver.get(site)
        for title in ("shopping", "taxes", "chores"):
            driver.find_element(By.ID, "text").send_keys(f"delete note {title}")
            driver.find_element(By.CSS_SELECTOR, "#form button").click()
            wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#log .note button"))
            row = driver.find_elements(By.CSS_SELECTOR, "#log .note")[-1]
            assert row.text.startswith(f'delete_note({{"title":"{title}"}}) waits for you')
            row.find_element(By.XPATH, ".//button[text()='approve']").click()
            done = f"Done: Deleted the note \u201c{title}\u201d. Anything else?"
            wait.until(lambda d, done=done: done in assistant_texts(d))
        notes = [e.text for e in driver.find_elements(By.CSS_SELECTOR, "#log .note")]
        assert not any("waits for approval" in n or "No tool call" in n for n in notes)


def test_the_example_files_exist() -> None:
    for name in ("tasks.py", "views.py", "settings.py", "manage.py", "README.md"):
        assert (EXAMPLE / name).is_file(), name
    assert Path(EXAMPLE / "README.md").read_text().count("celery -A tasks worker") >= 1


def _owner_pid(site: Site, run_id: str) -> int:
    """The pid of the worker process holding the run (its owner is ``host:pid:runner``)."""
    import psycopg

    with psycopg.connect(site.env["PIAGENT_POSTGRES"]) as conn:
        row = conn.execute(f'SELECT owner FROM "{site.env["PIAGENT_SCHEMA"]}".runs '
                           "WHERE run_id = %s", (run_id,)).fetchone()
    assert row is not None
    return int(str(row[0]).split(":")[1])


def test_a_killed_workers_run_is_resumed_within_the_lease_by_another(site: Site) -> None:
    """SIGKILL the worker mid-tool: a second worker's lease check resumes the run within
    lease + 10 s (the broker would redeliver only after its visibility_timeout, an hour)."""
    second_log = site.tmp / "worker2.log"
    second = _start_worker(site.env, second_log)
    site.processes.append(second)  # stopped with the others
    victim = 0
    try:
        wait_until(lambda: "ready" in second_log.read_text(errors="replace"),
                   "a second worker", wake=exit_of(second), timeout=60.0)
        erin = requests.Session()
        page = erin.get(site, timeout=SLOW_WAIT).text
        assert page.count('addEventListener("run_resumed"') == 1  # the page shows it
        run_id = erin.post(f"{site}/chat", json={"message": "count to 400"},
                           timeout=SLOW_WAIT).json()["run_id"]
        before = _stream(erin, site, run_id, stop_at="tool_execution_update")
        victim = _owner_pid(site, run_id)
        assert victim in (site.worker.pid, second.pid)
        os.kill(victim, signal.SIGKILL)
        killed_at = time.monotonic()
        resumed = _stream(erin, site, run_id, after=before[-1][0], stop_at="run_resumed")
        took = time.monotonic() - killed_at
        assert resumed[-1][1] == "run_resumed", resumed[-3:]
        assert took <= LEASE_S + 10, f"resumed {took:.1f} s after the kill"
        print(f"resumed {took:.1f} s after the kill (lease {LEASE_S:g} s)")
        rest = _stream(erin, site, run_id, after=resumed[-1][0])
        assert rest[-1][1] == "agent_end"
        whole = [kind for _, kind, _ in _stream(erin, site, run_id)]
        assert whole.count("agent_start") == 1 and whole.count("run_resumed") == 1
        assert whole[0] == "agent_start" and whole[-1] == "agent_end"
        assert resumed[-1][2]["reason"] == "executor_lost"
    finally:
        if site.worker.pid == victim:
            site.worker = second  # the module's other tests go on with the live one
