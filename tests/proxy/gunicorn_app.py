"""The WSGI module that ``tests/proxy/test_gunicorn.py`` serves with a real gunicorn:
``gunicorn 'tests.proxy.gunicorn_app:app'``. A ``ProxyApp`` over a scripted model that
echoes the last user text; the text ``hold`` makes it wait for the abort signal, so the
test can watch the SSE comments arrive while the stream function is still running."""

from __future__ import annotations

import os

from piagent.messages import AssistantMessage, UserMessage
from piagent.proxy import ProxyApp
from piagent.stream import StreamOptions
from piagent.testing import ScriptedStreamFn, assistant_text


def _reply(context: object, options: StreamOptions) -> AssistantMessage:
    messages = getattr(context, "messages", [])
    users = [m for m in messages if isinstance(m, UserMessage)]
    content = users[-1].content if users else "?"
    text = content if isinstance(content, str) else "".join(
        getattr(block, "text", "") for block in content)
    if text == "hold" and options.signal is not None:
        options.signal.wait(30.0)  # until the client leaves (bounded)
        return assistant_text("released")
    return assistant_text(f"echo: {text}")


model_side = ScriptedStreamFn([_reply] * 1000)
app = ProxyApp(model_side, auth_tokens=os.environ["PIAGENT_PROXY_TOKEN"], heartbeat_s=0.1,
               allowed_base_urls={"scripted": model_side.model.base_url})
