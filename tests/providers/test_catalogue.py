"""The bundled catalogue, ``get_model``/``get_models`` and ``stream_simple`` dispatch."""

from __future__ import annotations

import dataclasses

import pytest

from piagent.messages import AssistantMessage, TextContent, UserMessage
from piagent.models import Model, ModelCost
from piagent.providers import (
    get_api,
    get_model,
    get_models,
    get_providers,
    register_api,
    stream_simple,
)
from piagent.stream import AssistantMessageEventStream, Context, DoneEvent, StreamOptions

from .sse_script import Reply


def test_main_vendors_have_priced_models():
    assert {"openai", "anthropic", "google", "groq", "openrouter", "xai", "together",
            "cerebras", "fireworks", "huggingface", "nvidia"} <= set(get_providers())
    sonnet = get_model("anthropic", "claude-sonnet-4-5")
    assert (sonnet.api, sonnet.base_url, sonnet.reasoning, sonnet.input) == (
        "anthropic-messages", "https://api.anthropic.com", True, ("text", "image"))
    assert (sonnet.cost.input, sonnet.cost.output, sonnet.cost.cache_read,
            sonnet.cost.cache_write) == (3, 15, 0.3, 3.75)
    flash = get_model("google", "gemini-2.5-flash")
    assert (flash.cost.input, flash.cost.output, flash.context_window) == (0.3, 2.5, 1048576)
    groq = get_model("groq", "openai/gpt-oss-120b")
    assert (groq.api, groq.cost.input, groq.cost.output) == ("openai-completions", 0.15, 0.6)
    for provider in get_providers():
        for model in get_models(provider):
            assert get_api(model.api) is not None, (provider, model.id, model.api)


def test_the_issue_examples_are_catalogued():
    """Issue 51: Gemini 3 thinks and takes images; xAI speaks Responses, as in pi-ai."""
    gemini = get_model("google", "gemini-3-flash-preview")
    assert (gemini.api, gemini.reasoning, "image" in gemini.input) == (
        "google-generative-ai", True, True)
    assert {m.api for m in get_models("xai")} == {"openai-responses"}
    together = get_models("together")[0]
    assert (together.provider, together.base_url) == ("together", "https://api.together.ai/v1")


def test_a_model_on_an_api_piagent_does_not_speak_says_so():
    from piagent.providers import unsupported_models

    codex = unsupported_models("openai-codex")["openai-codex"]
    assert set(codex.values()) == {"openai-codex-responses"}
    with pytest.raises(LookupError, match=r"^Provider 'openai-codex' serves its models over "
                                          r"openai-codex-responses, which piagent does not "
                                          r"speak \('piagent models --all' lists them\)"):
        get_model("openai-codex", next(iter(codex)))
    # Azure's models are served since issue 52: one on Chat Completions, the others on
    # Azure's Responses API
    assert {m.api for m in get_models("azure")} == {"openai-completions",
                                                    "azure-openai-responses"}
    assert "azure" not in unsupported_models()
    assert unsupported_models("openai") == {} or all(
        api not in ("openai-responses", "openai-completions")
        for api in unsupported_models("openai")["openai"].values())


def test_an_unknown_model_at_an_address_warns_once_what_was_assumed():
    with pytest.warns(UserWarning) as caught:
        model = get_model("vllm", "my-model", base_url="http://127.0.0.1:8000/v1")
    assert len(caught) == 1 and caught[0].filename == __file__
    assert str(caught[0].message) == (
        "vllm/my-model is not in the catalogue, so piagent assumes a 128,000-token context "
        "window, 16,384 output tokens, no reasoning, text-only input and no prices; if the "
        "model differs, set them: dataclasses.replace(model, context_window=..., "
        "max_tokens=..., reasoning=True, input=('text', 'image'), cost=ModelCost(...)).")
    assert (model.context_window, model.reasoning, model.input) == (128_000, False, ("text",))


