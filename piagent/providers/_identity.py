"""The ``User-Agent`` and attribution headers of a ``ClientIdentity`` (pi-ai's identity)."""

from __future__ import annotations

import platform
import sys
from urllib.parse import urlsplit

from .._version import __version__
from ..models import Model
from ..stream import ClientIdentity

__all__ = ["DEFAULT_USER_AGENT", "identity_headers", "user_agent"]

_NVIDIA_NIM_HOST = "integrate.api.nvidia.com"
_OPENCODE_HOST = "opencode.ai"


def user_agent(identity: ClientIdentity | None) -> str:
    """``piagent/<version> (<platform>; python/<version>; <machine>)``, ``piagent`` for
    "short", or the identity's own string."""
    mode = identity.user_agent if identity is not None else "detailed"
    if mode == "short":
        return "piagent"
    if mode != "detailed":
        return mode
    version = identity.version if identity is not None and identity.version else __version__
    python = ".".join(str(part) for part in sys.version_info[:3])
    return f"piagent/{version} ({sys.platform}; python/{python}; {platform.machine() or 'unknown'})"


DEFAULT_USER_AGENT = user_agent(None)
"""The ``User-Agent`` of a request without an identity."""


def _host(url: str) -> str:
    try:
        return urlsplit(url).hostname or ""
    except ValueError:
        return ""


def identity_headers(model: Model, identity: ClientIdentity) -> dict[str, str]:
    """``User-Agent`` and the attribution headers the model's provider understands."""
    headers = {"User-Agent": user_agent(identity)}
    attribution = identity.attribution
    if attribution is None:
        return headers
    provider, base_url = model.provider, model.base_url
    if provider == "openrouter" or "openrouter.ai" in base_url:
        headers["HTTP-Referer"] = attribution.url
        headers["X-OpenRouter-Title"] = attribution.name
        if attribution.categories:
            headers["X-OpenRouter-Categories"] = ",".join(attribution.categories)
    elif provider == "nvidia" or _host(base_url) == _NVIDIA_NIM_HOST:
        name = attribution.name
        headers["X-BILLING-INVOKE-ORIGIN"] = name[:1].upper() + name[1:]
    elif provider in ("opencode", "opencode-go") or _host(base_url) == _OPENCODE_HOST:
        headers["x-opencode-client"] = attribution.name
    return headers
