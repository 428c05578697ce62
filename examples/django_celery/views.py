"""The web process: a multi-user chat whose runs execute on Celery workers.

Each browser gets its own session (a cookie, ``piagent_session``); its transcript lives in
the PostgreSQL store. ``POST /chat`` starts a run (a Celery task) and answers its id;
``GET /events/<run_id>`` streams the run as Server-Sent Events with ``id:`` lines, so a
reconnecting ``EventSource`` resumes after ``Last-Event-ID``; ``POST /steer`` and
``POST /stop`` work from any web process, whichever worker runs the session. A call to a
tool marked ``needs_approval`` ends the run waiting and shows Approve / Deny: ``POST
/approve`` or ``/deny {"tool_call_id", "digest"}`` decides it from any web process (409 with
the reason when refused); the last decision submits the run that goes on and answers its id.
"""

from __future__ import annotations

import html
import json
import uuid
from collections.abc import Iterator

from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseBase,
    JsonResponse,
    StreamingHttpResponse,
)
from django.urls import path
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST
from tasks import runner, store

from piagent.errors import AgentBusyError, ApprovalError, ApprovalPendingError
from piagent.runs import RunNotFoundError

COOKIE = "piagent_session"
KEEP_ALIVE_S = 15.0


def _session(request: HttpRequest) -> str | None:
    value = request.COOKIES.get(COOKIE, "")
    return value if value.startswith("web-") and len(value) < 100 else None


def _text(message: object) -> str:
    content = getattr(message, "content", "")
    if isinstance(content, str):
        return content
    return "".join(getattr(block, "text", "") for block in content
                   if getattr(block, "type", "") == "text")


def _rows(message: object) -> list[str]:
    """A stored message as the page draws it live: its text, and for an aborted or failed
    answer the note "(aborted: <why>)" (as the live page adds at its message_end)."""
    role, text = getattr(message, "role", ""), _text(message)
    rows = [f'<div class="{role}">{html.escape(text)}</div>'] \
        if role in ("user", "assistant") and text else []
    reason = getattr(message, "stop_reason", None)
    if role == "assistant" and reason in ("aborted", "error"):
        why = getattr(message, "error_message", None) or reason
        rows.append(f'<div class="note">({reason}: {html.escape(why)})</div>')
    return rows


@require_GET
def index(request: HttpRequest) -> HttpResponse:
    session_id = _session(request) or f"web-{uuid.uuid4().hex}"
    rows = [row for m in store.load(session_id) for row in _rows(m)]
    response = HttpResponse(PAGE.replace("<!--HISTORY-->", "\n".join(rows)))
    response.set_cookie(COOKIE, session_id, httponly=True, samesite="Lax")
    return response


def _json_body(request: HttpRequest) -> dict[str, str]:
    try:
        body = json.loads(request.body or b"{}")
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


@csrf_exempt
@require_POST
def chat(request: HttpRequest) -> JsonResponse:
    session_id = _session(request)
    message = _json_body(request).get("message", "")
    if session_id is None or not isinstance(message, str) or not message.strip():
        return JsonResponse({"error": "open / first, then send a non-empty message"},
                            status=400)
    try:
        run_id = runner.start(session_id, message)
    except (AgentBusyError, ApprovalPendingError) as exc:
        return JsonResponse({"error": str(exc)}, status=409)
    return JsonResponse({"run_id": run_id})


def _decide(request: HttpRequest, approved: bool) -> JsonResponse:
    session_id = _session(request)
    body = _json_body(request)
    # call_key names the call even when another waiting call has its id
    call_id, digest = body.get("call_key") or body.get("tool_call_id"), body.get("digest")
    if session_id is None or not isinstance(call_id, str) or not call_id:
        return JsonResponse({"error": 'send {"call_key": "...", "digest": "..."}'},
                            status=400)
    decide = runner.approve if approved else runner.deny
    try:
        run_id = decide(session_id, call_id, digest=digest or None,
                        reason=None if approved else "the user clicked Deny")
    except (ApprovalError, AgentBusyError) as exc:
        return JsonResponse({"error": str(exc)}, status=409)
    return JsonResponse({"run_id": run_id})


@csrf_exempt
@require_POST
def approve(request: HttpRequest) -> JsonResponse:
    return _decide(request, True)


@csrf_exempt
@require_POST
def deny(request: HttpRequest) -> JsonResponse:
    return _decide(request, False)


