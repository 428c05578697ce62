"""Vertex AI's credentials: a Vertex API key, or the project, location and an OAuth access
token from Application Default Credentials (google-auth, the extra ``piagent[vertex]``).

pi-ai's rules: ``StreamOptions.api_key`` (unless it is the marker ``gcp-vertex-credentials``
or a ``<placeholder>``), else ``GOOGLE_CLOUD_API_KEY``; without a key, the project from
``GOOGLE_CLOUD_PROJECT`` or ``GCLOUD_PROJECT``, the location from ``GOOGLE_CLOUD_LOCATION``,
and the credentials from ``GOOGLE_APPLICATION_CREDENTIALS`` (a service-account or user
credentials file), else google-auth's default chain (gcloud's
``application_default_credentials.json``, the metadata server). Each variable is read from
``StreamOptions.env`` first, then the environment.

Thread safety: ``access_token`` may be called from any thread; the credentials of each file
are loaded once and refreshed by one thread at a time (``_lock``).
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Mapping
from typing import Any

from ..errors import ProviderError
from ._keys import env_value

__all__ = ["SCOPE", "VertexTarget", "access_token", "forget_credentials", "vertex_target"]

SCOPE = "https://www.googleapis.com/auth/cloud-platform"
PROVIDER = "google-vertex"
_MARKER = "gcp-vertex-credentials"
_PLACEHOLDER = re.compile(r"^<[^>]+>$")
_ADC_PATH = "~/.config/gcloud/application_default_credentials.json"

# guards _credentials and every refresh of a credentials object it holds (google-auth's
# credentials are not thread-safe; a refresh is one token request, rare)
_lock = threading.Lock()
_credentials: dict[str, Any] = {}  # credentials file ("" for the default chain) -> credentials


class VertexTarget:
    """Who a request is for: ``api_key``, or ``project``, ``location`` and ``credentials_file``
    (``None``: google-auth's default chain)."""

    __slots__ = ("api_key", "credentials_file", "location", "project")

    def __init__(self, api_key: str | None, project: str | None = None,
                 location: str | None = None, credentials_file: str | None = None) -> None:
        self.api_key = api_key
        self.project = project
        self.location = location
        self.credentials_file = credentials_file


def vertex_target(api_key: str | None, env: Mapping[str, str] | None) -> VertexTarget:
    """The key, else the project and location; raises ``ProviderError`` naming what is missing
    and where it was looked for."""
    key = (api_key or "").strip()
    if not key or key == _MARKER or _PLACEHOLDER.match(key):
        key = (env_value("GOOGLE_CLOUD_API_KEY", env) or "").strip()
    if key:
        return VertexTarget(key)
    project = env_value("GOOGLE_CLOUD_PROJECT", env) or env_value("GCLOUD_PROJECT", env)
    if not project:
        raise ProviderError(
            "Vertex AI needs an API key or a project. Pass StreamOptions(api_key=...) or set "
            "GOOGLE_CLOUD_API_KEY; or set GOOGLE_CLOUD_PROJECT (or GCLOUD_PROJECT) and "
            "GOOGLE_CLOUD_LOCATION for Application Default Credentials (looked in "
            "StreamOptions.env and the environment).", provider=PROVIDER)
    location = env_value("GOOGLE_CLOUD_LOCATION", env)
    if not location:
        raise ProviderError(
            "Vertex AI requires a location. Set GOOGLE_CLOUD_LOCATION (e.g. us-central1 or "
            "global; looked in StreamOptions.env and the environment).", provider=PROVIDER)
    return VertexTarget(None, project, location,
                        env_value("GOOGLE_APPLICATION_CREDENTIALS", env))


def access_token(target: VertexTarget, session: Any = None) -> str:
    """A valid OAuth access token for ``target``'s credentials, refreshed when expired
    (google-auth refreshes a little before the expiry). ``session``: the ``requests.Session``
    the token request goes through (a new one when ``None``)."""
    transport = _transport()
    path = target.credentials_file or ""
    with _lock:
        credentials = _credentials.get(path)
        if credentials is None:
            credentials = _credentials[path] = _load(path)
        if not credentials.valid:
            try:
                credentials.refresh(transport.Request(session))
            except Exception as exc:  # google-auth's RefreshError, TransportError, …
                raise ProviderError(
                    f"Vertex AI could not get an access token from "
                    f"{_where(path)}: {exc}", provider=PROVIDER) from exc
        token = credentials.token
    if not isinstance(token, str) or not token:
        raise ProviderError(f"Vertex AI got no access token from {_where(path)}.",
                            provider=PROVIDER)
    return token


def forget_credentials() -> None:
    """Drop the loaded credentials (the next request loads them again)."""
    with _lock:
        _credentials.clear()


def _where(path: str) -> str:
    return (f"GOOGLE_APPLICATION_CREDENTIALS ({path})" if path else
            f"Application Default Credentials ({_ADC_PATH} or the metadata server)")


def _transport() -> Any:
    try:
        import google.auth.transport.requests as transport
    except ImportError as exc:
        raise ProviderError(
            "Vertex AI with a project and location needs google-auth for its access tokens: "
            "pip install 'piagent[vertex]' (or pass a Vertex API key: StreamOptions(api_key="
            "...) or GOOGLE_CLOUD_API_KEY).", provider=PROVIDER) from exc
    return transport


def _load(path: str) -> Any:
    """The credentials of the file at ``path`` (a service account or gcloud's authorized
    user), else google-auth's default chain."""
    import google.auth
    import google.auth.exceptions

    auth: Any = google.auth  # typed loosely: google-auth's hints are partial
    try:
        if path and os.environ.get("GOOGLE_APPLICATION_CREDENTIALS") != path:
            return _load_file(path)
        credentials, _ = auth.default(scopes=[SCOPE])
    except (google.auth.exceptions.DefaultCredentialsError, OSError, ValueError) as exc:
        raise ProviderError(
            f"Vertex AI found no usable credentials in {_where(path)}: {exc} Run `gcloud auth "
            "application-default login`, set GOOGLE_APPLICATION_CREDENTIALS to a "
            "service-account file, or pass a Vertex API key.", provider=PROVIDER) from exc
    return credentials


def _load_file(path: str) -> Any:
    """A credentials file named in ``StreamOptions.env``, by its ``type`` (google-auth's
    generic loader is deprecated for files from elsewhere)."""
    from google.oauth2 import credentials as user, service_account

    with open(path, encoding="utf-8") as handle:
        kind = json.load(handle).get("type")
    loaders: dict[str, Any] = {  # typed loosely: google-auth's hints are partial
        "service_account": service_account.Credentials.from_service_account_file,
        "authorized_user": user.Credentials.from_authorized_user_file}
    if kind in loaders:
        return loaders[kind](path, scopes=[SCOPE])
    raise ValueError(f"credentials of type {kind!r} are read from the environment's "
                     "GOOGLE_APPLICATION_CREDENTIALS only (StreamOptions.env takes "
                     "'service_account' and 'authorized_user' files).")
