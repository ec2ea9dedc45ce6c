"""An MCP server that needs OAuth 2.1, with its own authorization server, built with the ``mcp``
SDK: ``python tests/fakes/oauth_mcp_server.py PORT`` serves streamable HTTP on
``http://127.0.0.1:PORT/mcp`` and the authorization endpoints beside it.

Clients register themselves (dynamic client registration); ``/authorize`` approves at once (it
redirects to the client's ``redirect_uri`` with a code), as if the user had signed in and
agreed. Each access token issued is appended to the file ``TETHER_OAUTH_ISSUED`` names, so a
test can look for it where it must not be. One tool: ``whoami`` says which client it serves.
"""

from __future__ import annotations

import os
import secrets
import sys
import time

import anyio
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    RefreshToken,
    construct_redirect_uri,
)
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken


class ApproveEveryone:
    """An authorization server that approves every request (tokens kept in memory)."""

    def __init__(self) -> None:
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.tokens: dict[str, AccessToken] = {}

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        assert client_info.client_id is not None
        self.clients[client_info.client_id] = client_info

    async def authorize(
        self, client: OAuthClientInformationFull, params: AuthorizationParams
    ) -> str:
        code = secrets.token_urlsafe(16)
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=params.scopes or [],
            expires_at=time.time() + 300,
            client_id=client.client_id or "",
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
        )
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> AuthorizationCode | None:
        return self.codes.get(authorization_code)

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        del self.codes[authorization_code.code]
        token = f"tok-{secrets.token_urlsafe(16)}"
        self.tokens[token] = AccessToken(
            token=token,
            client_id=client.client_id or "",
            scopes=authorization_code.scopes,
            expires_at=int(time.time()) + 3600,
            resource=authorization_code.resource,
        )
        issued = os.environ.get("TETHER_OAUTH_ISSUED")
        if issued:
            async with await anyio.open_file(issued, "a") as file:
                await file.write(f"{token}\n")
        return OAuthToken(access_token=token, token_type="Bearer", expires_in=3600)

    async def load_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: str
    ) -> RefreshToken | None:
        return None

    async def exchange_refresh_token(self, *args: object, **kwargs: object) -> OAuthToken:
        raise NotImplementedError

    async def load_access_token(self, token: str) -> AccessToken | None:
        return self.tokens.get(token)

    async def revoke_token(self, token: object) -> None:
        pass


def main() -> None:
    port = int(sys.argv[1])
    base = f"http://127.0.0.1:{port}"
    server = MCPServer(
        "oauth-fake",
        auth_server_provider=ApproveEveryone(),
        auth=AuthSettings(
            issuer_url=base,
            resource_server_url=f"{base}/mcp",
            client_registration_options=ClientRegistrationOptions(enabled=True),
        ),
    )

    @server.tool()
    def whoami(ctx: Context) -> str:
        """Says that the caller signed in."""
        return "signed in"

    server.run("streamable-http", host="127.0.0.1", port=port)


if __name__ == "__main__":
    main()
