"""OAuth 2.1 for HTTP MCP servers (``oauth: true``), through the SDK's ``OAuthClientProvider``.

The SDK does the protocol: it finds the authorization server from the MCP server's 401
(protected resource metadata), registers tether as a client, runs the authorization code flow
with PKCE, refreshes tokens. tether gives it three things:

- **storage**: the tokens and the client registration of each server URL, in a file of the
  user's own under the data directory (``<data>/mcp-oauth/<sha256 of the URL>.json``, mode 0600
  in a 0700 directory), never in a session, the store or a log;
- **the browser**: the authorization URL is opened with :mod:`webbrowser` (which honours
  ``$BROWSER``), and logged for a person to open where no browser can be started;
- **the redirect**: a one-shot HTTP listener on ``127.0.0.1`` (a port of its own, chosen when
  the connection starts) receives the code; it waits at most :data:`SIGN_IN_TIMEOUT` seconds.

A registration made for another redirect port is dropped, so tether registers again.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import webbrowser
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from mcp.client.auth import OAuthClientProvider
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)
from pydantic import AnyUrl

from tether.config import data_home

logger = logging.getLogger(__name__)

SIGN_IN_TIMEOUT = 300.0  # seconds a person has to sign in, once the browser is opened
_REQUEST_LIMIT = 16 * 1024  # bytes of the redirect request read


def token_file(url: str, environ: Mapping[str, str] = os.environ) -> Path:
    """Where the tokens of the server at ``url`` are kept."""
    digest = hashlib.sha256(url.encode()).hexdigest()[:32]
    return data_home(environ) / "mcp-oauth" / f"{digest}.json"


class FileTokenStorage:
    """The SDK's ``TokenStorage`` in one private file per server URL."""

    def __init__(self, path: Path, redirect_uri: str) -> None:
        self.path = path
        self.redirect_uri = redirect_uri

    async def get_tokens(self) -> OAuthToken | None:
        data = (await self._read()).get("tokens")
        return None if data is None else OAuthToken.model_validate(data)

    async def set_tokens(self, tokens: OAuthToken) -> None:
        await self._update("tokens", tokens.model_dump(mode="json", exclude_none=True))

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        data = (await self._read()).get("client")
        if data is None:
            return None
        client = OAuthClientInformationFull.model_validate(data)
        if self.redirect_uri not in [str(uri) for uri in client.redirect_uris or ()]:
            return None  # registered for another port: register again
        return client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        await self._update("client", client_info.model_dump(mode="json", exclude_none=True))

    async def _read(self) -> dict[str, Any]:
        return await asyncio.to_thread(self._read_now)

    def _read_now(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            logger.warning(
                "MCP OAuth tokens in %s cannot be read (%s): signing in again", self.path, exc
            )
            return {}
        return data if isinstance(data, dict) else {}

    async def _update(self, key: str, value: object) -> None:
        await asyncio.to_thread(self._update_now, key, value)

    def _update_now(self, key: str, value: object) -> None:
        data = self._read_now()
        data[key] = value
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        temporary = self.path.with_suffix(".tmp")
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as file:
            json.dump(data, file)
        os.replace(temporary, self.path)


class RedirectListener:
    """A one-shot HTTP listener on loopback for the authorization redirect."""

    def __init__(self) -> None:
        self._result: asyncio.Future[AuthorizationCodeResult] | None = None
        self._server: asyncio.Server | None = None
        self.port = 0

    @property
    def redirect_uri(self) -> str:
        return f"http://127.0.0.1:{self.port}/callback"

    async def start(self) -> None:
        self._result = asyncio.get_running_loop().create_future()
        self._server = await asyncio.start_server(self._receive, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    async def wait(self) -> AuthorizationCodeResult:
        """The code and state the redirect carried; TimeoutError after :data:`SIGN_IN_TIMEOUT`."""
        assert self._result is not None
        return await asyncio.wait_for(asyncio.shield(self._result), SIGN_IN_TIMEOUT)

    async def _receive(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await asyncio.wait_for(reader.readline(), 10)
            parts = line[:_REQUEST_LIMIT].decode("latin-1").split()
            query = parse_qs(urlsplit(parts[1]).query) if len(parts) >= 2 else {}
            code = query.get("code", [None])[0]
            if code is not None and self._result is not None and not self._result.done():
                state = query.get("state", [None])[0]
                issuer = query.get("iss", [None])[0]
                self._result.set_result(AuthorizationCodeResult(code=code, state=state, iss=issuer))
                body = b"Signed in: you can close this window and go back to your editor.\n"
                status = b"200 OK"
            else:
                body, status = b"No authorization code in this request.\n", b"400 Bad Request"
            writer.write(
                b"HTTP/1.1 " + status + b"\r\nContent-Type: text/plain\r\nContent-Length: "
                + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body
            )  # fmt: skip
            await writer.drain()
        except (TimeoutError, OSError, ValueError):
            pass
        finally:
            writer.close()


@contextlib.asynccontextmanager
async def oauth_provider(name: str, url: str) -> AsyncIterator[OAuthClientProvider]:
    """The ``httpx2`` auth of the server ``name`` at ``url``, with its redirect listener open
    while the connection lasts."""
    listener = RedirectListener()
    await listener.start()

    async def open_browser(authorization_url: str) -> None:
        logger.warning(
            "MCP server %s asks you to sign in: opening your browser at %s", name, authorization_url
        )
        opened = await asyncio.to_thread(webbrowser.open, authorization_url)
        if not opened:
            logger.warning("no browser could be opened: open that URL yourself")

    metadata = OAuthClientMetadata(
        client_name="tether",
        redirect_uris=[AnyUrl(listener.redirect_uri)],
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        token_endpoint_auth_method="none",
    )
    try:
        yield OAuthClientProvider(
            server_url=url,
            client_metadata=metadata,
            storage=FileTokenStorage(token_file(url), listener.redirect_uri),
            redirect_handler=open_browser,
            callback_handler=listener.wait,
        )
    finally:
        await listener.close()
