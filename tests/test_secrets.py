"""Secrets known by value (tether.secrets): which values count, how they are redacted, the
environment of commands, and the log."""

from __future__ import annotations

import logging
import sys

import pytest

from tether.config import TetherConfig
from tether.protocol.tools import McpServerSpec
from tether.secrets import (
    REDACTED,
    Secrets,
    configured_secrets,
    header_secrets,
    redact_logs,
    register,
    shown_url,
    url_secrets,
)
from tether.tools.run_command import child_environment


def test_a_url_password_counts_as_written_and_decoded():
    assert url_secrets("postgresql://tether:p%40ss%2Fw0rd@db:5432/t") == [
        "p%40ss%2Fw0rd",
        "p@ss/w0rd",
    ]
    assert url_secrets("postgresql://tether@db/t") == []
    assert url_secrets("sqlite:////home/a/s.db") == []
    assert url_secrets("http://[::1") == []  # not a URL: nothing, no error


def test_a_secret_header_counts_whole_and_without_its_scheme():
    assert header_secrets("Bearer abc123def") == ["Bearer abc123def", "abc123def"]
    assert header_secrets("abc123def") == ["abc123def"]


def test_the_configuration_gives_its_keys_passwords_and_secret_server_values():
    config = TetherConfig.model_validate(
        {
            "provider": {
                "type": "openai",
                "apiKeyEnv": "LLM_SESAME",
                "baseUrl": "https://u:basepass1@h/v1",
            },
            "sessions": {"store": "postgresql://tether:storepass1@db/t"},
            "tools": {
                "mcpServers": [
                    {
                        "name": "gh",
                        "command": "gh-mcp",
                        "env": {
                            "GH_TOKEN": "ghp_token1",
                            "DSN": "postgres://u:dsnpass1@x/y",
                            "MODE": "readonly1",
                        },
                    },
                    {
                        "name": "web",
                        "url": "https://h/mcp",
                        "headers": {"Authorization": "Bearer webtoken1"},
                    },
                ]
            },
        }
    )
    environ = {"LLM_SESAME": "sk-sesame1", "ANTHROPIC_API_KEY": "sk-ant-one", "HOME": "/home/a"}
    own = [McpServerSpec(name="own", url="https://h/o", headers={"X-Api-Key": "ownkey1"})]
    secrets = configured_secrets(config, environ, own)
    assert set(secrets.values) == {
        "sk-sesame1",
        "sk-ant-one",
        "basepass1",
        "storepass1",
        "ghp_token1",
        "dsnpass1",
        "Bearer webtoken1",
        "webtoken1",
        "ownkey1",
    }


def test_short_values_are_not_secrets_they_would_blot_out_ordinary_text():
    assert Secrets.of(["abc", "", "abcdef"]).values == ("abcdef",)


def test_redaction_replaces_the_longest_secret_first_and_walks_json():
    secrets = Secrets.of(["token1", "Bearer token1"])
    assert secrets.redact("h: Bearer token1; t: token1") == f"h: {REDACTED}; t: {REDACTED}"
    assert secrets.redact_json({"token1": ["token1", 2, None], "n": 1.5}) == {
        REDACTED: [REDACTED, 2, None],
        "n": 1.5,
    }
    assert Secrets().redact("token1") == "token1"


def test_a_command_gets_no_variable_whose_value_holds_a_secret():
    environ = {
        "PATH": "/bin",
        "TETHER_SESSIONS_STORE": "postgresql://t:storepass1@db/t",
        "APP": "a key=sk-sesame1 inside",
        "PLAIN": "visible",
    }
    secrets = Secrets.of(["storepass1", "sk-sesame1"])
    assert child_environment(environ, frozenset(), secrets) == {"PATH": "/bin", "PLAIN": "visible"}


def test_registered_secrets_are_redacted_from_log_records_and_their_tracebacks(
    caplog: pytest.LogCaptureFixture,
):
    redact_logs()
    register(Secrets.of(["logged-secret-1"]))
    logger = logging.getLogger("tether.test_secrets")
    with caplog.at_level(logging.INFO, logger="tether.test_secrets"):
        logger.info("opening %s", "postgresql://u:logged-secret-1@db")
        try:
            raise ValueError("bad password logged-secret-1")
        except ValueError:
            logger.exception("failed")
    text = caplog.text
    assert "logged-secret-1" not in text
    assert "postgresql://u:[redacted]@db" in text and "ValueError: bad password [redacted]" in text
    assert sys.exc_info() == (None, None, None)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://api.example.com/v1/chat", "https://api.example.com/v1/chat"),
        ("https://u:pass123456@db.example:5432/t", "https://db.example:5432/t"),
        (
            "https://g.example/v1/models/m:gen?key=AIzaSecret&alt=sse",
            "https://g.example/v1/models/m:gen?…",
        ),
        ("http://[::1]:8080/v1#frag", "http://[::1]:8080/v1?…"),
    ],
)
def test_a_url_in_a_log_line_has_no_credentials_or_query(url: str, shown: str) -> None:
    assert shown_url(url) == shown
