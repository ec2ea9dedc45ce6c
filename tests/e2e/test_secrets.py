"""Secrets known by value, through the real server on a real PostgreSQL store: the password of
the store's URL and a provider key reach neither a command's environment nor a recorded result."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import make_url

from tether.client import Connection

from .conftest import SERVER, initialized, script_options
from .test_kernel import call, drain

PASSWORD = "Pg-s3cret@pass/word"  # the URL holds it percent-encoded
API_KEY = "sk-test-4f9c2b7e1d"


@pytest.fixture
def store_url(postgres_url: str) -> str:
    """The test's database, with a password in its URL (the server trusts its socket, so the
    password is never checked, only carried)."""
    url = make_url(postgres_url).set(password=PASSWORD)
    return url.render_as_string(hide_password=False)


async def test_the_store_password_and_the_api_key_never_reach_a_command_or_the_session(
    project: Path, store_url: str
):
    written = store_url.split(":")[2].split("@")[0]  # the password as the URL spells it
    assert written != PASSWORD
    (project / ".env").write_text(f"KEY={API_KEY}\nDB={PASSWORD}\nURL={store_url}\n")
    turns: list[dict[str, Any]] = [
        {"toolCalls": [call("env", "run_command", command=["env"])]},
        {"toolCalls": [call("dotenv", "read_file", path=".env")]},
        {"text": "Done."},
    ]
    env = {
        "TETHER_SESSIONS_STORE": store_url,
        "LLM_SESAME": API_KEY,  # the provider's key, under a name that looks like nothing
        "APP_CONFIG": f"endpoint=https://api.example; key={API_KEY}",
        "DATABASE_URL": store_url,
        "PLAIN_SETTING": "visible",
    }
    connection = await Connection.spawn(SERVER, env=env)
    try:
        options = script_options(
            project, turns, tools={"approval": "auto"}, provider={"apiKeyEnv": "LLM_SESAME"}
        )
        await initialized(connection, project, options)
        sid = (await connection.request("session/create", {}))["sessionId"]
        result = await connection.request("kernel/run", {"sessionId": sid, "prompt": "look"})
        events = drain(connection)
        messages = await connection.request("session/messages", {"sessionId": sid})
    finally:
        await connection.close()

    records = {record["id"]: record for record in result["toolCalls"]}
    shown = records["env"]["result"]
    assert "PLAIN_SETTING=visible" in shown
    for name in ("TETHER_SESSIONS_STORE", "LLM_SESAME", "APP_CONFIG", "DATABASE_URL"):
        assert f"{name}=" not in shown
    dotenv = records["dotenv"]["result"]
    assert "KEY=[redacted]" in dotenv and "DB=[redacted]" in dotenv
    recorded = str(messages) + str(events) + str(result)
    for secret in (PASSWORD, written, API_KEY):
        assert secret not in recorded