def test_a_catalogued_model_at_an_address_keeps_its_fields():
    known = get_model("google", "gemini-3-flash-preview")
    moved = get_model("google", "gemini-3-flash-preview", base_url="http://127.0.0.1:9/v1beta",
                      api="google-generative-ai")
    assert moved == dataclasses.replace(known, base_url="http://127.0.0.1:9/v1beta")


def test_get_model_returns_fresh_objects():
    a = get_model("openai", "gpt-4o-mini")
    a.max_tokens = 1
    assert get_model("openai", "gpt-4o-mini").max_tokens == 16384


def test_unknown_lookups_explain():
    with pytest.raises(LookupError, match="Unknown provider 'nope'. Known providers: "):
        get_model("nope", "x")
    with pytest.raises(LookupError, match="Unknown model 'gpt-0' for provider 'openai'"):
        get_model("openai", "gpt-0")
    assert get_models("nope") == []


def test_stream_simple_without_model():
    message = stream_simple(None, Context([])).result(5)
    assert message.stop_reason == "error"
    assert "Pass a model" in message.error_message


def test_stream_simple_unknown_api():
    model = Model(id="x", api="carrier-pigeon", provider="p", base_url="http://x")
    message = stream_simple(model, Context([])).result(5)
    assert message.stop_reason == "error"
    assert message.error_message.startswith("No stream function is registered for api "
                                            "'carrier-pigeon'")
    assert "register_api" in message.error_message


def test_register_api_dispatches():
    seen = []

    def fn(model, context, options):
        seen.append((model.id, options))
        stream = AssistantMessageEventStream()
        stream.push(DoneEvent("stop", AssistantMessage(content=[TextContent("hi")])))
        return stream

    register_api("test-echo", fn)
    model = Model(id="e", api="test-echo", provider="p", base_url="http://x")
    assert stream_simple(model, Context([UserMessage(content="x")])).result(5).text == "hi"
    assert seen[0][0] == "e" and isinstance(seen[0][1], StreamOptions)


def test_lazy_anthropic_and_google_registration():
    from piagent.providers import get_api

    assert get_api("anthropic-messages") is not None
    assert get_api("google-generative-ai") is not None


def test_get_model_at_another_address():
    """A catalogued model at a local server keeps its prices; the wire becomes Chat
    Completions unless the address is the provider's own or api= says otherwise."""
    known = get_model("openai", "gpt-4o-mini")
    local = get_model("openai", "gpt-4o-mini", base_url="http://127.0.0.1:8765/v1")
    assert (local.api, local.base_url, local.cost) == (
        "openai-completions", "http://127.0.0.1:8765/v1", known.cost)
    own = get_model("openai", "gpt-4o-mini", base_url=known.base_url)
    assert own.api == known.api
    chosen = get_model("openai", "gpt-4o-mini", base_url="http://127.0.0.1:8765/v1",
                       api="openai-responses")
    assert chosen.api == "openai-responses"
    with pytest.warns(UserWarning, match="not in the catalogue"):
        anything = get_model("vllm", "qwen2.5", base_url="http://127.0.0.1:8000/v1")
    assert (anything.id, anything.provider, anything.api) == (
        "qwen2.5", "vllm", "openai-completions")
    with pytest.raises(ValueError, match=r"^get_model\(base_url=...\) must be an http:// or "
                                         r"https:// URL, not '127.0.0.1:8765/v1' \(did you mean "
                                         r"'http://127.0.0.1:8765/v1'\?\)\.$"):
        get_model("openai", "gpt-4o-mini", base_url="127.0.0.1:8765/v1")


def test_a_web_page_404_from_a_responses_url_names_the_completions_api(sse_server):
    sse_server.add(Reply(status=404, content_type="text/html",
                         body=[b"<!DOCTYPE HTML><html><body>Not Found</body></html>"]))
    model = get_model("openai", "gpt-4o-mini", base_url=sse_server.url,
                      api="openai-responses")
    result = stream_simple(model, Context([UserMessage("hi")]),
                           StreamOptions(api_key="k", max_retries=0)).result(10)
    assert result.error_message == (
        f"OpenAI Responses API error (404): {sse_server.url}/responses is not an endpoint of "
        "this server (it answered with a web page). Check the base URL; a server that speaks "
        "only Chat Completions (Ollama, vLLM, llama.cpp, LM Studio, ...) needs "
        'api="openai-completions" (get_model(provider, model_id, base_url=..., '
        'api="openai-completions")).')


