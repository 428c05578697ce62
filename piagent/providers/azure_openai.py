"""``azure-openai-responses``: the OpenAI Responses API on Azure OpenAI.

The request body and the stream are the Responses API's (``openai_responses``); what Azure
adds is where the request goes and how it is authorised, as pi-ai 1.6.1 sends them:

* the URL ``{base}/responses?api-version={version}``; the base from ``base_url``, else
  ``AZURE_OPENAI_BASE_URL``, else ``https://{AZURE_OPENAI_RESOURCE_NAME}.openai.azure.com/
  openai/v1``, else ``model.base_url`` (an Azure host's bare path becomes ``/openai/v1``);
  the version from ``api_version``, else ``AZURE_OPENAI_API_VERSION``, else ``v1``;
* the body's ``model`` is the deployment: ``deployment_name``, else the model's entry in
  ``AZURE_OPENAI_DEPLOYMENT_NAME_MAP`` (``model-id=deployment,...``), else the model id;
* the key in an ``api-key`` header (``StreamOptions.api_key`` or ``AZURE_OPENAI_API_KEY``),
  or, beyond pi, a Microsoft Entra ID bearer token from ``token_provider`` (called for
  every request: e.g. azure-identity's ``get_bearer_token_provider``, which caches and
  refreshes the token).

``stream_azure_openai_responses`` is the registered stream function (settings from
``StreamOptions.env`` and the environment); ``azure_openai_responses(...)`` makes one with
settings of its own. No extra library is needed; ``entra_id_token_provider()`` makes a
``token_provider`` from an azure-identity credential (extra ``piagent[azure]``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

from ..errors import ProviderError
from ..models import Model
from ..stream import AssistantMessageEventStream, Context, StreamFn, StreamOptions
from ._budget import clamp_max_tokens
from ._compat import fold_system_messages
from ._keys import env_value, resolve_api_key
from ._responses_ids import PIPE_ID_PROVIDERS, normalize_pipe_id, normalize_whole_id
from ._transform import transform_messages
from .kit import HttpClient, ProviderCall, start_stream
from .openai_responses import _StreamState, build_responses_request

_AZURE_PIPE_ID_PROVIDERS = PIPE_ID_PROVIDERS | {"azure"}
"""pi-ai's ``AZURE_TOOL_CALL_PROVIDERS``."""

__all__ = ["azure_openai_responses", "entra_id_token_provider", "resolve_base_url",
           "stream_azure_openai_responses"]

API = "azure-openai-responses"
DEFAULT_API_VERSION = "v1"
_CLIENT = HttpClient(API)
_LABEL = "Azure OpenAI"
_AZURE_HOSTS = (".openai.azure.com", ".cognitiveservices.azure.com", ".ai.azure.com")
_MIN_OUTPUT_TOKENS = 16  # the Responses API rejects less (pi-ai 1.6.1)
ENTRA_ID_SCOPE = "https://cognitiveservices.azure.com/.default"


def azure_openai_responses(*, base_url: str | None = None, resource_name: str | None = None,
                           api_version: str | None = None, deployment_name: str | None = None,
                           token_provider: Callable[[], str] | None = None) -> StreamFn:
    """A stream function for ``azure-openai-responses`` with these settings (each ``None``:
    from ``StreamOptions.env``, the environment, then the model, as the module says).

    ``token_provider``: a callable returning a Microsoft Entra ID access token, sent as
    ``Authorization: Bearer``; it replaces the API key and is called for every request."""
    for name, value in (("base_url", base_url), ("resource_name", resource_name),
                        ("api_version", api_version), ("deployment_name", deployment_name)):
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise ValueError(f"azure_openai_responses: {name} must be a non-empty string or "
                             f"None, got {value!r}")
    if token_provider is not None and not callable(token_provider):
        raise TypeError("azure_openai_responses: token_provider must be a callable returning "
                        f"an Entra ID access token (str), got {type(token_provider).__name__}")
    settings = _Settings(base_url, resource_name, api_version, deployment_name, token_provider)

    def stream_fn(model: Model | None, context: Context,
                  options: StreamOptions | None = None) -> AssistantMessageEventStream:
        return start_stream(model, options, settings.run, context=context, client=_CLIENT,
                            api=API, label=_LABEL)

    return stream_fn


