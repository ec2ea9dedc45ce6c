"""What tether serves, independent of the JSON-RPC machinery: its methods and its handshake.

The session methods are ready at once; the kernel (providers, tools, HTTP) is loaded after the
handshake by :meth:`App.load_kernel`, so answering ``initialize`` imports as little as it can.
A configured SQL store is opened right after the handshake too (requests wait for it), and the
sweep of expired sessions starts then.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
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
from tether.protocol.limits import DEFAULT_LIMITS
from tether.rpc.handlers import Handler, session_methods
from tether.sessions import MemoryStore, SessionService, SessionStore
from tether.sessions.ids import utcnow
from tether.sessions.opening import OpeningStore
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

logger = logging.getLogger(__name__)

KERNEL_METHODS = ("kernel/cancel", "kernel/run")

RequestClient = Callable[[str, Any], Awaitable[Any]]
"""Sends a request to the client and returns its result (cancelling the await withdraws it)."""


class App:
    """The services behind the methods, and the table of request methods they answer."""

    def __init__(
        self,
        store: SessionStore | None = None,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        """``store``: the session store to use whatever the configuration says (tests)."""
        self.sessions = SessionService(store or MemoryStore(), running=self._is_running)
        self._store_given = store is not None
        self._clock = clock
        self._sweeper: asyncio.Task[None] | None = None
        self.limits = DEFAULT_LIMITS  # the configuration's, once initialize has loaded it
        self.methods: dict[str, Handler] = session_methods(self.sessions, lambda: self.limits)
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
        self.sessions.on_delete.append(self._forget_in_kernel)
        self.sessions.on_fork.append(self._fork_mcp_servers)

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
        self.limits = self._config.limits.limits()
        url = self._config.sessions.url(self._environ)
        if url is not None and not self._store_given:
            self.sessions.store = OpeningStore(url)
        try:
            asyncio.get_running_loop().call_soon(self.start)
        except RuntimeError:  # no event loop: the store opens on first use, nothing is swept
            pass
        store = self.sessions.store
        return InitializeResult(
            server_info=ServerInfo(name="tether", version=__version__),
            capabilities=ServerCapabilities(
                sessions=SessionCapabilities(store=store.kind, fork=True, durable=store.durable),
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

    def start(self) -> None:
        """After the handshake: open the configured store, start sweeping expired sessions."""
        store = self.sessions.store
        if isinstance(store, OpeningStore):
            store.start()
        if self.config().sessions.ttl is not None and self._sweeper is None:
            self._sweeper = asyncio.ensure_future(self._sweep_forever())

    async def sweep(self) -> list[str]:
        """Delete the sessions idle for longer than ``sessions.ttl`` (none without a TTL)."""
        ttl = self.config().sessions.ttl_delta()
        if ttl is None:
            return []
        expired = await self.sessions.sweep(ttl, self._clock())
        if expired:
            logger.info("deleted %d expired session(s)", len(expired))
        return expired

    async def _sweep_forever(self) -> None:
        ttl = self.config().sessions.ttl_delta()
        assert ttl is not None
        interval = min(max(ttl.total_seconds() / 4, 1.0), 3600.0)
        while True:
            try:
                await self.sweep()
            except Exception:  # a store that cannot be opened, a database error: try later
                logger.exception("could not sweep expired sessions")
            await asyncio.sleep(interval)

    async def aclose(self) -> None:
        """Stop the sweep and the MCP servers; release the providers, the shared HTTP client and
        the store."""
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self._mcp is not None:
            await self._mcp.aclose()
        for provider in self._providers.values():
            await provider.aclose()
        if self._http is not None:
            await self._http.aclose()
        await self.sessions.store.aclose()

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
            if exc.code is None:  # a malformed answer, or none at all
                raise ApprovalError(f"tool/requestPermission failed: {exc.message}") from None
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

    async def _forget_in_kernel(self, session_id: str) -> None:
        if self.kernel is not None:
            self.kernel.forget(session_id)

    def _fork_mcp_servers(self, session: Session) -> None:
        if self._mcp is not None and session.parent_session_id is not None:
            self._mcp.share_session_servers(session.parent_session_id, session.session_id)

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
