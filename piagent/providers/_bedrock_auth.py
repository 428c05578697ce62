"""Amazon Bedrock's credentials, region and endpoint as pi-ai 1.6.1 resolves them, and the
request's SigV4 signature (botocore, the extra ``piagent[bedrock]``).

Each variable is read from ``StreamOptions.env`` first, then the environment.

* **Bearer token** (a Bedrock API key): ``StreamOptions.api_key``, else
  ``AWS_BEARER_TOKEN_BEDROCK``; sent as ``Authorization: Bearer``, nothing signed.
* **SigV4**: ``AWS_PROFILE`` from ``StreamOptions.env`` wins; else ``AWS_ACCESS_KEY_ID`` /
  ``AWS_SECRET_ACCESS_KEY`` (/ ``AWS_SESSION_TOKEN``); else botocore's default chain (the
  environment's ``AWS_PROFILE``, shared files, SSO, web identity, container and instance
  roles), its session kept per profile and its credentials refreshed by botocore.
  ``AWS_BEDROCK_SKIP_AUTH=1`` signs with dummy keys (a proxy that needs none).
* **Region**: an inference-profile ARN's, else ``AWS_REGION`` / ``AWS_DEFAULT_REGION``, else a
  standard endpoint's, else the profile's (with ``AWS_PROFILE`` set), else ``us-east-1``.
* **Endpoint**: the model's ``base_url`` unless it is a standard
  ``bedrock-runtime.<region>.amazonaws.com`` URL and a region or profile is configured, in
  which case ``https://bedrock-runtime.<region>.amazonaws.com``.

Thread safety: every function may be called from any thread; ``_sessions`` is guarded.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from ..errors import ProviderError
from ..models import Model
from ..stream import StreamOptions
from ._keys import env_value

__all__ = ["BedrockTarget", "bedrock_target", "sign", "sigv4_headers"]

PROVIDER = "amazon-bedrock"
_ARN_REGION = re.compile(r"^arn:aws(?:-[a-z0-9-]+)?:bedrock:([a-z0-9-]+):")
_STANDARD = re.compile(r"^bedrock-runtime(?:-fips)?\.([a-z0-9-]+)\.amazonaws\.com(?:\.cn)?$")
_CHAIN = ("AWS_PROFILE, AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_BEARER_TOKEN_BEDROCK, "
          "~/.aws/credentials and ~/.aws/config, SSO, web identity, container and instance "
          "roles")

# guards _sessions: botocore sessions by profile ("" for none), each resolving its
# credentials once (botocore refreshes temporary ones under its own lock)
_lock = threading.Lock()
_sessions: dict[str, Any] = {}


class BedrockTarget:
    """Where a request goes and how it is authorised: ``bearer`` or ``credentials`` (a
    botocore ``Credentials``-like object with ``get_frozen_credentials``)."""

    __slots__ = ("bearer", "credentials", "endpoint", "region")

    def __init__(self, endpoint: str, region: str, bearer: str | None = None,
                 credentials: Any = None) -> None:
        self.endpoint = endpoint
        self.region = region
        self.bearer = bearer
        self.credentials = credentials


def _botocore() -> Any:
    try:
        import botocore.session
    except ImportError as exc:
        raise ProviderError(
            "Amazon Bedrock needs botocore to sign its requests and read its event stream: "
            "pip install 'piagent[bedrock]'.", provider=PROVIDER) from exc
    return botocore.session


def _session(profile: str) -> Any:
    module = _botocore()
    with _lock:
        session = _sessions.get(profile)
        if session is None:
            session = _sessions[profile] = module.Session(profile=profile or None)
    return session


def forget_sessions() -> None:
    """Drop the cached botocore sessions (the next request resolves credentials again)."""
    with _lock:
        _sessions.clear()


def bedrock_target(model: Model, options: StreamOptions) -> BedrockTarget:
    """Resolve the endpoint, region and credentials; raises ``ProviderError`` naming what is
    missing and where it was looked for."""
    env = options.env
    _botocore()  # the extra is needed for the event stream in every case
    configured = env_value("AWS_REGION", env) or env_value("AWS_DEFAULT_REGION", env)
    ambient_profile = env_value("AWS_PROFILE")
    host = (urlsplit(model.base_url).hostname or "").lower() if model.base_url else ""
    standard = _STANDARD.match(host)
    explicit = standard is None or (not configured and not ambient_profile)
    option_profile = (env or {}).get("AWS_PROFILE")
    profile = option_profile or env_value("AWS_PROFILE", env) or ""
    arn = _ARN_REGION.match(model.id)
    region = (arn.group(1) if arn else configured
              or (standard.group(1) if standard and explicit else None))
    if not region and profile:
        try:
            region = _session(profile).get_config_variable("region")
        except Exception as exc:  # botocore's ProfileNotFound, a malformed config file
            raise ProviderError(f"Amazon Bedrock could not read AWS profile {profile!r}: "
                                f"{exc}", provider=PROVIDER) from exc
    region = region or "us-east-1"
    endpoint = model.base_url if explicit and model.base_url else \
        f"https://bedrock-runtime.{region}.amazonaws.com"
    skip = env_value("AWS_BEDROCK_SKIP_AUTH", env) == "1"
    bearer = options.api_key or env_value("AWS_BEARER_TOKEN_BEDROCK", env)
    if bearer and not skip:
        return BedrockTarget(endpoint, region, bearer=bearer)
    from botocore.credentials import Credentials

    if skip:
        return BedrockTarget(endpoint, region,
                             credentials=Credentials("dummy-access-key", "dummy-secret-key"))
    key, secret = env_value("AWS_ACCESS_KEY_ID", env), env_value("AWS_SECRET_ACCESS_KEY", env)
    if key and secret and not option_profile:
        return BedrockTarget(endpoint, region, credentials=Credentials(
            key, secret, env_value("AWS_SESSION_TOKEN", env)))
    try:
        credentials = _session(profile).get_credentials()
    except Exception as exc:  # botocore's ProfileNotFound, SSO and config errors
        raise ProviderError(f"Amazon Bedrock could not read AWS credentials"
                            f"{f' of profile {profile!r}' if profile else ''}: {exc}",
                            provider=PROVIDER) from exc
    if credentials is None:
        raise ProviderError(
            "No AWS credentials for Amazon Bedrock. Pass StreamOptions(api_key=...) (a Bedrock "
            "API key) or set AWS_BEARER_TOKEN_BEDROCK, AWS_PROFILE, or AWS_ACCESS_KEY_ID and "
            f"AWS_SECRET_ACCESS_KEY (looked in StreamOptions.env, the environment and "
            f"botocore's chain: {_CHAIN}).", provider=PROVIDER)
    return BedrockTarget(endpoint, region, credentials=credentials)


def sigv4_headers(method: str, url: str, headers: dict[str, str], body: bytes,
                  credentials: Any, region: str, service: str) -> dict[str, str]:
    """``headers`` with ``X-Amz-Date``, the session token and ``Authorization`` of a SigV4
    signature over them, the URL and ``body`` (botocore's ``SigV4Auth``, at the current
    time)."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest

    request = AWSRequest(method=method, url=url, data=body, headers=headers)
    SigV4Auth(credentials, service, region).add_auth(request)
    return dict(request.headers.items())


