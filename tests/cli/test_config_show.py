"""``tether config show``: every key, its value with secrets masked, and the layer that set it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.cli.test_doctor import clean_environment


def config_show(workspace: Path, env: dict[str, str], *flags: str) -> dict[str, dict[str, Any]]:
    command = [sys.executable, "-m", "tether", "config", "show", "--workspace", str(workspace)]
    done = subprocess.run(
        [*command, "--json", *flags], env=env, capture_output=True, text=True, check=True
    )
    return {entry["key"]: entry for entry in map(json.loads, done.stdout.splitlines())}


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_each_key_names_the_last_layer_that_set_it(tmp_path: Path) -> None:
    home, workspace = tmp_path / "home", tmp_path / "workspace"
    user_file = home / ".config" / "tether" / "config.toml"
    write(user_file, '[provider]\nmodel = "from-user"\ntimeout = 30\n[kernel]\nmaxIterations = 5\n')
    workspace_file = workspace / ".tether" / "config.toml"
    write(workspace_file, "[kernel]\nmax_iterations = 3\n")
    env = clean_environment(home, TETHER_PROVIDER="openai", TETHER_MODEL="from-env")

    keys = config_show(workspace, env, "--model", "from-flag")

    assert keys["provider.model"] == {
        "key": "provider.model",
        "value": "from-flag",
        "source": "flag",
    }
    assert keys["provider.type"]["source"] == "environment TETHER_PROVIDER"
    assert keys["provider.timeout"] == {
        "key": "provider.timeout",
        "value": 30.0,
        "source": f"user file {user_file}",
    }
    assert keys["kernel.max_iterations"]["value"] == 3
    assert keys["kernel.max_iterations"]["source"] == f"workspace file {workspace_file}"
    assert keys["tools.approval"] == {"key": "tools.approval", "value": "ask", "source": "default"}
    assert len(keys) > 40  # every key, set or not


def test_secrets_are_masked(tmp_path: Path) -> None:
    write(
        tmp_path / ".config" / "tether" / "config.toml",
        "[[tools.mcp_servers]]\n"
        'name = "remote"\nurl = "https://user:hunter2@mcp.example/mcp"\n'
        'headers = { Authorization = "Bearer very-secret" }\n',
    )
    env = clean_environment(
        tmp_path, TETHER_SESSIONS_STORE="postgresql://tether:pg-secret@db.example/tether"
    )

    done = subprocess.run(
        [sys.executable, "-m", "tether", "config", "show", "--workspace", str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )

    for secret in ("hunter2", "very-secret", "pg-secret"):
        assert secret not in done.stdout
    keys = config_show(tmp_path, env)
    assert keys["sessions.store"]["value"] == "postgresql://tether:********@db.example/tether"
    (server,) = keys["tools.mcp_servers"]["value"]
    assert server["headers"] == {"Authorization": "********"}
    assert server["url"] == "https://user:********@mcp.example/mcp"


def test_an_invalid_layer_is_an_error_naming_it(tmp_path: Path) -> None:
    env = clean_environment(tmp_path, TETHER_MAX_ITERATIONS="many")
    done = subprocess.run(
        [sys.executable, "-m", "tether", "config", "show", "--workspace", str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1
    assert "TETHER_MAX_ITERATIONS" in done.stderr
    assert "kernel.max_iterations" in done.stderr
