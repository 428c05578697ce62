"""API keys and display names per provider (shared by the adapters and ``__init__``)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from urllib.parse import urlsplit

__all__ = ["ENV_VARS", "env_value", "is_local_url", "key_env_vars", "key_owner",
           "missing_key_message", "provider_label", "resolve_api_key"]

ENV_VARS: dict[str, tuple[str, ...]] = {
    "openai": ("OPENAI_API_KEY",),
    "anthropic": ("ANTHROPIC_API_KEY",),
    "google": ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
    "openrouter": ("OPENROUTER_API_KEY",),
    "groq": ("GROQ_API_KEY",),
    "xai": ("XAI_API_KEY",),
    "cerebras": ("CEREBRAS_API_KEY",),
    "deepseek": ("DEEPSEEK_API_KEY",),
    "mistral": ("MISTRAL_API_KEY",),
    "together": ("TOGETHER_API_KEY",),
    "fireworks": ("FIREWORKS_API_KEY",),
    "zai": ("ZAI_API_KEY",),
    "moonshot": ("MOONSHOT_API_KEY",),
    "azure-openai": ("AZURE_OPENAI_API_KEY",),
}
"""Environment variables read, in order, when ``options.api_key`` is not given; any other
provider's come from the catalogue (pi-ai's ``env-api-keys``), see ``key_env_vars``."""

_LABELS = {
    "openai": "OpenAI", "anthropic": "Anthropic", "google": "Google", "openrouter": "OpenRouter",
    "groq": "Groq", "xai": "xAI", "cerebras": "Cerebras", "deepseek": "DeepSeek",
    "mistral": "Mistral", "together": "Together", "fireworks": "Fireworks", "zai": "z.ai",
    "moonshot": "Moonshot", "ollama": "Ollama", "vllm": "vLLM", "llamacpp": "llama.cpp",
    "lmstudio": "LM Studio", "azure-openai": "Azure OpenAI",
}
_LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1", "0.0.0.0", "host.docker.internal"})


def provider_label(provider: str) -> str:
    """The name used in messages ("OpenAI", "Groq", pi-ai's name of a catalogued provider
    such as "Hugging Face", or the provider id itself)."""
    label = _LABELS.get(provider)
    if label is None:
        from ._catalogue import catalogue_name

        label = catalogue_name(provider) or provider
    return label


def is_local_url(url: str) -> bool:
    """True for servers on this machine or the local network (no key needed)."""
    host = (urlsplit(url).hostname or "").lower()
    return host in _LOCAL_HOSTS or host.endswith(".local") or host.startswith(("192.168.", "10."))


def env_value(name: str, env: Mapping[str, str] | None = None) -> str | None:
    """``env[name]``, else ``os.environ[name]`` (an empty value counts as unset), else ``None``."""
    return (env.get(name) if env is not None else None) or os.environ.get(name) or None


def key_env_vars(provider: str) -> tuple[str, ...]:
    """The variables ``provider``'s key is read from: ``ENV_VARS``, else the catalogue's
    (read from the catalogue only for a provider ``ENV_VARS`` does not name)."""
    names = ENV_VARS.get(provider)
    if names is not None:
        return names
    from ._catalogue import catalogue_key_vars

    return catalogue_key_vars(provider)


def key_owner(provider: str, api_owner: str) -> str:
    """Whose key variables a request of ``provider`` on ``api_owner``'s API reads: its own
    when it has some (MiniMax on the Anthropic API reads ``MINIMAX_API_KEY``, as pi-ai),
    else the API owner's (any other server speaking Anthropic's API: ``ANTHROPIC_API_KEY``)."""
    return provider if key_env_vars(provider) else api_owner


def resolve_api_key(provider: str, explicit: str | None,
                    env: Mapping[str, str] | None = None) -> str | None:
    """``explicit``, else the provider's variable from ``env`` (``StreamOptions.env``) or the
    environment, else ``None``."""
    if explicit:
        return explicit
    for name in key_env_vars(provider):
        value = env_value(name, env)
        if value:
            return value
    return None


def missing_key_message(provider: str) -> str:
    """What to do when a provider that needs a key has none."""
    names = " or ".join(key_env_vars(provider))
    where = f"set {names}" if names else "set the provider's API key variable"
    return (f"No API key for {provider_label(provider)}. Pass StreamOptions(api_key=...) "
            f"or {where}.")
