"""The Vertex AI adapter for Gemini (api ``google-vertex``): ``stream_vertex``.

The request body and the chunk mapping are the Gemini adapter's (``google``,
``_google_stream``): pi-ai sends both APIs through one SDK and one mapping. What differs is
who is asked and how: a Vertex API key in ``x-goog-api-key``, or an OAuth access token
(``Authorization: Bearer``) for a project and location, from Application Default
Credentials or a service-account file (``_vertex_auth``; google-auth, ``piagent[vertex]``).

URLs, as pi-ai's client builds them:

* a model ``base_url`` without ``{location}`` (a proxy, a local server) is used as given:
  ``{base_url}[/v1]/publishers/google/models/{id}:streamGenerateContent?alt=sse`` (``/v1``
  unless the URL names a version already);
* with a key: ``https://aiplatform.googleapis.com/v1/publishers/google/models/…``;
* with a project: ``https://{location}-aiplatform.googleapis.com/v1/projects/{project}/
  locations/{location}/publishers/google/models/…`` (``global``: ``aiplatform.googleapis.com``;
  ``us`` and ``eu``: ``aiplatform.{location}.rep.googleapis.com``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from urllib.parse import urlsplit

from ..models import Model
from ..stream import AssistantMessageEventStream, Context, StreamOptions
from ._google_stream import GoogleStreamState
from ._vertex_auth import VertexTarget, access_token, vertex_target
from .google import build_google_request
from .kit import HttpClient, ProviderCall, start_stream

__all__ = ["stream_vertex", "vertex_url"]

API = "google-vertex"
LABEL = "Google Vertex"
_CLIENT = HttpClient("google-vertex")
_VERSION_PART = re.compile(r"^v\d+(?:beta\d*)?$")
_MULTI_REGIONAL = frozenset(("us", "eu"))


def stream_vertex(model: Model | None, context: Context,
                  options: StreamOptions | None = None) -> AssistantMessageEventStream:
    """Stream one Gemini response from Vertex AI (a ``StreamFn``).

    Credentials as pi-ai reads them (``_vertex_auth``): ``options.api_key`` or
    ``GOOGLE_CLOUD_API_KEY``; else ``GOOGLE_CLOUD_PROJECT``/``GCLOUD_PROJECT``,
    ``GOOGLE_CLOUD_LOCATION`` and an access token from ``GOOGLE_APPLICATION_CREDENTIALS`` or
    Application Default Credentials. Never raises: failures end the stream with an
    ``ErrorEvent`` naming what is missing; neither key nor token appears in it.
    """
    return start_stream(model, options, _run, context=context, client=_CLIENT, api=API,
                        label=LABEL)


def vertex_url(model: Model, target: VertexTarget) -> str:
    """The ``streamGenerateContent`` URL of ``model`` for ``target`` (see the module doc)."""
    tail = f"publishers/google/models/{model.id}:streamGenerateContent?alt=sse"
    base = model.base_url.strip()
    if base and "{location}" not in base:
        root = base.rstrip("/")
        parts = urlsplit(root).path.split("/")
        if not any(_VERSION_PART.match(part) for part in parts):
            root += "/v1"
        return f"{root}/{tail}"
    location = target.location or ""
    if target.api_key is not None:
        return f"https://aiplatform.googleapis.com/v1/{tail}"
    if location == "global":
        host = "https://aiplatform.googleapis.com"
    elif location in _MULTI_REGIONAL:
        host = f"https://aiplatform.{location}.rep.googleapis.com"
    else:
        host = f"https://{location}-aiplatform.googleapis.com"
    return f"{host}/v1/projects/{target.project}/locations/{location}/{tail}"


def _run(call: ProviderCall) -> Iterator[None]:
    options = call.options
    model = call.model
    target = vertex_target(options.api_key, options.env)
    headers: dict[str, str | None] = {}
    if target.api_key is not None:
        call.add_secret(target.api_key)
        headers["x-goog-api-key"] = target.api_key
    else:
        token = access_token(target)
        call.add_secret(token)
        headers["Authorization"] = f"Bearer {token}"
    headers.update(model.headers or {})
    headers.update(options.headers or {})
    body = build_google_request(model, call.messages, options)
    state = GoogleStreamState(call.out, LABEL, model.provider or API)
    parse = call.event_parser()  # parse_event_json unless on_provider_stream_event is set
    with call.open_sse(call.request(vertex_url(model, target), body, headers)) as sse:
        for event in sse.events():
            state.handle(parse(event, call.label))
            yield  # hand the queued events to the consumer
        tail = sse.trailing_text
    state.finish(tail)
