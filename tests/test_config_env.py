"""Every configuration key from the environment: one naming rule, parsing by type, clear errors,
the source shown, the docs' table kept equal to the models."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tether.config import (
    ENV_ALIASES,
    ENV_VARS,
    TetherConfig,
    config_keys,
    env_var,
    environment_table,
    explain_config,
    load_config,
)
from tether.protocol import ConfigError

DOCS = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"

# A valid value for each key whose default is None (the others are set to their default).
SAMPLES: dict[str, Any] = {
    "provider.type": "openai",
    "provider.base_url": "http://localhost:11434/v1",
    "provider.model": "qwen2.5-coder:7b",
    "provider.api_key_env": "MY_KEY",
    "provider.script": "/tmp/script.json",
    "provider.function": "turns:decide",
    "telemetry.enabled": True,
    "provider.supports_tools": False,
    "provider.supports_system": True,
    "kernel.system_prompt": "Be brief.",
    "tools.enabled": ["read_file", "search_text"],
    "sessions.path": "/tmp/sessions.db",
    "sessions.ttl": "30d",
    "context.max_tokens": 8192,
    "checkpoints.path": "/tmp/checkpoints",
    "log.file": "/tmp/tether.log",
}


@pytest.fixture
def environ(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir()
    return {"HOME": str(home)}


def get_dotted(config: TetherConfig, dotted: str) -> Any:
    section, key = dotted.split(".")
    return getattr(getattr(config, section), key)


def env_text(value: Any) -> str:
    """A value as a user would write it in a variable."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return json.dumps(value)
    return str(value)


def sample(dotted: str) -> Any:
    if dotted in SAMPLES:
        return SAMPLES[dotted]
    return get_dotted(TetherConfig(), dotted)


@pytest.mark.parametrize("dotted", config_keys())
def test_every_key_is_set_by_its_variable_and_shown_as_its_source(
    dotted: str, environ: dict[str, str]
) -> None:
    value = sample(dotted)
    assert value is not None, f"add a sample value of {dotted} to SAMPLES"
    environ[env_var(dotted)] = env_text(value)
    config = load_config(workspace=None, environ=environ)
    assert get_dotted(config, dotted) == value
    [entry] = [e for e in explain_config(workspace=None, environ=environ) if e.key == dotted]
    assert entry.source == f"environment {env_var(dotted)}"


def test_the_naming_rule() -> None:
    assert env_var("provider.max_retries") == "TETHER_PROVIDER_MAX_RETRIES"
    assert env_var("log.file") == "TETHER_LOG_FILE"
    assert env_var("log.level") == "TETHER_LOG_LEVEL"  # the variable the command line read


def test_every_key_has_one_variable_of_its_own() -> None:
    names = [env_var(key) for key in config_keys()]
    assert len(set(names)) == len(names)
    assert set(names) | set(ENV_ALIASES) == set(ENV_VARS)
    # the variables that are not keys stay free
    assert not {"TETHER_SANDBOX_NAMESPACES", "TETHER_COMMAND_ID", "TETHER_PYTHON"} & set(ENV_VARS)


@pytest.mark.parametrize("var", sorted(ENV_ALIASES))
def test_the_short_names_still_work_and_the_full_name_wins(
    var: str, environ: dict[str, str]
) -> None:
    dotted = ENV_ALIASES[var]
    assert env_var(dotted) != var
    value = sample(dotted)
    environ[var] = env_text(value)
    assert get_dotted(load_config(workspace=None, environ=environ), dotted) == value
    [entry] = [e for e in explain_config(workspace=None, environ=environ) if e.key == dotted]
    assert entry.source == f"environment {var}"
    default = get_dotted(TetherConfig(), dotted)
    if default is not None and default != value:
        environ[env_var(dotted)] = env_text(default)
        assert get_dotted(load_config(workspace=None, environ=environ), dotted) == default


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("read_file,search_text", ["read_file", "search_text"]),
        (" read_file , search_text ,", ["read_file", "search_text"]),
        ('["a,b"]', ["a,b"]),
        ("read_file", ["read_file"]),
    ],
)
def test_a_list_is_a_comma_list_or_a_json_array(
    text: str, expected: list[str], environ: dict[str, str]
) -> None:
    environ["TETHER_TOOLS_SANDBOX_READABLE"] = text
    assert load_config(workspace=None, environ=environ).tools.sandbox_readable == expected