def test_tiered_prices_above_200k_input_tokens():
    """pi-ai's cost.tiers: above the threshold the whole request is priced at the tier."""
    from piagent.messages import Usage
    from piagent.models import CostTier, calculate_cost

    model = get_model("google", "gemini-2.5-pro")
    assert model.cost.tiers == (CostTier(200_000, 2.5, 15.0, 0.25, 0.0),)
    assert model.cost.cache_read == 0.125
    small = calculate_cost(model, Usage(input=150_000, output=1000, cache_read=50_000))
    assert small.total == pytest.approx((150_000 * 1.25 + 1000 * 10 + 50_000 * 0.125) / 1e6)
    big = calculate_cost(model, Usage(input=150_000, output=1000, cache_read=50_001))
    assert big.total == pytest.approx((150_000 * 2.5 + 1000 * 15 + 50_001 * 0.25) / 1e6)
    # the highest threshold below the input wins, whatever the order
    two = Model(id="m", api="openai-completions", provider="p", base_url="http://x",
                cost=ModelCost(1, 1, tiers=(CostTier(500, 3, 3), CostTier(100, 2, 2))))
    assert calculate_cost(two, Usage(input=600)).total == pytest.approx(600 * 3 / 1e6)
    assert calculate_cost(two, Usage(input=200)).total == pytest.approx(200 * 2 / 1e6)
    with pytest.raises(ValueError, match="cost.tiers entries need a number inputTokensAbove"):
        CostTier.from_json([{"input": 1}])


def test_the_guess_warning_points_at_the_callers_line():
    """Through resolve_model and Agent(model=...) too: the user's line, not piagent's."""
    from piagent.providers import resolve_model

    with pytest.warns(UserWarning, match="not in the catalogue") as caught:
        resolve_model("vllm/other-model", base_url="http://127.0.0.1:8000/v1")
    assert caught[0].filename == __file__


def test_one_hour_cache_writes_cost_twice_the_input_price():
    """pi-ai's calculateCost: the ``cache_write_1h`` part of the cache writes is priced at
    twice the input price (Anthropic's 1-hour retention), the rest at the cache-write price."""
    from piagent.messages import Usage
    from piagent.models import calculate_cost

    model = Model(id="m", api="anthropic-messages", provider="p", base_url="http://x",
                  cost=ModelCost(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75))
    cost = calculate_cost(model, Usage(input=10, cache_write=3000, cache_write_1h=2000))
    assert cost.cache_write == pytest.approx((1000 * 3.75 + 2000 * 6.0) / 1e6)
    assert cost.total == pytest.approx(cost.input + cost.cache_write)
    assert calculate_cost(model, Usage(cache_write=3000)).cache_write == pytest.approx(
        3000 * 3.75 / 1e6)


def test_the_catalogue_read_line_by_line_is_the_file_parsed_whole():
    """models.json's entries are cut from their lines (kept as text, parsed when asked for);
    the same file in another layout is parsed whole, with the same result."""
    import json
    from importlib import resources

    from piagent.providers._catalogue import _split_lines, read_catalogue

    text = resources.files("piagent.providers").joinpath("models.json").read_text(
        encoding="utf-8")
    whole = json.loads(text)
    assert _split_lines(text) is not None  # the generator's layout: the fast path is taken
    for layout in (text, json.dumps(whole, indent=2)):
        data = read_catalogue(layout)
        assert {p: {m: json.loads(e) for m, e in entries.items()}
                for p, entries in data["providers"].items()} == whole["providers"]
        assert {k: v for k, v in data.items() if k != "providers"} == {
            k: v for k, v in whole.items() if k != "providers"}
    assert _split_lines(json.dumps(whole, indent=2)) is None
