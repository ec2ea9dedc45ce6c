"""LLM providers: canonical messages in, streamed text and one completion out.

- :mod:`tether.providers.openai` — Chat Completions (OpenAI and compatible servers)
- :mod:`tether.providers.anthropic` — the Anthropic Messages API
- :mod:`tether.providers.gemini` — the Gemini API (``generateContent``)
- :mod:`tether.providers.scripted` — plays back a script, for tests and the headless harness
- :mod:`tether.providers.retry` — backoff with jitter, ``Retry-After``, the give-up error

:func:`make_provider` builds the configured one. The HTTP providers are imported only when one
is made, so importing this package does not load httpx.

A caller iterates ``stream()`` inside ``contextlib.aclosing`` (or to its end) so that a stream
given up early releases its connection at once. A :class:`Completion` lists the tool calls the
model made; ``finish_reason`` uses the words ``stop``, ``length``, ``tool_calls`` and
``content_filter`` whatever the provider, but a caller should look at ``tool_calls`` to decide
whether to run tools (some compatible servers say ``stop`` after calling tools).
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import os
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, assert_never

from tether.config import ProviderConfig, ProviderType
from tether.protocol import ConfigError
from tether.providers.base import (
    Completion,
    ModelRequest,
    Provider,
    ProviderEvent,
    TextDelta,
    ThoughtDelta,
)
from tether.providers.errors import ScriptExhausted, ScriptNotUsedUp
from tether.providers.retry import RetryPolicy, Sleep
from tether.providers.scripted import (
    FunctionProvider,
    ScriptedProvider,
    ScriptTurn,
    TurnFunction,
    load_function,
)
from tether.secrets import PROVIDER_KEY_VARIABLES

if TYPE_CHECKING:
    import httpx

if "httpx" not in sys.modules and "httpx._main" not in sys.modules:
    # httpx imports its command-line client when click, rich and pygments are installed (~80 ms
    # of a cold first request here); tether never runs it. A None entry makes that import fail,
    # which httpx expects (it then defines a ``main`` that explains what is missing).
    sys.modules["httpx._main"] = None  # type: ignore[assignment]

__all__ = [
    "Completion",
    "FunctionProvider",
    "ModelRequest",
    "Provider",
    "ProviderEvent",
    "RetryPolicy",
    "ScriptExhausted",
    "ScriptNotUsedUp",
    "ScriptTurn",
    "ScriptedProvider",
    "TextDelta",
    "ThoughtDelta",
    "TurnFunction",
    "make_provider",
    "warm",
]


def warm(kind: ProviderType | None, base_url: str | None = None) -> None:
    """Load what the first request of a ``kind`` provider would: its module, the HTTP stack
    (httpx, aiohttp) and, unless ``base_url`` is a plain ``http://`` one, the TLS context's
    root certificates. Blocking; a server calls it on a thread of its own right after its
    handshake, so that the first run does not pay for it (a run that needs a module still
    loading waits on the import lock, not twice)."""
    if kind is None or kind == "scripted":
        return
    from tether.providers.client import tls_context

    if not (base_url or "").lower().startswith("http://"):
        tls_context().loaded()
    importlib.import_module(f"tether.providers.{kind}")


def make_provider(
    config: ProviderConfig,
    client: httpx.AsyncClient | Callable[[], httpx.AsyncClient] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    sleep: Sleep | None = None,
) -> Provider:
    """The provider ``config`` describes, over ``client`` (its own client when None).

    ``client`` may be a function that returns the shared client, called only for a provider that
    speaks HTTP (so that a scripted run never imports httpx).

    ``environ`` (default ``os.environ``) supplies API keys and ``OPENAI_BASE_URL`` /
    ``ANTHROPIC_BASE_URL`` / ``GOOGLE_GEMINI_BASE_URL``; ``sleep`` replaces ``asyncio.sleep``
    between retries and in scripted delays. Raises ConfigError (-32013) naming the key at fault.
    """
    provider = _make(config, client, environ, sleep)
    overrides = {
        "tools": config.supports_tools,
        "system": config.supports_system,
    }
    chosen = {name: value for name, value in overrides.items() if value is not None}
    if chosen:
        provider.capabilities = dataclasses.replace(provider.capabilities, **chosen)
    return provider


def _scripted(config: ProviderConfig, sleep: Sleep) -> Provider:
    """A script file played back, or a function (``provider.function``) deciding each turn."""
    if config.function and config.script:
        raise _config_error(
            "provider.function", "give the scripted provider a script or a function, not both"
        )
    if config.function:
        function = load_function(config.function)
        return FunctionProvider(function, model=config.model, sleep=sleep, record=False)
    if not config.script:
        raise _config_error(
            "provider.script", "the scripted provider needs a script file (or provider.function)"
        )
    return ScriptedProvider.from_file(config.script, model=config.model, sleep=sleep, record=False)


def _make(
    config: ProviderConfig,
    client: httpx.AsyncClient | Callable[[], httpx.AsyncClient] | None,
    environ: Mapping[str, str] | None,
    sleep: Sleep | None,
) -> Provider:
    env = os.environ if environ is None else environ
    pause = sleep or asyncio.sleep
    kind = config.type
    if kind is None:
        raise _config_error(
            "provider.type", "no provider is configured (openai, anthropic, gemini or scripted)"
        )
    if kind == "scripted":
        return _scripted(config, pause)
    if not config.model:
        raise _config_error("provider.model", f"the {kind} provider needs a model name")
    retry = RetryPolicy(max_retries=config.max_retries, sleep=pause)
    if callable(client):
        client = client()
    if kind == "openai":
        from tether.providers import openai

        return openai.OpenAIProvider(
            base_url=(url := _base_url(config, env, "OPENAI_BASE_URL", openai.DEFAULT_BASE_URL)),
            api_key=_api_key(
                config,
                env,
                *PROVIDER_KEY_VARIABLES["openai"],
                needed=url == openai.DEFAULT_BASE_URL,
            ),
            client=client,
            model=config.model,
            timeout=config.timeout,
            retry=retry,
        )
    if kind == "anthropic":
        from tether.providers import anthropic

        return anthropic.AnthropicProvider(
            base_url=(
                url := _base_url(config, env, "ANTHROPIC_BASE_URL", anthropic.DEFAULT_BASE_URL)
            ),
            api_key=_api_key(
                config,
                env,
                *PROVIDER_KEY_VARIABLES["anthropic"],
                needed=url == anthropic.DEFAULT_BASE_URL,
            ),
            client=client,
            model=config.model,
            timeout=config.timeout,
            retry=retry,
        )
    if kind == "gemini":
        from tether.providers import gemini

        return gemini.GeminiProvider(
            base_url=(
                url := _base_url(config, env, "GOOGLE_GEMINI_BASE_URL", gemini.DEFAULT_BASE_URL)
            ),
            api_key=_api_key(
                config,
                env,
                *PROVIDER_KEY_VARIABLES["gemini"],
                needed=url == gemini.DEFAULT_BASE_URL,
            ),
            client=client,
            model=config.model,
            timeout=config.timeout,
            retry=retry,
        )
    assert_never(kind)


def _config_error(key: str, problem: str) -> ConfigError:
    return ConfigError(f"{key}: {problem}", {"key": key})


def _base_url(config: ProviderConfig, env: Mapping[str, str], variable: str, default: str) -> str:
    url = config.base_url or env.get(variable) or default
    if not url.startswith(("http://", "https://")):
        key = "provider.base_url" if config.base_url else variable
        raise _config_error(key, f"{url!r} is not an http:// or https:// URL")
    return url


def _api_key(
    config: ProviderConfig, env: Mapping[str, str], *default_variables: str, needed: bool
) -> str | None:
    """The key from ``provider.api_key_env``, else from the first default variable that is set.

    ``needed`` (the provider's own hosted endpoint, which refuses every request without a key):
    a missing key is a ConfigError now, said before any request is sent, rather than the
    endpoint's 401. A local or proxied endpoint may need none."""
    if config.api_key_env:
        key = env.get(config.api_key_env)
        if not key:
            raise _config_error(
                "provider.api_key_env", f"the environment variable {config.api_key_env} is not set"
            )
        return key
    key = next((env[name] for name in default_variables if env.get(name)), None)
    if key is None and needed:
        variables = " or ".join(default_variables)
        raise _config_error(
            "provider.api_key_env",
            f"no API key: set {variables} (or name another variable in provider.api_key_env)",
        )
    return key
