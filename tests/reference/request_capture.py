"""A capture server on 127.0.0.1 for the request differential: it answers from a script, in
each API's wire format (SSE), and records every request.

Every request under ``/c/<run>/`` belongs to one run (one conversation, one API, one side):
the run's n-th request is answered with the n-th reply of the run's script, and recorded as
``{"path", "headers", "body"}``: the parsed JSON body and the headers ``content-type``,
``anthropic-version``, ``anthropic-beta``, the session affinity headers (``session-id``,
``session_id``, ``x-client-request-id``, ``x-session-id``, ``x-session-affinity``) and the
NAME of the auth header (never its value).

A reply is ``{"text": str}``, ``{"thinking": str, "signature": str}``, ``{"calls": [[name,
args], ...]}`` (any of the three together, in that order), or ``{"hang": str}``: the text is
streamed, then the answer waits (bounded) until the client closes the connection (an abort).
Tool-call ids are ``call_<run request>_<i>``, the same for both sides. ``"usage": [input,
output]`` sets the usage the reply reports (default ``USAGE``).
"""

from __future__ import annotations

import json
import select
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote

from tests.conftest import WAIT, StreamingHandler
from tests.reference.conftest import ThreadedServer

Reply = dict[str, Any]
API_PATH = {"openai-completions": "/v1", "openai-responses": "/v1", "anthropic-messages": "",
            "google-generative-ai": "/v1beta"}
AUTH_HEADERS = ("authorization", "x-api-key", "x-goog-api-key", "api-key")
KEPT_HEADERS = ("content-type", "anthropic-version", "anthropic-beta", "session-id", "session_id",
                "x-client-request-id", "x-session-id", "x-session-affinity")
USAGE = (12, 5)