def sign(target: BedrockTarget, url: str, body: bytes,
         add_secret: Callable[[str], None]) -> dict[str, str]:
    """The auth headers of one Converse request: the bearer token, or a SigV4 signature
    (service ``bedrock``) over ``content-length``, ``content-type``, ``host``,
    ``x-amz-content-sha256`` and ``x-amz-date`` (and ``x-amz-security-token``)."""
    if target.bearer is not None:
        add_secret(target.bearer)
        return {"Authorization": f"Bearer {target.bearer}"}
    try:
        frozen = target.credentials.get_frozen_credentials()
    except Exception as exc:  # a refresh that failed (an expired SSO session, …)
        raise ProviderError(f"Amazon Bedrock could not refresh its AWS credentials: {exc}",
                            provider=PROVIDER) from exc
    add_secret(frozen.secret_key)
    if frozen.token:
        add_secret(frozen.token)
    headers = {"Content-Type": "application/json", "Content-Length": str(len(body)),
               "X-Amz-Content-SHA256": hashlib.sha256(body).hexdigest()}
    signed = sigv4_headers("POST", url, headers, body, frozen, target.region, "bedrock")
    # the transport sends the same Content-Type and Content-Length itself
    return {k: v for k, v in signed.items() if k.lower() not in ("content-type",
                                                                  "content-length")}
