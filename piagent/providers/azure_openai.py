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
settings of its own. No extra library is needed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

from ..errors import ProviderError
from ..models import Model
from ..stream import AssistantMessageEventStream, Context, StreamFn, StreamOptions
from ._budget import clamp_max_tokens
from ._compat import fold_system_messages
from ._keys import env_value, resolve_api_key
from ._transform import transform_messages
from .kit import HttpClient, ProviderCall, start_stream
from .openai_responses import _normalize_id, _StreamState, build_responses_request

__all__ = ["azure_openai_responses", "resolve_base_url", "stream_azure_openai_responses"]

API = "azure-openai-responses"
DEFAULT_API_VERSION = "v1"
_CLIENT = HttpClient(API)
_LABEL = "Azure OpenAI"
_AZURE_HOSTS = (".openai.azure.com", ".cognitiveservices.azure.com", ".ai.azure.com")
_MIN_OUTPUT_TOKENS = 16  # the Responses API rejects less (pi-ai 1.6.1)


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
            token = self.token_provider()
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
        messages = transform_messages(fold_system_messages(model, call.messages), model,
                                      _normalize_id)
        limit = clamp_max_tokens(model, call.messages, options.max_tokens or model.max_tokens)
        body = build_responses_request(model, messages, options, max_tokens=limit)
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
    model, the cache key whatever the retention, ``strict`` on tools unless the model's
    compat says the server lacks it, the effort ``none`` when thinking is off, no tier."""
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
    if "tools" in out and compat.get("supportsStrictMode", True):
        out["tools"] = [{**tool, "strict": tool.get("strict", False)} for tool in out["tools"]]
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


stream_azure_openai_responses: StreamFn = azure_openai_responses()
"""The ``azure-openai-responses`` stream function (a ``StreamFn``; never raises)."""
