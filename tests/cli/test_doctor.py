"""``tether doctor`` as a user runs it: the real command against a loopback model endpoint, with
a healthy setup, a wrong key, a wrong model, an unreachable URL and a read-only store."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.model_server import ModelServer

KEY = "sk-doctor-test-1234567890"


def clean_environment(home: Path, **settings: str) -> dict[str, str]:
    """The test's environment without the TETHER_* and provider variables of whoever runs it."""
    drop = ("TETHER_", "OPENAI_", "ANTHROPIC_", "GEMINI_", "GOOGLE_", "XDG_")
    env = {name: value for name, value in os.environ.items() if not name.startswith(drop)}
    return {**env, "HOME": str(home), **settings}


def doctor(workspace: Path, env: dict[str, str]) -> tuple[int, dict[str, dict[str, Any]], str]:
    """The exit code, the verdicts by check, and the text output of ``tether doctor``."""
    command = [sys.executable, "-m", "tether", "doctor", "--workspace", str(workspace)]
    as_json = subprocess.run([*command, "--json"], env=env, capture_output=True, text=True)
    verdicts = {
        verdict["check"]: verdict for verdict in map(json.loads, as_json.stdout.splitlines())
    }
    text = subprocess.run(command, env=env, capture_output=True, text=True)
    assert text.returncode == as_json.returncode
    return as_json.returncode, verdicts, text.stdout


@pytest.fixture(scope="module")
def endpoint() -> Iterator[ModelServer]:
    with ModelServer.in_thread(models=("fake-model", "fake-model-large"), api_key=KEY) as server:
        yield server


@pytest.fixture
def openai_env(tmp_path: Path, endpoint: ModelServer) -> dict[str, str]:
    return clean_environment(
        tmp_path,
        TETHER_PROVIDER="openai",
        TETHER_MODEL="fake-model",
        TETHER_BASE_URL=endpoint.openai_url,
        OPENAI_API_KEY=KEY,
        TETHER_SESSIONS_STORE="sqlite",
        TETHER_SESSIONS_PATH=str(tmp_path / "store" / "sessions.db"),
    )


def test_a_healthy_setup_passes_every_check_and_exits_0(
    tmp_path: Path, openai_env: dict[str, str]
) -> None:
    code, verdicts, text = doctor(tmp_path, openai_env)
    assert code == 0, text
    for check in ("config", "provider", "key", "endpoint", "model", "store"):
        assert verdicts[check]["status"] == "ok", verdicts[check]
    assert "accepts it" in verdicts["key"]["detail"]
    assert "2 models listed" in verdicts["endpoint"]["detail"]
    assert "schema version" in verdicts["store"]["detail"]
    assert KEY not in text
    assert text.splitlines()[-1].startswith("tether doctor: ready")


@pytest.mark.parametrize("kind", ["anthropic", "gemini"])
def test_every_provider_lists_its_models_in_its_own_format(
    tmp_path: Path, endpoint: ModelServer, kind: str
) -> None:
    env = clean_environment(
        tmp_path,
        TETHER_PROVIDER=kind,
        TETHER_MODEL="fake-model-large",
        TETHER_BASE_URL=endpoint.url,
        **{"ANTHROPIC_API_KEY" if kind == "anthropic" else "GEMINI_API_KEY": KEY},
    )
    code, verdicts, _ = doctor(tmp_path, env)
    assert code == 0
    assert verdicts["model"]["status"] == "ok"


def test_a_wrong_key_fails_the_key_check_and_names_its_variable(
    tmp_path: Path, openai_env: dict[str, str]
) -> None:
    code, verdicts, text = doctor(tmp_path, {**openai_env, "OPENAI_API_KEY": "sk-wrong-key-0000"})
    assert code == 1
    assert verdicts["key"]["status"] == "fail"
    assert "refuses the key in OPENAI_API_KEY (HTTP 401)" in verdicts["key"]["detail"]
    assert "set OPENAI_API_KEY" in verdicts["key"]["fix"]
    assert verdicts["endpoint"]["status"] == "ok"
    assert "sk-wrong-key-0000" not in text


def test_a_missing_key_for_an_endpoint_that_wants_one_fails(
    tmp_path: Path, openai_env: dict[str, str]
) -> None:
    env = {name: value for name, value in openai_env.items() if name != "OPENAI_API_KEY"}
    code, verdicts, _ = doctor(tmp_path, env)
    assert code == 1
    assert verdicts["key"]["status"] == "fail"
    assert "OPENAI_API_KEY is not set" in verdicts["key"]["detail"]