class _Settings:
    """One stream function's Azure settings (read-only after construction; any thread)."""

    def __init__(self, base_url: str | None, resource_name: str | None,
                 api_version: str | None, deployment_name: str | None,
                 token_provider: Callable[[], str] | None) -> None:
        self.base_url = base_url
        self.resource_name = resource_name
        self.api_version = api_version
        self.deployment_name = deployment_name
        self.token_provider = token_provider

    def run(self, call: ProviderCall) -> Iterator[None]:
        model = call.model
        options = call.options
        env = options.env
        base = resolve_base_url(model, self.base_url, self.resource_name, env)
        version = (self.api_version or env_value("AZURE_OPENAI_API_VERSION", env)
                   or DEFAULT_API_VERSION)
        url = f"{base}/responses?api-version={quote(version, safe='')}"
        headers: dict[str, str | None] = {}
        if self.token_provider is not None:
            try:
                token = self.token_provider()
            except ProviderError:
                raise
            except Exception as exc:  # a credential that cannot sign in: say so, no traceback
                raise ProviderError(f"The Azure OpenAI token_provider raised "
                                    f"{type(exc).__name__}: {exc}",
                                    provider=model.provider) from exc
            if not isinstance(token, str) or not token:
                raise ProviderError("The Azure OpenAI token_provider returned "
                                    f"{type(token).__name__} {token!r:.40}, not an access "
                                    "token (a non-empty str).", provider=model.provider)
            call.add_secret(token)
            headers["Authorization"] = f"Bearer {token}"
        else:
            api_key = resolve_api_key(model.provider, options.api_key, env)
            if not api_key:
                raise ProviderError(
                    f"No API key for provider: {model.provider}. Pass StreamOptions(api_key=...)"
                    ", set AZURE_OPENAI_API_KEY (looked for in StreamOptions.env and the "
                    "environment), or make the stream function with azure_openai_responses("
                    "token_provider=...) for a Microsoft Entra ID token.",
                    provider=model.provider)
            call.add_secret(api_key)
            headers["api-key"] = api_key
        headers.update(model.headers or {})
        headers.update(options.headers or {})
        # pi-ai's AZURE_TOOL_CALL_PROVIDERS: Azure's own call ids are call|item too
        normalize = normalize_pipe_id if model.provider in _AZURE_PIPE_ID_PROVIDERS \
            else normalize_whole_id
        messages = transform_messages(fold_system_messages(model, call.messages), model,
                                      normalize, foreign_thinking_as_text=False)
        limit = clamp_max_tokens(model, call.messages, options.max_tokens or model.max_tokens)
        # pi-ai's Azure tools take strict mode unless the compat says the server lacks it
        compat = model.compat or {}
        wire_model = model if "supportsStrictMode" in compat else \
            replace(model, compat={**compat, "supportsStrictMode": True})
        body = build_responses_request(wire_model, messages, options, max_tokens=limit)
        _azure_body(body, model, options, self.deployment_name)
        state = _StreamState(call.out, call.label)
        parse = call.event_parser()
        with call.open_sse(call.request(url, body, headers)) as sse:
            for event in sse.events():
                data = parse(event, call.label)
                if isinstance(data, dict) and state.handle(data):
                    break
                yield
        state.finish()


def _azure_body(body: dict[str, Any], model: Model, options: StreamOptions,
                deployment_name: str | None) -> None:
    """Where pi-ai's Azure request differs from its OpenAI one: the deployment as the
    model, the cache key whatever the retention (and no retention), the effort ``none``
    when thinking is off, at least 16 output tokens."""
    compat = model.compat or {}
    deployment = deployment_name or _mapped_deployment(model.id, options.env) or model.id
    out: dict[str, Any] = {"model": deployment}
    for key, value in body.items():
        if key != "model":
            out[key] = value
    for key in ("prompt_cache_key", "prompt_cache_retention", "prompt_cache_options"):
        out.pop(key, None)
    if options.session_id and compat.get("promptCacheKeyMode") != "disabled":
        out["prompt_cache_key"] = options.session_id[:64]
    if "max_output_tokens" in out:
        out["max_output_tokens"] = max(int(out["max_output_tokens"]), _MIN_OUTPUT_TOKENS)
    if model.reasoning and "reasoning" not in out:
        level_map = model.thinking_level_map or {}
        if not ("off" in level_map and level_map["off"] is None):
            out["reasoning"] = {"effort": level_map.get("off") or "none"}
    body.clear()
    body.update(out)


