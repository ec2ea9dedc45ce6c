"""make_provider: the configured provider, or a ConfigError naming the key at fault."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tether.config import ProviderConfig
from tether.protocol import ConfigError, ErrorCode
from tether.providers import FunctionProvider, ScriptedProvider, make_provider
from tether.providers.anthropic import AnthropicProvider
from tether.providers.openai import OpenAIProvider


def config_error(config: ProviderConfig, environ: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as caught:
        make_provider(config, None, environ=environ or {})
    assert caught.value.code == ErrorCode.CONFIG_ERROR
    key = caught.value.data["key"]
    assert caught.value.message.startswith(f"{key}:")
    return str(key)


def test_no_provider_type_is_a_config_error_naming_provider_type() -> None:
    assert config_error(ProviderConfig()) == "provider.type"


@pytest.mark.parametrize("kind", ["openai", "anthropic", "gemini"])
def test_an_http_provider_without_a_model_is_a_config_error_naming_provider_model(
    kind: str,
) -> None:
    assert config_error(ProviderConfig.model_validate({"type": kind})) == "provider.model"


def test_a_scripted_provider_without_a_script_is_a_config_error_naming_provider_script() -> None:
    assert config_error(ProviderConfig(type="scripted")) == "provider.script"


def test_a_missing_script_file_is_a_config_error_naming_provider_script(tmp_path: Path) -> None:
    config = ProviderConfig(type="scripted", script=str(tmp_path / "missing.json"))
    assert config_error(config) == "provider.script"


def test_an_unset_api_key_env_is_a_config_error_naming_it() -> None:
    config = ProviderConfig(type="openai", model="m", api_key_env="MY_KEY")
    assert config_error(config) == "provider.api_key_env"


def test_a_base_url_that_is_not_http_is_a_config_error() -> None:
    config = ProviderConfig(type="openai", model="m", base_url="localhost:11434/v1")
    assert config_error(config) == "provider.base_url"


async def test_openai_honours_openai_base_url_and_openai_api_key() -> None:
    provider = make_provider(
        ProviderConfig(type="openai", model="llama3"),
        None,
        environ={"OPENAI_BASE_URL": "http://127.0.0.1:11434/v1/", "OPENAI_API_KEY": "k1"},
    )
    try:
        assert isinstance(provider, OpenAIProvider)
        assert provider.url == "http://127.0.0.1:11434/v1/chat/completions"
        assert provider.model == "llama3"
    finally:
        await provider.aclose()


async def test_a_configured_base_url_wins_over_the_environment_and_api_key_env_names_the_key() -> (
    None
):
    config = ProviderConfig(
        type="anthropic",
        model="claude",
        base_url="http://proxy.test",
        api_key_env="TEAM_KEY",
        max_retries=5,
    )
    provider = make_provider(
        config, None, environ={"ANTHROPIC_BASE_URL": "http://other.test", "TEAM_KEY": "k2"}
    )
    try:
        assert isinstance(provider, AnthropicProvider)
        assert provider.url == "http://proxy.test/v1/messages"
        assert provider.retry.max_retries == 5
    finally:
        await provider.aclose()


async def test_the_default_endpoints_are_the_public_apis() -> None:
    keys = {"OPENAI_API_KEY": "k", "ANTHROPIC_API_KEY": "k"}
    openai = make_provider(ProviderConfig(type="openai", model="m"), None, environ=keys)
    anthropic = make_provider(ProviderConfig(type="anthropic", model="m"), None, environ=keys)
    try:
        assert isinstance(openai, OpenAIProvider) and isinstance(anthropic, AnthropicProvider)
        assert openai.url == "https://api.openai.com/v1/chat/completions"
        assert anthropic.url == "https://api.anthropic.com/v1/messages"
    finally:
        await openai.aclose()
        await anthropic.aclose()


@pytest.mark.parametrize(
    ("kind", "variable"),
    [
        ("openai", "OPENAI_API_KEY"),
        ("anthropic", "ANTHROPIC_API_KEY"),
        ("gemini", "GEMINI_API_KEY"),
    ],
)
def test_a_hosted_endpoint_without_an_api_key_is_a_config_error_before_any_request(
    kind: str, variable: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        make_provider(ProviderConfig.model_validate({"type": kind, "model": "m"}), environ={})
    assert caught.value.data["key"] == "provider.api_key_env"
    assert caught.value.message.startswith("provider.api_key_env: no API key: set " + variable)


async def test_a_local_endpoint_needs_no_api_key() -> None:
    config = ProviderConfig(type="openai", model="m", base_url="http://127.0.0.1:11434/v1")
    provider = make_provider(config, None, environ={})
    await provider.aclose()


def test_a_scripted_provider_is_made_from_its_script_file(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"text": "hi"}]))
    provider = make_provider(ProviderConfig(type="scripted", script=str(script)), None)
    assert isinstance(provider, ScriptedProvider)
    assert provider.remaining == 1


def test_a_scripted_provider_with_a_function_asks_that_function() -> None:
    provider = make_provider(
        ProviderConfig(type="scripted", function="tests.providers.test_scripted:echo"), None
    )
    assert isinstance(provider, FunctionProvider)
    assert provider.function.__name__ == "echo"


@pytest.mark.parametrize(
    "spec",
    [
        "no_colon_here",
        "tests.providers.no_such_module:echo",
        "tests.providers.test_scripted:no_such_function",
        "tests.providers.test_scripted:__doc__.upper.nothing",
        "tests.providers.test_scripted:__name__",  # a string: not callable
    ],
)
def test_a_function_that_cannot_be_loaded_is_a_config_error_naming_provider_function(
    spec: str,
) -> None:
    assert config_error(ProviderConfig(type="scripted", function=spec)) == "provider.function"


def test_a_script_and_a_function_together_are_a_config_error(tmp_path: Path) -> None:
    config = ProviderConfig(
        type="scripted", script=str(tmp_path / "s.json"), function="tests.providers:x"
    )
    assert config_error(config) == "provider.function"