@require_GET
def events(request: HttpRequest, run_id: str) -> HttpResponseBase:
    try:
        info = runner.status(run_id)
    except RunNotFoundError:
        return JsonResponse({"error": f"no run {run_id}"}, status=404)
    if info.session_id != _session(request):
        return JsonResponse({"error": "not your run"}, status=403)
    after = request.headers.get("Last-Event-ID") or None

    def stream() -> Iterator[bytes]:
        for item in runner.events(run_id, after=after, timeout=KEEP_ALIVE_S):
            if item is None:
                yield b": keep-alive\n\n"
                continue
            data = json.dumps(item.event, ensure_ascii=False, separators=(",", ":"))
            yield f"id: {item.id}\nevent: {item.type}\ndata: {data}\n\n".encode()

    response = StreamingHttpResponse(stream(), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx: do not buffer the stream
    return response


@csrf_exempt
@require_POST
def steer(request: HttpRequest) -> JsonResponse:
    session_id = _session(request)
    message = _json_body(request).get("message", "")
    if session_id is None or not isinstance(message, str) or not message.strip():
        return JsonResponse({"error": "a non-empty message"}, status=400)
    runner.steer(session_id, message)
    return JsonResponse({"ok": True})


@csrf_exempt
@require_POST
def stop(request: HttpRequest) -> JsonResponse:
    run_id = _json_body(request).get("run_id", "")
    try:
        info = runner.status(str(run_id))
    except RunNotFoundError:
        return JsonResponse({"error": f"no run {run_id}"}, status=404)
    if info.session_id != _session(request):
        return JsonResponse({"error": "not your run"}, status=403)
    runner.abort(info.run_id, "stopped by the user")
    return JsonResponse({"ok": True})


urlpatterns = [
    path("", index),
    path("chat", chat),
    path("events/<str:run_id>", events),
    path("steer", steer),
    path("stop", stop),
    path("approve", approve),
    path("deny", deny),
]

PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>piagent on Celery</title>
<style>
body { font: 15px system-ui, sans-serif; max-width: 44rem; margin: 2rem auto; }
#log div { margin: .4rem 0; padding: .4rem .6rem; border-radius: .4rem; white-space: pre-wrap; }
.user { background: #e8f0fe; } .assistant { background: #f1f3f4; } .note { color: #777; }
</style></head><body>
<h1>piagent chat, runs on Celery workers</h1>
<div id="log"><!--HISTORY--></div>
<form id="form"><input id="text" size="50" placeholder="Count to 5" autofocus>
<button>Send</button> <button type="button" id="steer">Steer</button>
<button type="button" id="stop">Stop</button></form>
<script>
const log = document.getElementById("log"), text = document.getElementById("text");
let runId = null, source = null, reply = null, tool = null;
function add(cls, body) { const d = document.createElement("div"); d.className = cls;
  d.textContent = body; log.appendChild(d); return d; }
function post(url, body) { return fetch(url, {method: "POST", body: JSON.stringify(body),
  headers: {"Content-Type": "application/json"}}).then(r => r.json()); }
function follow(id) {
  runId = id; reply = null; tool = null;
  source = new EventSource("/events/" + id);  // reconnects send Last-Event-ID
  source.addEventListener("message_update", e => {
    const m = JSON.parse(e.data).message;
    if (m.role !== "assistant") return;
    const t = m.content.filter(b => b.type === "text").map(b => b.text).join("");
    if (!reply) reply = add("assistant", "");
    reply.textContent = t;
  });
  source.addEventListener("message_end", e => {
    const m = JSON.parse(e.data).message;
    if (m.role !== "assistant") return;
    // the final text (an aborted answer's deltas may have stopped short of it), then for
    // an aborted or failed answer a note saying why, as a reload draws it
    const t = m.content.filter(b => b.type === "text").map(b => b.text).join("");
    if (t) { if (!reply) reply = add("assistant", ""); reply.textContent = t; }
    if (m.stopReason === "aborted" || m.stopReason === "error")
      add("note", `(${m.stopReason}: ${m.errorMessage || m.stopReason})`);
    reply = null;
  });
  source.addEventListener("tool_execution_update", e => {
    const p = JSON.parse(e.data).partialResult;
    if (!tool) tool = add("note", "");
    tool.textContent = p.content.map(b => b.text || "").join("");
  });
  source.addEventListener("tool_execution_end", () => { tool = null; });
  // a call that waits for approval: the run ends; the last decision answers the next run
  source.addEventListener("tool_approval_request", e => {
    const call = JSON.parse(e.data);
    const row = add("note", `${call.toolName}(${JSON.stringify(call.args)}) waits for you: `);
    for (const verb of ["approve", "deny"]) {
      const b = document.createElement("button"); b.textContent = verb; row.appendChild(b);
      b.onclick = () => post("/" + verb, {call_key: call.callKey, tool_call_id: call.toolCallId,
                                          digest: call.digest})
        .then(r => { row.remove(); if (r.error) add("note", r.error);
                     else if (r.run_id) follow(r.run_id); });
    }
  });
  // piagent's own event, once, when a killed worker's run was resumed by another worker
  source.addEventListener("run_resumed", () => {
    add("note", "(the worker running this stopped; another one resumed it)"); reply = null;
  });
  source.addEventListener("agent_end", () => { source.close(); runId = null; });
}
document.getElementById("form").onsubmit = e => {
  e.preventDefault(); const t = text.value.trim(); if (!t) return; text.value = "";
  add("user", t);
  post("/chat", {message: t}).then(r => r.run_id ? follow(r.run_id) : add("note", r.error));
};
document.getElementById("steer").onclick = () => {
  const t = text.value.trim(); if (!t) return; text.value = ""; add("user", t);
  post("/steer", {message: t});
};
document.getElementById("stop").onclick = () => { if (runId) post("/stop", {run_id: runId}); };
</script></body></html>
"""
