"""The proxy protocol carries a model's thinking levels (pi's ``thinkingLevelMap``)."""

from __future__ import annotations

from piagent.providers import get_model
from piagent.proxy._protocol import model_from_dict, model_to_dict


def test_the_proxy_carries_the_thinking_levels() -> None:
    kimi = get_model("moonshotai", "kimi-k3")
    data = model_to_dict(kimi)
    assert data["thinkingLevelMap"] == kimi.thinking_level_map
    assert model_from_dict(data).thinking_level_map == kimi.thinking_level_map
    assert "thinkingLevelMap" not in model_to_dict(get_model("openai", "gpt-4o-mini"))