def test_a_wrong_model_fails_and_suggests_listed_ones(
    tmp_path: Path, openai_env: dict[str, str]
) -> None:
    code, verdicts, _ = doctor(tmp_path, {**openai_env, "TETHER_MODEL": "fake-modle"})
    assert code == 1
    model = verdicts["model"]
    assert model["status"] == "fail"
    assert "fake-modle is not among the 2 models" in model["detail"]
    assert "fake-model" in model["fix"]
    assert "TETHER_MODEL" in model["fix"]


def test_an_unreachable_url_fails_the_endpoint_and_skips_the_model(
    tmp_path: Path, openai_env: dict[str, str]
) -> None:
    with socket.socket() as closed:  # a port nothing listens on once it is closed
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    code, verdicts, _ = doctor(tmp_path, {**openai_env, "TETHER_BASE_URL": url})
    assert code == 1
    assert verdicts["endpoint"]["status"] == "fail"
    assert f"cannot reach {url}/models" in verdicts["endpoint"]["detail"]
    assert "TETHER_BASE_URL" in verdicts["endpoint"]["fix"]
    assert verdicts["model"]["status"] == "skip"


@contextlib.contextmanager
def read_only(path: Path) -> Iterator[None]:
    """``path`` may not be written: ``chattr +i`` for root (who ignores modes), else its mode."""
    if os.geteuid() != 0:
        path.chmod(0o444)
        try:
            yield
        finally:
            path.chmod(0o644)
        return
    made = subprocess.run(["chattr", "+i", str(path)], capture_output=True, check=False)
    if made.returncode != 0:
        pytest.skip(f"no immutable files here: {made.stderr.strip()}")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def test_a_read_only_store_fails_the_store_check(
    tmp_path: Path, openai_env: dict[str, str]
) -> None:
    code, _, _ = doctor(tmp_path, openai_env)  # creates the database
    assert code == 0
    database = Path(openai_env["TETHER_SESSIONS_PATH"])
    with read_only(database):
        code, verdicts, _ = doctor(tmp_path, openai_env)
    assert code == 1
    store = verdicts["store"]
    assert store["status"] == "fail"
    assert "opens but refuses writes" in store["detail"]
    assert "writable" in store["fix"]


def test_no_provider_fails_and_says_how_to_configure_one(tmp_path: Path) -> None:
    code, verdicts, text = doctor(tmp_path, clean_environment(tmp_path))
    assert code == 1
    assert verdicts["provider"]["status"] == "fail"
    assert "TETHER_PROVIDER" in verdicts["provider"]["fix"]
    assert "FAIL  provider: no provider is configured — fix: set TETHER_PROVIDER" in text


def test_an_invalid_user_config_fails_the_config_check(tmp_path: Path) -> None:
    config = tmp_path / ".config" / "tether" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('[provider]\ntype = "nonsense"\n')
    code, verdicts, _ = doctor(tmp_path, clean_environment(tmp_path))
    assert code == 1
    assert verdicts["config"]["status"] == "fail"
    assert "provider.type" in verdicts["config"]["detail"]


def test_an_mcp_server_that_cannot_start_fails_and_one_that_starts_lists_its_tools(
    tmp_path: Path,
) -> None:
    fake = Path(__file__).resolve().parents[1] / "fakes" / "mcp_server.py"
    config = tmp_path / ".config" / "tether" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(
        "[[tools.mcp_servers]]\n"
        f'name = "good"\ncommand = "{sys.executable}"\nargs = ["{fake}"]\n'
        "[[tools.mcp_servers]]\n"
        f'name = "broken"\ncommand = "{tmp_path / "no-such-program"}"\n'
    )
    code, verdicts, _ = doctor(tmp_path, clean_environment(tmp_path))
    assert code == 1
    assert verdicts["mcp good"]["status"] == "ok"
    assert "lists" in verdicts["mcp good"]["detail"]
    assert verdicts["mcp broken"]["status"] == "fail"
    assert "tools.mcp_servers" in verdicts["mcp broken"]["fix"]


def test_an_api_key_env_naming_an_unset_variable_fails_the_key_check(
    tmp_path: Path, openai_env: dict[str, str]
) -> None:
    config = tmp_path / ".config" / "tether" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('[provider]\napi_key_env = "MY_TEAM_KEY"\n')
    code, verdicts, _ = doctor(tmp_path, openai_env)
    assert code == 1
    assert verdicts["key"]["status"] == "fail"
    assert "MY_TEAM_KEY, which is not set" in verdicts["key"]["detail"]
    code, verdicts, _ = doctor(tmp_path, {**openai_env, "MY_TEAM_KEY": KEY})
    assert (code, verdicts["key"]["status"]) == (0, "ok")
