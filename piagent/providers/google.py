"""The Google Gemini adapter (api ``google-generative-ai``): ``stream_google``.

Owns the request side of the wire mapping: the ``streamGenerateContent?alt=sse`` request
body built from a ``Context`` (``systemInstruction``, ``contents``, function declarations,
thinking config). The chunk → pi event mapping is ``_google_stream``; transport, retries and
abort live in ``kit`` (``_call``, ``_start``); replay rules in ``_transform``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Any

from ..errors import ProviderError
from ..messages import (
    AgentMessage,
    AssistantMessage,
    ImageContent,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolDeclaration,
    ToolResultMessage,
    UserMessage,
)
from ..models import Model
from ..stream import AssistantMessageEventStream, Context, StreamOptions
from ..transcript import get_current_tools
from ._budget import clamp_max_tokens
from ._compat import fold_system_messages
from ._google_stream import LABEL, GoogleStreamState
from ._keys import is_local_url, key_owner, missing_key_message, resolve_api_key
from ._prompt_cache import compat_value
from ._strict import strict_sampling
from ._transform import leading_system_text, transform_messages
from .kit import (
    HttpClient,
    ProviderCall,
    start_stream,
)

__all__ = ["build_google_request", "stream_google"]

API = "google-generative-ai"
_CLIENT = HttpClient("google")

_GEMINI_VERSION = re.compile(r"gemini-(\d+)(?:\.(\d+))?")
_BASE64 = re.compile(r"^[A-Za-z0-9+/_-]+={0,2}$")
_INVALID_ID_CHARS = re.compile(r"[^a-zA-Z0-9_-]")
# Gemini 3 insists on a signature on replayed function calls in thinking mode; calls that
# have none (from another provider) carry this documented sentinel instead.
_SKIP_SIGNATURE = "skip_thought_signature_validator"
# pi's thinking budgets (tokens) for Gemini 2.5
_BUDGETS_PRO = {"minimal": 128, "low": 2048, "medium": 8192, "high": 32768}
_BUDGETS_FLASH = {"minimal": 128, "low": 2048, "medium": 8192, "high": 24576}
_LEVELS = {"minimal": "MINIMAL", "low": "LOW", "medium": "MEDIUM", "high": "HIGH",
           "xhigh": "HIGH", "max": "HIGH"}
_PRO_LEVELS = {"minimal": "LOW", "low": "LOW", "medium": "HIGH", "high": "HIGH",
               "xhigh": "HIGH", "max": "HIGH"}


def stream_google(model: Model | None, context: Context,
                  options: StreamOptions | None = None) -> AssistantMessageEventStream:
    """Stream one response from the Gemini API (a ``StreamFn``).

    The key comes from ``options.api_key``, else ``GEMINI_API_KEY`` or ``GOOGLE_API_KEY``,
    and travels in the ``x-goog-api-key`` header. Never raises: failures end the stream
    with an ``ErrorEvent`` whose message never contains the key; an abort ends it
    ``"aborted"`` with the partial content kept.
    """
    return start_stream(model, options, _run, context=context, client=_CLIENT, api=API,
                        label=LABEL)


# --- the request --------------------------------------------------------------------------


def _gemini_major(model: Model) -> int:
    found = _GEMINI_VERSION.search(model.id)
    return int(found.group(1)) if found else 0


def _needs_call_ids(model: Model) -> bool:
    """Function-call ids are only sent to models that match calls and results by id."""
    return (model.id.startswith(("claude-", "gpt-oss-")) or _gemini_major(model) >= 3)


def _normalize_tool_call_id(call_id: str) -> str:
    return _INVALID_ID_CHARS.sub("_", call_id)[:64]


def _valid_signature(signature: str | None) -> str | None:
    if signature and len(signature) % 4 == 0 and _BASE64.match(signature):
        return signature
    return None


def build_google_request(model: Model, messages: Sequence[AgentMessage],
                         options: StreamOptions) -> dict[str, Any]:
    """The JSON body of ``:streamGenerateContent`` for a context's messages.

    The transcript is first made safe to replay (``_transform.transform_messages``).
    """
    limit = clamp_max_tokens(model, messages, options.max_tokens or model.max_tokens)
    messages = transform_messages(fold_system_messages(model, messages, supported=False), model,
                                  _normalize_tool_call_id)
    prompt, leading = leading_system_text(messages)
    body: dict[str, Any] = {"contents": _convert_messages(model, messages[leading:])}
    if prompt:
        body["systemInstruction"] = {"parts": [{"text": prompt}], "role": "user"}
    tools = get_current_tools(messages)
    if tools:
        # strict (JSON-schema constrained) tools: Gemini 3 and later, or as the compat says
        strict = compat_value(model.compat, "supportsStrictMode", "supports_strict_mode",
                              None)
        supports = _gemini_major(model) >= 3 if strict is None else bool(strict)
        declarations, validated = [], False
        for tool in tools:
            schema = (strict_sampling(tool, supports)
                      if tool.constrained_sampling is not None else None)
            validated = validated or schema is not None
            declarations.append(_declaration(tool, schema))
        body["tools"] = [{"functionDeclarations": declarations}]
        if validated:  # Gemini then enforces the schemas
            body["toolConfig"] = {"functionCallingConfig": {"mode": "VALIDATED"}}
    config: dict[str, Any] = {}
    if options.temperature is not None:
        config["temperature"] = options.temperature
    config["maxOutputTokens"] = limit
    thinking = _thinking_config(model, options)
    if thinking is not None:
        config["thinkingConfig"] = thinking
    if config:
        body["generationConfig"] = config
    return body


def _declaration(tool: ToolDeclaration, strict: dict[str, Any] | None) -> dict[str, Any]:
    out: dict[str, Any] = {"name": tool.name, "description": tool.description}
    parameters = strict or tool.parameters
    if parameters:
        out["parametersJsonSchema"] = _const_as_enum(parameters)
    return out


# schema keywords whose value maps names to subschemas, and those holding subschemas
_NAME_MAPS = frozenset(("properties", "patternProperties", "$defs", "definitions",
                        "dependentSchemas", "dependencies"))
_SUBSCHEMAS = frozenset(("additionalProperties", "unevaluatedProperties", "propertyNames",
                         "items", "prefixItems", "additionalItems", "unevaluatedItems",
                         "contains", "allOf", "anyOf", "oneOf", "not", "if", "then", "else",
                         "contentSchema"))


def _const_as_enum(schema: Any, name_map: bool = False) -> Any:
    """``schema`` with each string or number ``const`` sent as a one-value ``enum``: Gemini
    ignores ``const`` in ``parametersJsonSchema`` but honours ``enum`` (pi-ai 1.6). The
    same object comes back when nothing changes (the usual case: no copy)."""
    if isinstance(schema, list):
        items = [_const_as_enum(item) for item in schema]
        return schema if all(a is b for a, b in zip(items, schema, strict=True)) else items
    if not isinstance(schema, dict):
        return schema
    changed: dict[str, Any] = {}
    for key, value in schema.items():
        if isinstance(value, (dict, list)):
            if name_map or key in _SUBSCHEMAS:
                new = _const_as_enum(value)
            elif key in _NAME_MAPS:
                new = _const_as_enum(value, True)
            else:
                continue
            if new is not value:
                changed[key] = new
    const = schema.get("const", schema) if not name_map and "enum" not in schema else schema
    rewrite = (const is not schema and isinstance(const, (str, int, float))
               and not isinstance(const, bool))
    if not changed and not rewrite:
        return schema
    out = {**schema, **changed}
    if rewrite:
        del out["const"]
        out["enum"] = [const]
    return out


def _thinking_config(model: Model, options: StreamOptions) -> dict[str, Any] | None:
    if not model.reasoning:
        return None
    level = options.reasoning if options.reasoning != "off" else None
    major = _gemini_major(model)
    is_pro = "pro" in model.id
    if major >= 3:
        if level is None:  # Gemini 3 cannot stop thinking: think least, and show none of it
            return {"thinkingLevel": "LOW" if is_pro else "MINIMAL"}
        levels = _PRO_LEVELS if is_pro else _LEVELS
        return {"includeThoughts": True, "thinkingLevel": levels.get(level, "HIGH")}
    if level is None:
        # 2.5 Pro cannot turn thinking off; the others stop with a zero budget
        return None if is_pro else {"thinkingBudget": 0}
    budgets = {**(_BUDGETS_PRO if is_pro else _BUDGETS_FLASH), **(options.thinking_budgets or {})}
    budget = budgets.get(level, budgets["high"])
    return {"includeThoughts": True, "thinkingBudget": budget}


def _convert_messages(model: Model, messages: Sequence[AgentMessage]) -> list[dict[str, Any]]:
    contents: list[dict[str, Any]] = []
    with_ids = _needs_call_ids(model)
    gemini3 = _gemini_major(model) >= 3
    for message in messages:
        if isinstance(message, UserMessage):
            _append(contents, "user", _user_parts(message.content))
        elif isinstance(message, AssistantMessage):
            _append(contents, "model", _model_parts(message, with_ids, gemini3))
        elif isinstance(message, ToolResultMessage):
            response, images = _tool_result_parts(message, with_ids, gemini3)
            last = contents[-1] if contents else None
            # the function responses of one batch share a user turn (as pi)
            if last is not None and last["role"] == "user" \
                    and any("functionResponse" in part for part in last["parts"]):
                last["parts"].append(response)
            else:
                contents.append({"role": "user", "parts": [response]})
            if images:  # before Gemini 3: the images follow in a user turn of their own
                contents.append({"role": "user", "parts": [{"text": "Tool result image:"},
                                                           *images]})
    return contents  # system messages: all folded into systemInstruction


def _append(contents: list[dict[str, Any]], role: str, parts: list[dict[str, Any]]) -> None:
    """Add a turn (none without parts); turns are not merged, as pi sends them."""
    if parts:
        contents.append({"role": role, "parts": parts})


def _inline(image: ImageContent) -> dict[str, Any]:
    return {"inlineData": {"mimeType": image.mime_type, "data": image.data}}


def _user_parts(content: str | Sequence[Any]) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"text": content}]
    parts: list[dict[str, Any]] = []
    for block in content:
        if isinstance(block, TextContent):
            parts.append({"text": block.text})
        elif isinstance(block, ImageContent):
            parts.append(_inline(block))
    return parts


def _model_parts(message: AssistantMessage, with_ids: bool,
                 gemini3: bool) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    # of parallel calls only the first carries a signature; the sentinel is for messages
    # whose calls carry none at all (replayed from another provider)
    needs_sentinel = gemini3 and not any(
        isinstance(b, ToolCall) and _valid_signature(b.thought_signature)
        for b in message.content)
    for block in message.content:
        if isinstance(block, TextContent):
            signature = _valid_signature(block.text_signature)
            # an empty part that carries a signature keeps Gemini's reasoning chain intact
            if block.text or signature:
                part: dict[str, Any] = {"text": block.text}
                if signature:
                    part["thoughtSignature"] = signature
                parts.append(part)
        elif isinstance(block, ThinkingContent):
            signature = _valid_signature(block.thinking_signature)
            if block.thinking or signature:
                part = {"thought": True, "text": block.thinking}
                if signature:
                    part["thoughtSignature"] = signature
                parts.append(part)
        elif isinstance(block, ToolCall):
            call: dict[str, Any] = {"name": block.name, "args": block.arguments}
            if with_ids and block.id:
                call["id"] = _normalize_tool_call_id(block.id)
            part = {"functionCall": call}
            signature = _valid_signature(block.thought_signature)
            if signature:
                part["thoughtSignature"] = signature
            elif needs_sentinel:
                part["thoughtSignature"] = _SKIP_SIGNATURE
            parts.append(part)
    return parts


def _tool_result_parts(result: ToolResultMessage, with_ids: bool, gemini3: bool
                       ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The function response part, and the image parts that follow it in a turn of their
    own (before Gemini 3)."""
    text = "\n".join(b.text for b in result.content if isinstance(b, TextContent))
    images = [b for b in result.content if isinstance(b, ImageContent)]
    if not text.strip():
        text = "(see attached image)" if images else ""
    response: dict[str, Any] = {"name": result.tool_name,
                                "response": {"error" if result.is_error else "output": text}}
    if with_ids and result.tool_call_id:
        response["id"] = _normalize_tool_call_id(result.tool_call_id)
    if images and gemini3:  # Gemini 3 takes images inside the function response
        response["parts"] = [_inline(image) for image in images]
        return {"functionResponse": response}, []
    return {"functionResponse": response}, [_inline(image) for image in images]


# --- the response -------------------------------------------------------------------------


def _run(call: ProviderCall) -> Iterator[None]:
    options = call.options
    model = call.model
    owner = key_owner(model.provider, "google")
    api_key = resolve_api_key(owner, options.api_key, options.env)
    headers: dict[str, str | None] = {}
    if api_key:
        call.add_secret(api_key)
        headers["x-goog-api-key"] = api_key  # a header, never ?key=, so URLs stay key-free
    elif not is_local_url(model.base_url):
        raise ProviderError(missing_key_message(owner), provider=model.provider)
    headers.update(model.headers or {})
    headers.update(options.headers or {})
    body = build_google_request(model, call.messages, options)
    url = f"{model.base_url.rstrip('/')}/models/{model.id}:streamGenerateContent?alt=sse"
    state = GoogleStreamState(call.out)
    parse = call.event_parser()  # parse_event_json unless on_provider_stream_event is set
    with call.open_sse(call.request(url, body, headers)) as sse:
        for event in sse.events():
            state.handle(parse(event, call.label))
            yield  # hand the queued events to the consumer
        tail = sse.trailing_text
    state.finish(tail)