def _mapped_deployment(model_id: str, env: Mapping[str, str] | None) -> str | None:
    for entry in (env_value("AZURE_OPENAI_DEPLOYMENT_NAME_MAP", env) or "").split(","):
        name, _, deployment = entry.strip().partition("=")
        if name.strip() == model_id and deployment.strip():
            return deployment.strip()
    return None


def resolve_base_url(model: Model, base_url: str | None = None,
                     resource_name: str | None = None,
                     env: Mapping[str, str] | None = None) -> str:
    """The Azure OpenAI base URL of a request (see the module), without a trailing slash."""
    base = (base_url or "").strip() or (env_value("AZURE_OPENAI_BASE_URL", env) or "").strip()
    resource = resource_name or env_value("AZURE_OPENAI_RESOURCE_NAME", env)
    if not base and resource:
        base = f"https://{resource}.openai.azure.com/openai/v1"
    if not base:
        base = model.base_url
    if not base:
        raise ProviderError(
            "Azure OpenAI base URL is required. Set AZURE_OPENAI_BASE_URL or "
            "AZURE_OPENAI_RESOURCE_NAME (looked for in StreamOptions.env and the environment), "
            "or pass azure_openai_responses(base_url=... or resource_name=...), or set "
            "model.base_url.", provider=model.provider)
    trimmed = base.strip().rstrip("/")
    parts = urlsplit(trimmed)
    if not parts.scheme or not parts.netloc:
        raise ProviderError(f"Invalid Azure OpenAI base URL: {base}", provider=model.provider)
    host = (parts.hostname or "").lower()
    path = parts.path.rstrip("/")
    if host.endswith(_AZURE_HOSTS) and path in ("", "/openai", "/openai/v1/responses"):
        parts = parts._replace(path="/openai/v1", query="")
    return urlunsplit(parts).rstrip("/")


def entra_id_token_provider(credential: Any = None, *, scope: str = ENTRA_ID_SCOPE,
                            refresh_before_s: float = 300.0) -> Callable[[], str]:
    """A ``token_provider`` for ``azure_openai_responses``: Microsoft Entra ID access tokens
    from ``credential`` (anything with azure-identity's ``get_token(scope)`` returning a token
    with ``.token`` and ``.expires_on``, epoch seconds), kept until ``refresh_before_s``
    before they expire, then fetched again. ``credential=None``: azure-identity's
    ``DefaultAzureCredential()`` (environment, workload identity, managed identity, Azure
    CLI, ...), which needs the extra ``piagent[azure]``.

    Thread safety: the provider may be called from any thread; one fetch at a time."""
    if not isinstance(scope, str) or not scope:
        raise ValueError(f"entra_id_token_provider: scope must be a non-empty string, "
                         f"got {scope!r}")
    if isinstance(refresh_before_s, bool) or not isinstance(refresh_before_s, (int, float)) \
            or refresh_before_s < 0:
        raise ValueError("entra_id_token_provider: refresh_before_s must be a number of "
                         f"seconds >= 0, got {refresh_before_s!r}")
    if credential is None:
        try:
            from azure.identity import DefaultAzureCredential
        except ImportError as exc:
            raise ImportError(
                "entra_id_token_provider() without a credential uses azure-identity's "
                "DefaultAzureCredential, which is not installed: pip install 'piagent[azure]' "
                "(or pass credential=..., any object with get_token(scope))") from exc
        credential = DefaultAzureCredential()
    elif not callable(getattr(credential, "get_token", None)):
        raise TypeError("entra_id_token_provider: credential must have get_token(scope) "
                        f"(an azure-identity credential), got {type(credential).__name__}")
    lock = threading.Lock()  # guards cached: one fetch at a time, readers see a whole pair
    cached: list[tuple[str, float]] = []

    def provider() -> str:
        with lock:
            if cached and time.time() < cached[0][1] - refresh_before_s:
                return cached[0][0]
            token = credential.get_token(scope)
            value, expires = getattr(token, "token", None), getattr(token, "expires_on", None)
            if not isinstance(value, str) or not isinstance(expires, (int, float)):
                raise ProviderError(f"{type(credential).__name__}.get_token({scope!r}) "
                                    "returned no access token (.token, .expires_on)")
            cached[:] = [(value, float(expires))]
            return value

    return provider


stream_azure_openai_responses: StreamFn = azure_openai_responses()
"""The ``azure-openai-responses`` stream function (a ``StreamFn``; never raises)."""
