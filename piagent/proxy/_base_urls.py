"""Where ``ProxyApp`` may send a provider request: the catalogue's base URL of the model's
provider, or a URL the operator allowed for that provider (``allowed_base_urls``).

A client names the whole model, ``baseUrl`` included, and the server adds its own provider
key; without this check a client holding a proxy token could send that key to any host.
The check runs on the decoded request, before the stream function is called, so a refused
request opens no connection at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import lru_cache
from urllib.parse import urlsplit

from ..models import Model

__all__ = ["BaseUrlPolicy", "RefusedModel", "parse_allowed"]

_Normal = tuple[str, str, str, int, str, str, str]
"""A base URL compared: scheme, userinfo, host, port, path (no trailing '/'), query, fragment."""

_PARAM = "ProxyApp(allowed_base_urls=...)"
_HOW = ("allow it with 'piagent proxy --allow-base-url {p}=URL' or "
        "ProxyApp(allowed_base_urls={{'{p}': URL}})")
_MAX_ECHO = 200  # characters of the client's base URL quoted back in a refusal


class RefusedModel(Exception):
    """The server will not serve this model (answered 403 with ``str(exc)``)."""


def normal(url: str) -> _Normal | None:
    """``url`` as compared: scheme and host lower-cased, the scheme's default port made
    explicit, a trailing ``/`` dropped; everything else exactly as written. ``None`` for
    anything that is not a plain http(s) URL with a host (spaces, control or non-ASCII
    characters, a backslash, a bad port), which therefore matches nothing."""
    if not url.isascii() or "\\" in url or any(c <= " " or c == "\x7f" for c in url):
        return None
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    host = parts.hostname or ""
    if scheme not in ("http", "https") or not host:
        return None
    userinfo = parts.netloc.rpartition("@")[0]
    return (scheme, userinfo, host, port or (443 if scheme == "https" else 80),
            parts.path.rstrip("/"), parts.query, parts.fragment)


@lru_cache(maxsize=1)
def _catalogue_urls() -> dict[str, tuple[tuple[str, ...], frozenset[_Normal]]]:
    """Each catalogued provider's base URLs (as written, and as compared), read from the
    catalogue on the first request."""
    from ..providers import get_models, get_providers

    found = {p: sorted({m.base_url for m in get_models(p)}) for p in get_providers()}
    return {p: (tuple(urls), frozenset(filter(None, map(normal, urls))))
            for p, urls in found.items()}


def parse_allowed(allowed: object) -> dict[str, tuple[str, ...]]:
    """``allowed_base_urls`` checked: ``{provider: URL or iterable of URLs}``; a
    ``TypeError``/``ValueError`` naming the parameter and the bad entry otherwise."""
    if allowed is None:
        return {}
    if not isinstance(allowed, Mapping):
        msg = (f"{_PARAM} takes a mapping of provider to base URL(s), e.g. "
               f"{{'openai': 'https://gateway.example/v1'}}; got {type(allowed).__name__}.")
        raise TypeError(msg)
    result: dict[str, tuple[str, ...]] = {}
    for provider, urls in allowed.items():
        if not isinstance(provider, str) or not provider or provider != "".join(
                provider.split()):
            msg = (f"{_PARAM}: every key must be a provider name (a non-empty str without "
                   f"spaces), got {provider!r}.")
            raise ValueError(msg) if isinstance(provider, str) else TypeError(msg)
        many: Iterable[object] = (urls,) if isinstance(urls, str) else _iterable(provider, urls)
        checked = tuple(_checked_url(provider, url) for url in many)
        if not checked:
            msg = f"{_PARAM}[{provider!r}] is empty; give at least one base URL or leave it out."
            raise ValueError(msg)
        result[provider] = checked
    return result


def _iterable(provider: str, urls: object) -> Iterable[object]:
    if isinstance(urls, (bytes, Mapping)) or not isinstance(urls, Iterable):
        msg = (f"{_PARAM}[{provider!r}] must be a base URL (str) or a list of them, "
               f"got {type(urls).__name__}.")
        raise TypeError(msg)
    return list(urls)


def _checked_url(provider: str, url: object) -> str:
    if not isinstance(url, str):
        msg = (f"{_PARAM}[{provider!r}] must hold base URLs (str), "
               f"got {type(url).__name__}: {url!r}.")
        raise TypeError(msg)
    if normal(url) is None:
        msg = (f"{_PARAM}[{provider!r}]: {url!r} is not an http:// or https:// URL with a host "
               "(no spaces, backslashes or non-ASCII characters).")
        raise ValueError(msg)
    return url


class BaseUrlPolicy:
    """The base URLs each provider may be sent to: the catalogue's plus the allowed ones.

    Immutable after construction; ``check`` may be called from any thread.
    """

    def __init__(self, allowed: Mapping[str, tuple[str, ...]]) -> None:
        self._allowed = {p: frozenset(filter(None, map(normal, urls)))
                         for p, urls in allowed.items()}

    def check(self, model: Model) -> None:
        """Raise ``RefusedModel`` unless ``model.base_url`` may be used for its provider."""
        provider = model.provider
        url = model.base_url
        wanted = normal(url) if isinstance(url, str) else None
        catalogue, known = _catalogue_urls().get(provider, ((), frozenset()))
        if wanted is not None and (wanted in known or wanted in self._allowed.get(provider, ())):
            return
        text = str(url)
        shown = text if len(text) <= _MAX_ECHO else text[:_MAX_ECHO] + "…"
        if catalogue:
            where = (f"sends {provider} requests only to {' or '.join(catalogue)} (the "
                     "catalogue's) and to the base URLs its operator allowed")
        else:
            where = (f"serves provider {provider!r} (which has no base URL in the catalogue) "
                     "only at base URLs its operator allowed")
        msg = (f"Base URL {shown!r} is not allowed for provider {provider!r}: this proxy "
               f"{where}; the operator can {_HOW.format(p=provider)}.")
        raise RefusedModel(msg)
