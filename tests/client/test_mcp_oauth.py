"""An HTTP MCP server that needs OAuth 2.1, with its authorization server on loopback (both
built with the official SDK: tests/fakes/oauth_mcp_server.py), used by a real ``tether serve``
whose browser ($BROWSER) follows the redirects as a person signing in would."""

from __future__ import annotations

import asyncio
import socket
import stat
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tether.client import TetherClient
from tether.providers import ModelRequest
from tether.testing import function_options, server_env, tool_call

FAKES = Path(__file__).resolve().parents[1] / "fakes"


def ask_whoami(request: ModelRequest) -> dict[str, Any] | str:
    """Calls the server's tool, then repeats what it said."""
    last = request.messages[-1]
    if last.role == "user":
        return {"toolCalls": [tool_call("auth__whoami")]}
    return f"the tool said: {last.content}"


class OAuthServer:
    def __init__(self, tmp_path: Path, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}/mcp"
        self.issued = tmp_path / "issued.txt"

    def tokens(self) -> list[str]:
        return self.issued.read_text().split() if self.issued.exists() else []


@pytest.fixture
async def oauth_server(tmp_path: Path) -> AsyncIterator[OAuthServer]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = OAuthServer(tmp_path, port)
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(FAKES / "oauth_mcp_server.py"), str(port),
        env={"TETHER_OAUTH_ISSUED": str(server.issued), "PATH": "/usr/bin:/bin"},
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:
        async with asyncio.timeout(30), httpx.AsyncClient() as http:
            while True:  # the server is starting: poll its metadata
                try:
                    await http.get(
                        f"http://127.0.0.1:{port}/.well-known/oauth-authorization-server"
                    )
                    break
                except httpx.TransportError:
                    await asyncio.sleep(0.1)
        yield server
    finally:
        process.kill()
        await process.wait()


async def run_once(tmp_path: Path, server: OAuthServer, browser: str) -> str:
    options = function_options(ask_whoami)
    options["tools"] = {
        "approval": "auto",
        "mcpServers": [{"name": "auth", "url": server.url, "oauth": True}],
    }
    env = {**server_env(options), "BROWSER": browser, "XDG_DATA_HOME": str(tmp_path / "data")}
    async with TetherClient.spawn(workspace=tmp_path, options=options, env=env) as client:
        session = await client.create_session()
        result = await client.run(session.session_id, "who am I?")
        messages = (await client.messages(session.session_id)).messages
    return result.response + "\n" + "\n".join(m.model_dump_json() for m in messages)


async def test_tether_signs_in_once_keeps_the_token_private_and_never_shows_it(
    oauth_server: OAuthServer, tmp_path: Path, capfd: pytest.CaptureFixture[str]
):
    browser = f"{sys.executable} {FAKES / 'browser.py'} %s"
    first = await run_once(tmp_path, oauth_server, browser)
    (token,) = oauth_server.tokens()  # signed in once

    assert first.startswith("the tool said: signed in")
    stored = list((tmp_path / "data" / "tether" / "mcp-oauth").iterdir())
    assert len(stored) == 1 and token in stored[0].read_text()
    assert stat.S_IMODE(stored[0].stat().st_mode) == 0o600
    assert stat.S_IMODE(stored[0].parent.stat().st_mode) == 0o700

    # A new process uses the stored token: no browser (this one would fail), no new sign-in.
    second = await run_once(tmp_path, oauth_server, "false %s")
    assert second.startswith("the tool said: signed in")
    assert oauth_server.tokens() == [token]

    logged = capfd.readouterr()
    assert "asks you to sign in" in logged.err  # the first run said it opened the browser
    for seen in (first, second, logged.out, logged.err):
        assert token not in seen


async def test_a_registration_for_another_redirect_port_is_dropped(tmp_path: Path):
    from mcp.shared.auth import OAuthClientInformationFull
    from pydantic import AnyUrl

    from tether.tools.mcp.oauth import FileTokenStorage

    path = tmp_path / "auth.json"
    old = FileTokenStorage(path, "http://127.0.0.1:1111/callback")
    await old.set_client_info(
        OAuthClientInformationFull(
            client_id="c1", redirect_uris=[AnyUrl("http://127.0.0.1:1111/callback")]
        )
    )
    assert (await old.get_client_info()) is not None
    assert await FileTokenStorage(path, "http://127.0.0.1:2222/callback").get_client_info() is None


@pytest.mark.parametrize(
    "spec",
    [
        {"name": "a", "command": "srv", "oauth": True},
        {"name": "a", "url": "http://x/sse", "transport": "sse", "oauth": True},
    ],
)
def test_oauth_goes_with_a_streamable_http_server_only(spec: dict[str, Any]):
    from pydantic import ValidationError

    from tether.protocol.tools import McpServerSpec

    with pytest.raises(ValidationError, match="oauth"):
        McpServerSpec.model_validate(spec)
