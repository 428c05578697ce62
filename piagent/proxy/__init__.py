"""The proxy: a stream function that calls the model through a server, and that server.

``stream_proxy`` (client) and ``ProxyApp`` (a WSGI application) speak pi's proxy protocol,
so either side can be pi's TypeScript implementation. See ``docs/proxy.md``.
"""

from __future__ import annotations

from ._app import ProxyApp
from ._client import ProxyStreamOptions, proxy_stream_fn, stream_proxy
from ._server import ProxyServer, serve_proxy

__all__ = [
    "ProxyApp",
    "ProxyServer",
    "ProxyStreamOptions",
    "proxy_stream_fn",
    "serve_proxy",
    "stream_proxy",
]
