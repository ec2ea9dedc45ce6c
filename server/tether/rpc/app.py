"""What tether serves, independent of the JSON-RPC machinery: its methods and its handshake.

The session methods are ready at once; the kernel (providers, tools, HTTP) is loaded after the
handshake by :meth:`App.load_kernel`, so answering ``initialize`` imports as little as it can.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether import __version__
from tether.protocol import (
    InitializeParams,
    InitializeResult,
    ServerCapabilities,
    ServerInfo,
    SessionCapabilities,
)
from tether.rpc.handlers import Handler, session_methods
from tether.sessions import MemoryStore, SessionService, SessionStore
from tether.sessions.workspaces import canonical_workspace, local_path

if TYPE_CHECKING:
    import httpx

    from tether.config import ProviderConfig, TetherConfig
    from tether.kernel.kernel import Kernel
    from tether.protocol import CreateSessionParams, Session
    from tether.protocol.kernel import PermissionParams, PermissionResult
    from tether.providers.base import Provider
    from tether.rpc.progress import Notify
    from tether.tools.base import ToolExecutor
    from tether.tools.mcp import McpManager

KERNEL_METHODS = ("kernel/cancel", "kernel/run")

RequestClient = Callable[[str, Any], Awaitable[Any]]
"""Sends a request to the client and returns its result (cancelling the await withdraws it)."""


class App:
    """The services behind the methods, and the table of request methods they answer."""

    def __init__(
        self, store: SessionStore | None = None, environ: Mapping[str, str] | None = None
    ) -> None:
        self.sessions = SessionService(store or MemoryStore(), running=self._is_running)
        self.methods: dict[str, Handler] = session_methods(self.sessions)
        self.client: InitializeParams | None = None
        self.kernel: Kernel | None = None
        self.notify: Notify = _nowhere
        self.request_client: RequestClient = _no_client  # set once the server is loaded
        self._environ = os.environ if environ is None else environ
        self._config: TetherConfig | None = None
        self._http: httpx.AsyncClient | None = None
        self._providers: dict[str, Provider] = {}
        self._mcp: McpManager | None = None  # made when a session or a run first needs it
        self.sessions.on_create.append(self._remember_mcp_servers)
        self.sessions.on_delete.append(self._close_mcp_servers)

    def initialize(self, params: InitializeParams) -> InitializeResult:
        """Record what the client told us, load the configuration, say what this server offers."""
        from tether.config import PROVIDER_TYPES, load_config
        from tether.tools import BUILTIN_TOOL_NAMES

        workspace = _first_workspace(params)
        self.sessions.set_default_workspace(workspace)
        self._config = load_config(
            workspace=_local(self.sessions.default_workspace),
            environ=self._environ,
            init_options=params.initialization_options,
        )
        self.client = params
        store = self.sessions.store
        return InitializeResult(
            server_info=ServerInfo(name="tether", version=__version__),
            capabilities=ServerCapabilities(
                sessions=SessionCapabilities(store=store.kind, fork=False, durable=store.durable),
                methods=sorted([*self.methods, *KERNEL_METHODS]),
                providers=list(PROVIDER_TYPES),
                tools=[
                    name
                    for name in BUILTIN_TOOL_NAMES
                    if self._config.tools.enabled is None or name in self._config.tools.enabled
                ],
            ),
        )

    def load_kernel(self) -> None:
        """Build the kernel and add its methods (after the handshake: this imports a lot)."""
        from tether.kernel.kernel import Kernel
        from tether.memory import load_memory
        from tether.rpc.kernel_methods import kernel_methods

        self.kernel = Kernel(
            self.sessions.store,
            config=self.config,
            providers=self._provider,
            tools=self._tools,
            memory=load_memory,
            approver=self._ask_permission,
        )
        self.methods.update(kernel_methods(self.kernel, self.sessions, self._notify))

    def config(self) -> TetherConfig:
        if self._config is None:
            from tether.config import load_config

            self._config = load_config(workspace=None, environ=self._environ)
        return self._config

    async def aclose(self) -> None:
        """Stop the MCP servers; release the providers and the shared HTTP client."""
        if self._mcp is not None:
            await self._mcp.aclose()
        for provider in self._providers.values():
            await provider.aclose()
        if self._http is not None:
            await self._http.aclose()

    def _provider(self, config: ProviderConfig) -> Provider:
        """One provider per distinct configuration, kept for the life of the server (a scripted
        provider goes on through its script from one run to the next)."""
        from tether.providers import make_provider

        key = config.model_dump_json()
        provider = self._providers.get(key)
        if provider is None:
            provider = self._providers[key] = make_provider(config, self._shared_http)
        return provider

    def _shared_http(self) -> httpx.AsyncClient:
        """The one HTTP client every provider shares (made on first use)."""
        if self._http is None:
            import httpx

            self._http = httpx.AsyncClient(limits=httpx.Limits(max_connections=200))
        return self._http

    async def _ask_permission(self, params: PermissionParams) -> PermissionResult:
        """``tool/requestPermission`` to a client that declared it answers it."""
        from pydantic import ValidationError

        from tether.kernel.approval import ApprovalError, CannotAsk
        from tether.protocol.kernel import PermissionResult
        from tether.rpc.errors import ClientError

        if self.client is None or not self.client.capabilities.tether.permissions:
            raise CannotAsk("the client did not declare capabilities.tether.permissions")
        try:
            answer = await self.request_client("tool/requestPermission", params.to_wire())
        except ClientError as exc:
            if exc.code is None:
                raise ApprovalError(
                    "the client's answer to tool/requestPermission is not a valid response"
                ) from None
            raise ApprovalError(
                f"the client answered tool/requestPermission with error {exc.code}: {exc.message}"
            ) from None
        try:
            return PermissionResult.model_validate(answer)
        except ValidationError:
            raise ApprovalError(
                "the client's answer to tool/requestPermission is not "
                '{"outcome": "allow" | "allow_always" | "reject"}'
            ) from None

    @property
    def mcp(self) -> McpManager:
        """The MCP servers of every session (per-session server specs live only here)."""
        if self._mcp is None:
            from tether.tools.mcp import McpManager

            self._mcp = McpManager()
        return self._mcp

    async def _tools(self, config: TetherConfig, session_id: str, workspace: Path) -> ToolExecutor:
        from tether.tools import builtin_registry, builtin_tools

        own = self._mcp is not None and self._mcp.has_session_servers(session_id)
        if not config.tools.mcp_servers and not own:
            return builtin_registry(config.tools.enabled)
        return await self.mcp.executor(
            builtin_tools(),
            servers=config.tools.mcp_servers,
            enabled=config.tools.enabled,
            session_id=session_id,
            workspace=workspace,
        )

    def _remember_mcp_servers(self, session: Session, params: CreateSessionParams) -> None:
        if params.mcp_servers:
            self.mcp.set_session_servers(session.session_id, params.mcp_servers)

    async def _close_mcp_servers(self, session_id: str) -> None:
        if self._mcp is not None:
            await self._mcp.close_session(session_id)

    def _notify(self, method: str, params: Any) -> None:
        self.notify(method, params)

    def _is_running(self, session_id: str) -> bool:
        return self.kernel is not None and self.kernel.is_running(session_id)


def _first_workspace(params: InitializeParams) -> str | None:
    if params.workspace_folders:
        return params.workspace_folders[0].uri
    return params.root_uri or params.root_path


def _local(workspace: str | None) -> Path | None:
    if workspace is None or not canonical_workspace(workspace).startswith("file://"):
        return None
    return local_path(workspace)


def _nowhere(method: str, params: Any) -> None:
    return None


async def _no_client(method: str, params: Any) -> Any:
    raise RuntimeError(f"no client to send {method} to")
