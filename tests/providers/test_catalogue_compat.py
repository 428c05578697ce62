"""What a catalogued model's fields change in its requests (issue 51): pi-ai's compat flags
that piagent's builders act on, and whose key a request reads. The same behaviour is compared
with pi-ai 1.6.1 itself in tests/reference/test_catalogue_requests.py."""

from __future__ import annotations

from dataclasses import replace

from piagent.messages import SystemMessage, ToolDeclaration, UserMessage
from piagent.providers import get_model
from piagent.providers.anthropic import build_anthropic_headers, build_anthropic_request
from piagent.providers.kit import key_env_vars, key_owner, missing_key_message, resolve_api_key
from piagent.providers.openai_completions import get_compat
from piagent.stream import StreamOptions

WEATHER = ToolDeclaration("weather", "Weather of a city", {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
MESSAGES = [SystemMessage(content="Be brief.", tools_added=[WEATHER]), UserMessage("Weather?")]


def test_fireworks_anthropic_flags_reach_the_request() -> None:
    """forceAdaptiveThinking, supportsCacheControlOnTools: false and
    supportsEagerToolInputStreaming: false, as a Fireworks model on the Anthropic API has."""
    model = get_model("fireworks", "accounts/fireworks/models/minimax-m3")
    compat = model.compat or {}
    assert (compat["forceAdaptiveThinking"], compat["supportsCacheControlOnTools"],
            compat["supportsEagerToolInputStreaming"]) == (True, False, False)
    options = StreamOptions(reasoning="medium")
    body = build_anthropic_request(model, MESSAGES, options)
    assert body["thinking"] == {"type": "adaptive", "display": "summarized"}
    assert body["output_config"] == {"effort": "medium"}
    assert body["tools"] == [{"name": "weather", "description": "Weather of a city",
                              "input_schema": WEATHER.parameters}]
    headers = build_anthropic_headers(model, options, "k", body)
    assert headers["anthropic-beta"] == "fine-grained-tool-streaming-2025-05-14"
    assert headers["x-api-key"] == "k"


def test_without_the_flags_the_last_tool_is_a_cache_breakpoint() -> None:
    model = get_model("anthropic", "claude-sonnet-4-5")
    body = build_anthropic_request(model, MESSAGES, StreamOptions())
    assert body["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert body["tools"][-1]["eager_input_streaming"] is True
    assert "anthropic-beta" not in build_anthropic_headers(model, StreamOptions(), "k", body)


def test_copilot_sends_its_token_as_a_bearer_token() -> None:
    model = get_model("github-copilot", "claude-fable-5")
    assert model.api == "anthropic-messages"
    headers = build_anthropic_headers(model, StreamOptions(), "ghu_token", {})
    assert headers["Authorization"] == "Bearer ghu_token" and "x-api-key" not in headers
    assert key_env_vars("github-copilot") == ("COPILOT_GITHUB_TOKEN",)


def test_a_provider_reads_its_own_key_on_another_vendors_api() -> None:
    """MiniMax on the Anthropic API reads MINIMAX_API_KEY (pi-ai's env-api-keys); a server
    the catalogue does not know reads the API owner's variable."""
    assert get_model("minimax", "MiniMax-M2.7").api == "anthropic-messages"
    assert key_owner("minimax", "anthropic") == "minimax"
    assert key_owner("my-anthropic-proxy", "anthropic") == "anthropic"
    assert key_owner("opencode", "google") == "opencode"
    env = {"MINIMAX_API_KEY": "mm", "ANTHROPIC_API_KEY": "an"}
    assert resolve_api_key(key_owner("minimax", "anthropic"), None, env) == "mm"
    assert resolve_api_key(key_owner("my-anthropic-proxy", "anthropic"), None, env) == "an"
    assert key_env_vars("huggingface") == ("HF_TOKEN",)
    assert missing_key_message("huggingface") == (
        "No API key for Hugging Face. Pass StreamOptions(api_key=...) or set HF_TOKEN.")


def test_a_catalogued_provider_is_a_cloud_service_wherever_it_points() -> None:
    """At 127.0.0.1 (a gateway, a test server) a Hugging Face model keeps pi-ai's compat;
    a provider the catalogue does not list gets the local-server compat there."""
    cloud = replace(get_model("huggingface", "deepseek-ai/DeepSeek-R1"),
                    base_url="http://127.0.0.1:9/v1")
    assert get_compat(cloud).supports_reasoning_effort is True
    local = replace(cloud, provider="my-server")
    assert get_compat(local).supports_reasoning_effort is False


def test_thinking_levels_clamp_to_what_the_model_offers() -> None:
    """pi-ai's getSupportedThinkingLevels / clampThinkingLevel over thinkingLevelMap."""
    from piagent.models import Model, clamp_thinking_level, supported_thinking_levels

    plain = Model(id="m", api="openai-completions", provider="p", base_url="http://x",
                  reasoning=True)
    assert supported_thinking_levels(plain) == ("off", "minimal", "low", "medium", "high")
    assert clamp_thinking_level(plain, "max") == "high"  # down when nothing is above
    assert supported_thinking_levels(replace(plain, reasoning=False)) == ("off",)
    kimi = replace(plain, thinking_level_map={"off": None, "minimal": None, "medium": None,
                                              "max": "max"})
    assert supported_thinking_levels(kimi) == ("low", "high", "max")
    assert [clamp_thinking_level(kimi, lv) for lv in ("minimal", "medium", "xhigh")] == [
        "low", "high", "max"]


def test_the_mapped_level_and_off_value_reach_the_body() -> None:
    from piagent.models import Model
    from piagent.providers.openai_completions import build_completions_request

    model = Model(id="m", api="openai-completions", provider="baseten",
                  base_url="https://inference.baseten.co/v1", reasoning=True,
                  thinking_level_map={"off": "none", "low": "quick"})
    assert build_completions_request(model, MESSAGES, StreamOptions(reasoning="low"))[
        "reasoning_effort"] == "quick"
    assert build_completions_request(model, MESSAGES, StreamOptions())[
        "reasoning_effort"] == "none"
    stuck = replace(model, provider="moonshotai", thinking_level_map={"off": None},
                    compat={"thinkingFormat": "deepseek"})
    assert "thinking" not in build_completions_request(stuck, MESSAGES, StreamOptions())
    assert build_completions_request(stuck, MESSAGES, StreamOptions(reasoning="high"))[
        "thinking"] == {"type": "enabled"}