def test_mcp_servers_and_hooks_are_json(environ: dict[str, str]) -> None:
    environ["TETHER_TOOLS_MCP_SERVERS"] = json.dumps(
        [{"name": "git", "command": "uvx", "args": ["mcp-server-git"], "env": {"A": "b"}}]
    )
    environ["TETHER_HOOKS_STOP"] = '[{"command": "make test"}]'
    config = load_config(workspace=None, environ=environ)
    [server] = config.tools.mcp_servers
    assert (server.name, server.command, server.args, server.env) == (
        "git",
        "uvx",
        ["mcp-server-git"],
        {"A": "b"},
    )
    assert [hook.command for hook in config.hooks.stop] == ["make test"]


@pytest.mark.parametrize(
    ("var", "text", "problem"),
    [
        ("TETHER_TOOLS_MCP_SERVERS", "[{name: git}]", "expected JSON"),
        ("TETHER_TOOLS_ENABLED", '["read_file"', "expected a JSON array or a comma-separated list"),
        ("TETHER_TOOLS_SANDBOX_NETWORK", "perhaps", "valid boolean"),
        ("TETHER_PROVIDER_TIMEOUT", "soon", "valid number"),
        ("TETHER_LOG_LEVEL", "loud", "'debug', 'info', 'warning' or 'error'"),
        ("TETHER_HOOKS_STOP", '{"command": "x"}', "valid list"),
        ("TETHER_TOOLS_MCP_SERVERS", '[{"name": "x", "command": "y", "bogus": 1}]', "unknown key"),
    ],
)
def test_a_bad_value_is_an_error_naming_the_variable(
    var: str, text: str, problem: str, environ: dict[str, str]
) -> None:
    environ[var] = text
    with pytest.raises(ConfigError) as excinfo:
        load_config(workspace=None, environ=environ)
    assert excinfo.value.data["source"] == f"environment {var}"
    assert excinfo.value.message.startswith(f"invalid configuration in environment {var}: ")
    assert problem in excinfo.value.message


def test_the_log_level_is_read_in_any_case(environ: dict[str, str]) -> None:
    environ["TETHER_LOG_LEVEL"] = "DEBUG"
    assert load_config(workspace=None, environ=environ).log.level == "debug"


def test_the_environment_may_set_what_a_workspace_file_may_not(
    tmp_path: Path, environ: dict[str, str]
) -> None:
    workspace = tmp_path / "project"
    (workspace / ".tether").mkdir(parents=True)
    (workspace / ".tether" / "config.toml").write_text("[kernel]\nmax_iterations = 4\n")
    environ["TETHER_TOOLS_SANDBOX"] = "off"
    environ["TETHER_LOG_FILE"] = str(tmp_path / "tether.log")
    config = load_config(workspace=workspace, environ=environ)
    assert (config.tools.sandbox, config.kernel.max_iterations) == ("off", 4)
    assert config.log.file == str(tmp_path / "tether.log")
    (workspace / ".tether" / "config.toml").write_text('[log]\nfile = "/tmp/elsewhere.log"\n')
    with pytest.raises(ConfigError) as excinfo:
        load_config(workspace=workspace, environ=environ)
    assert excinfo.value.data["key"] == "log.file"


def documented_table() -> str:
    text = DOCS.read_text(encoding="utf-8")
    found = re.search(
        r"<!-- environment table: begin -->\n(.*?)<!-- environment table: end -->",
        text,
        flags=re.DOTALL,
    )
    assert found is not None, "docs/configuration.md lost its environment table markers"
    return found.group(1)


def test_the_docs_table_is_the_one_the_models_make() -> None:
    expected = environment_table()
    assert documented_table() == expected, (
        "docs/configuration.md's environment table is stale; put there what "
        "tether.config.environment_table() returns"
    )


def test_config_show_names_the_variable(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(home),
        "TETHER_PROVIDER_MAX_RETRIES": "7",
        "TETHER_TOOLS_ENABLED": "read_file,search_text",
    }
    shown = subprocess.run(
        [sys.executable, "-m", "tether", "config", "show", "--json", "--workspace", str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    entries = {entry["key"]: entry for entry in map(json.loads, shown.stdout.splitlines())}
    assert entries["provider.max_retries"] == {
        "key": "provider.max_retries",
        "value": 7,
        "source": "environment TETHER_PROVIDER_MAX_RETRIES",
    }
    assert entries["tools.enabled"]["value"] == ["read_file", "search_text"]
    assert entries["tools.enabled"]["source"] == "environment TETHER_TOOLS_ENABLED"


def test_a_bad_variable_stops_a_command_with_one_clear_line(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home), "TETHER_TOOLS_ENABLED": "[x"}
    shown = subprocess.run(
        [sys.executable, "-m", "tether", "config", "show", "--workspace", str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 1
    assert "Traceback" not in shown.stderr
    assert "environment TETHER_TOOLS_ENABLED: tools.enabled: expected a JSON array" in shown.stderr
