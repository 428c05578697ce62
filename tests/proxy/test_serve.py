"""``serve_proxy`` (what ``piagent proxy`` runs) serves on the calling thread, reports its
URL through ``ready``, and on KeyboardInterrupt shuts down cleanly and re-raises."""

from __future__ import annotations

import _thread
import threading

import pytest

from piagent.messages import UserMessage
from piagent.proxy import ProxyApp, ProxyStreamOptions, serve_proxy, stream_proxy
from piagent.stream import Context
from piagent.testing import ScriptedStreamFn, assistant_text
from tests.conftest import WAIT, join_piagent_threads

from .conftest import SCRIPTED_BASE_URLS, TOKEN


@pytest.mark.usefixtures("sigint_raises")  # also from a shell ignoring SIGINT
def test_serve_proxy_serves_until_interrupted():
    fn = ScriptedStreamFn([assistant_text("served")])
    results: list[str] = []

    def client(url: str) -> None:
        try:
            message = stream_proxy(fn.model, Context([UserMessage("hi")]),
                                   ProxyStreamOptions(proxy_url=url, auth_token=TOKEN)
                                   ).result(WAIT)
            results.append(message.text)
        finally:
            _thread.interrupt_main()  # what Ctrl-C does

    def ready(url: str) -> None:
        assert url.startswith("http://127.0.0.1:")
        # owner: this test; it ends after one request and is joined below
        threading.Thread(target=client, args=(url,), name="test-proxy-client").start()

    with pytest.raises(KeyboardInterrupt):
        serve_proxy(ProxyApp(fn, auth_tokens=TOKEN,
                             allowed_base_urls=SCRIPTED_BASE_URLS), "127.0.0.1", 0, ready=ready)
    for thread in threading.enumerate():
        if thread.name == "test-proxy-client":
            thread.join(WAIT)
    assert results == ["served"]
    assert join_piagent_threads() == []