def _sse(data: Any, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def _calls(reply: Reply, n: int) -> list[tuple[str, str, str]]:
    """(id, name, compact JSON arguments) of the reply's tool calls."""
    return [(f"call_{n}_{i}", name, json.dumps(args, separators=(",", ":")))
            for i, (name, args) in enumerate(reply.get("calls", []))]


def completions(reply: Reply, n: int) -> Iterator[bytes]:
    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
        return _sse({"id": f"chatcmpl-{n}", "object": "chat.completion.chunk", "created": 0,
                     "model": "m", "choices": [{"index": 0, "delta": delta,
                                                "finish_reason": finish}], **extra})

    yield chunk({"role": "assistant", "content": ""})
    if "thinking" in reply:
        yield chunk({"reasoning_content": reply["thinking"]})
    if reply.get("text") or reply.get("hang"):
        yield chunk({"content": reply.get("text") or reply.get("hang")})
    if reply.get("hang"):
        return
    calls = _calls(reply, n)
    for i, (cid, name, args) in enumerate(calls):
        yield chunk({"tool_calls": [{"index": i, "id": cid, "type": "function",
                                     "function": {"name": name, "arguments": args}}]})
    used = reply.get("usage", USAGE)
    yield chunk({}, "tool_calls" if calls else "stop",
                usage={"prompt_tokens": used[0], "completion_tokens": used[1],
                       "total_tokens": sum(used)})
    yield b"data: [DONE]\n\n"


def responses(reply: Reply, n: int) -> Iterator[bytes]:
    def ev(kind: str, **data: Any) -> bytes:
        return _sse({"type": kind, **data}, kind)

    yield ev("response.created", response={"id": f"resp_{n}", "status": "in_progress"})
    index = 0
    if "thinking" in reply:
        rid = f"rs_{n}"
        yield ev("response.output_item.added", output_index=index,
                 item={"type": "reasoning", "id": rid, "summary": []})
        yield ev("response.reasoning_summary_part.added", item_id=rid, output_index=index,
                 summary_index=0, part={"type": "summary_text", "text": ""})
        yield ev("response.reasoning_summary_text.delta", item_id=rid, output_index=index,
                 summary_index=0, delta=reply["thinking"])
        yield ev("response.reasoning_summary_part.done", item_id=rid, output_index=index,
                 summary_index=0, part={"type": "summary_text", "text": reply["thinking"]})
        yield ev("response.output_item.done", output_index=index, item={
            "type": "reasoning", "id": rid, "encrypted_content": reply.get("signature"),
            "summary": [{"type": "summary_text", "text": reply["thinking"]}]})
        index += 1
    text = reply.get("text") or reply.get("hang")
    if text:
        mid = f"msg_{n}"
        yield ev("response.output_item.added", output_index=index, item={
            "type": "message", "id": mid, "role": "assistant", "status": "in_progress",
            "content": []})
        yield ev("response.content_part.added", item_id=mid, output_index=index,
                 content_index=0, part={"type": "output_text", "text": "", "annotations": []})
        yield ev("response.output_text.delta", item_id=mid, output_index=index,
                 content_index=0, delta=text)
        if reply.get("hang"):
            return
        yield ev("response.output_item.done", output_index=index, item={
            "type": "message", "id": mid, "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]})
        index += 1
    for cid, name, args in _calls(reply, n):
        fid = f"fc_{cid}"
        yield ev("response.output_item.added", output_index=index, item={
            "type": "function_call", "id": fid, "call_id": cid, "name": name,
            "arguments": "", "status": "in_progress"})
        yield ev("response.function_call_arguments.delta", item_id=fid, output_index=index,
                 delta=args)
        yield ev("response.output_item.done", output_index=index, item={
            "type": "function_call", "id": fid, "call_id": cid, "name": name,
            "arguments": args, "status": "completed"})
        index += 1
    used = reply.get("usage", USAGE)
    yield ev("response.completed", response={
        "id": f"resp_{n}", "status": "completed",
        "usage": {"input_tokens": used[0], "output_tokens": used[1],
                  "total_tokens": sum(used), "input_tokens_details": {"cached_tokens": 0}}})


def anthropic(reply: Reply, n: int) -> Iterator[bytes]:
    def ev(kind: str, **data: Any) -> bytes:
        return _sse({"type": kind, **data}, kind)

    used = reply.get("usage", USAGE)
    yield ev("message_start", message={
        "id": f"msg_{n}", "type": "message", "role": "assistant", "model": "m", "content": [],
        "stop_reason": None, "usage": {"input_tokens": used[0], "output_tokens": 1}})
    index = 0
    if "thinking" in reply:
        yield ev("content_block_start", index=index,
                 content_block={"type": "thinking", "thinking": "", "signature": ""})
        yield ev("content_block_delta", index=index,
                 delta={"type": "thinking_delta", "thinking": reply["thinking"]})
        yield ev("content_block_delta", index=index,
                 delta={"type": "signature_delta", "signature": reply.get("signature", "")})
        yield ev("content_block_stop", index=index)
        index += 1
    text = reply.get("text") or reply.get("hang")
    if text:
        yield ev("content_block_start", index=index, content_block={"type": "text", "text": ""})
        yield ev("content_block_delta", index=index, delta={"type": "text_delta", "text": text})
        if reply.get("hang"):
            return
        yield ev("content_block_stop", index=index)
        index += 1
    calls = _calls(reply, n)
    for cid, name, args in calls:
        yield ev("content_block_start", index=index, content_block={
            "type": "tool_use", "id": cid, "name": name, "input": {}})
        yield ev("content_block_delta", index=index,
                 delta={"type": "input_json_delta", "partial_json": args})
        yield ev("content_block_stop", index=index)
        index += 1
    yield ev("message_delta", delta={"stop_reason": "tool_use" if calls else "end_turn"},
             usage={"output_tokens": used[1]})
    yield ev("message_stop")


def google(reply: Reply, n: int) -> Iterator[bytes]:
    def chunk(parts: list[Any], finish: str | None = None) -> bytes:
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
        data: dict[str, Any] = {"candidates": [candidate], "modelVersion": "m",
                                "responseId": f"r{n}"}
        if finish:
            used = reply.get("usage", USAGE)
            candidate["finishReason"] = finish
            data["usageMetadata"] = {"promptTokenCount": used[0],
                                     "candidatesTokenCount": used[1],
                                     "totalTokenCount": sum(used)}
        return _sse(data)

    if "thinking" in reply:
        yield chunk([{"text": reply["thinking"], "thought": True,
                      "thoughtSignature": reply.get("signature")}])
    text = reply.get("text") or reply.get("hang")
    if text:
        yield chunk([{"text": text}])
        if reply.get("hang"):
            return
    calls = [{"functionCall": {"name": name, "args": json.loads(args)}}
             for _, name, args in _calls(reply, n)]
    yield chunk(calls, "STOP")


ENCODERS = {"openai-completions": completions, "openai-responses": responses,
            "anthropic-messages": anthropic, "google-generative-ai": google}


class CaptureServer(ThreadedServer):
    """Answers the runs' scripts and records their requests; ``close()`` joins its thread."""

    def __init__(self) -> None:
        # guards _scripts and _requests (handler threads add, the test reads after the runs)
        self._lock = threading.Lock()
        self._scripts: dict[str, tuple[str, list[Reply]]] = {}
        self._requests: dict[str, list[dict[str, Any]]] = {}
        super().__init__(self._handler_class(), "ref-request-capture")

    def add_run(self, run: str, api: str, script: list[Reply]) -> str:
        """Register a run; returns the base URL its model gets."""
        with self._lock:
            self._scripts[run] = (api, script)
            self._requests[run] = []
        return f"{self.url}/c/{run}{API_PATH[api]}"

    def requests(self, run: str) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._requests[run])

    def _take(self, run: str, record: dict[str, Any]) -> tuple[str, Reply, int]:
        with self._lock:
            api, script = self._scripts[run]
            n = len(self._requests[run])
            self._requests[run].append(record)
        reply = script[n] if n < len(script) else {"text": f"(no reply {n} scripted)"}
        return api, reply, n

    def _handler_class(self) -> type[StreamingHandler]:
        server = self

        class Handler(StreamingHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                parts = unquote(self.path).split("/")
                if len(parts) < 3 or parts[1] != "c" or parts[2] not in server._scripts:
                    self.send_error(404, f"no run at {self.path}")
                    return
                headers = {k: self.headers[k] for k in KEPT_HEADERS if k in self.headers}
                headers["auth"] = [k for k in AUTH_HEADERS if k in self.headers]
                record = {"path": "/" + "/".join(parts[3:]), "headers": headers,
                          "body": json.loads(raw or b"null")}
                api, reply, n = server._take(parts[2], record)
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    for piece in ENCODERS[api](reply, n):
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                        self.wfile.flush()
                    if reply.get("hang"):
                        # the client aborts: wait (bounded) for it to close the connection
                        select.select([self.connection], [], [], WAIT)
                        self.close_connection = True
                        return
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                except OSError:
                    self.close_connection = True

        return Handler
