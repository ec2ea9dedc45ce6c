"""What both faces (``rpc``, ``acp``) serve from: the session service, the configuration, the
store, the kernel and what it is built from (providers, tools, MCP servers).

A face subclasses :class:`Backend`, loads the configuration when its client says hello
(:meth:`Backend.load_config`), builds the kernel with its own way of asking the user
(:meth:`Backend.build_kernel`) and translates its wire onto :attr:`Backend.sessions` and
:attr:`Backend.kernel`. Nothing here knows a wire format.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import sys
import threading
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.protocol import ConfigError
from tether.sessions import MemoryStore, SessionService, SessionStore
from tether.sessions.ids import utcnow
from tether.sessions.opening import OpeningStore
from tether.sessions.workspaces import canonical_workspace, local_path

if TYPE_CHECKING:
    import httpx

    from tether.config import ProviderConfig, TetherConfig
    from tether.kernel.approval import Approver
    from tether.kernel.kernel import Kernel
    from tether.protocol import CreateSessionParams, Session
    from tether.protocol.kernel import RunWarning
    from tether.providers.base import Provider
    from tether.secrets import Secrets
    from tether.tools.base import ToolExecutor
    from tether.tools.mcp import McpManager

logger = logging.getLogger(__name__)


def preload_http_client() -> None:
    """Import the providers' HTTP stack (httpx, aiohttp and their TLS set-up, a few hundred ms)
    on a daemon thread, so that the first run does not wait for it; a run that needs it first
    waits on the import lock rather than importing twice."""
    if "tether.providers.client" in sys.modules:
        return
    threading.Thread(
        target=importlib.import_module,
        args=("tether.providers.client",),
        name="tether-preload-http",
        daemon=True,
    ).start()


class Backend:
    """The services behind a face, from the handshake to the exit."""

    def __init__(
        self,
        store: SessionStore | None = None,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        """``store``: the session store to use whatever the configuration says (tests)."""
        self.sessions = SessionService(store or MemoryStore())
        self._store_given = store is not None
        self._clock = clock
        self._sweeper: asyncio.Task[None] | None = None
        self.kernel: Kernel | None = None
        self._environ = os.environ if environ is None else environ
        self._config: TetherConfig | None = None
        self._workspace: Path | None = None  # whose .tether/config.toml is read
        self._init_options: Mapping[str, Any] | None = None
        self.workspace_error: ConfigError | None = None  # the workspace file, left out
        self._http: httpx.AsyncClient | None = None
        self._providers: dict[str, Provider] = {}
        self._mcp: McpManager | None = None  # made when a session or a run first needs it
        self._secrets: tuple[TetherConfig, Secrets] | None = None  # of the last configuration
        self.sessions.on_create.append(self._remember_mcp_servers)
        self.sessions.on_delete.append(self._close_mcp_servers)
        self.sessions.on_delete.append(self._forget_in_kernel)
        self.sessions.on_fork.append(self._fork_mcp_servers)

    @property
    def environ(self) -> Mapping[str, str]:
        """The environment the configuration is read from."""
        return self._environ

    def load_config(
        self, workspace: str | None, init_options: Mapping[str, Any] | None = None
    ) -> TetherConfig:
        """Load the configuration (``workspace`` is the default workspace of new sessions, and
        the one whose ``.tether/config.toml`` is read), pick the configured store, and schedule
        :meth:`start` on the running loop."""
        self.sessions.set_default_workspace(workspace)
        self._workspace = _local(self.sessions.default_workspace)
        self._init_options = init_options
        self._config = self._load_config()
        self._config_secrets(self._config)  # redacted from the log from the start
        url = self._config.sessions.url(self._environ)
        if url is not None and not self._store_given:
            self.sessions.store = OpeningStore(url)
        try:
            asyncio.get_running_loop().call_soon(self.start)
        except RuntimeError:  # no event loop: the store opens on first use, nothing is swept
            pass
        return self._config

    def build_kernel(self, approver: Approver | None) -> Kernel:
        """The kernel over this backend's store, providers and tools (imports a lot)."""
        from tether.kernel.kernel import Kernel
        from tether.memory import load_memory, surely_no_memory

        self.kernel = Kernel(
            self.sessions.store,
            config=self.config,
            providers=self._provider,
            tools=self._tools,
            memory=load_memory,
            no_memory=surely_no_memory,
            approver=approver,
            warnings=self.run_warnings,
            secrets=self.secrets,
        )
        return self.kernel

    def secrets(self, config: TetherConfig, session_id: str) -> Secrets:
        """The secrets of a run in ``session_id`` (:mod:`tether.secrets`): the configuration's,
        with the API keys of the environment, and those of the session's own MCP servers."""
        from tether.secrets import Secrets, server_secrets

        secrets = self._config_secrets(config)
        own = self._mcp.session_specs(session_id) if self._mcp is not None else ()
        return secrets | Secrets.of(server_secrets(own)) if own else secrets

    def _config_secrets(self, config: TetherConfig) -> Secrets:
        """The secrets of ``config`` (computed once for each configuration loaded), which every
        log record has redacted from then on."""
        from tether.secrets import configured_secrets, register

        if self._secrets is None or self._secrets[0] is not config:
            self._secrets = (config, configured_secrets(config, self._environ))
            register(self._secrets[1])
        return self._secrets[1]

    def config(self) -> TetherConfig:
        """The configuration. While the workspace file is left out for an error, each call reads
        it again, so a fixed file applies from the next run on."""
        if self._config is None:
            self._config = self._load_config()
        elif self.workspace_error is not None:
            try:
                self._config = self._load_config()
            except ConfigError as exc:  # the user's own layers broke since: keep what works
                logger.warning("the configuration was not reloaded: %s", exc.message)
        return self._config

    def _load_config(self) -> TetherConfig:
        """Every layer but a workspace file that cannot be used, which is kept in
        :attr:`workspace_error` (None once it loads)."""
        from tether.config import load_config

        errors: list[ConfigError] = []
        config = load_config(
            workspace=self._workspace,
            environ=self._environ,
            init_options=self._init_options,
            on_workspace_error=errors.append,
        )
        self.workspace_error = errors[0] if errors else None
        return config

    def run_warnings(self) -> list[RunWarning]:
        """What each run reports: the error of a workspace file that was left out."""
        from tether.protocol.kernel import RunWarning

        error = self.workspace_error
        if error is None:
            return []
        return [RunWarning(code=error.code, message=left_out(error), data=error.data)]

    def warn(self, message: str) -> None:
        """Tell the user about a problem that does not stop the server (a face shows it its own
        way; the log has it anyway)."""

    def start(self) -> None:
        """After the handshake: open the configured store, start sweeping expired sessions."""
        store = self.sessions.store
        if isinstance(store, OpeningStore):
            store.start()
        if self.workspace_error is not None:
            message = left_out(self.workspace_error)
            logger.warning("%s", message)
            self.warn(message)
        if self.config().sessions.ttl is not None and self._sweeper is None:
            self._sweeper = asyncio.ensure_future(self._sweep_forever())
        if self.config().provider.type not in (None, "scripted"):  # a provider over HTTP
            preload_http_client()

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
        """The one HTTP client every provider shares, made on first use with the configured
        ``provider.max_connections`` and closed by :meth:`aclose`."""
        if self._http is None:
            from tether.providers.client import DEFAULT_MAX_CONNECTIONS, make_client

            limit = DEFAULT_MAX_CONNECTIONS
            if self._config is not None:
                limit = self._config.provider.max_connections
            self._http = make_client(limit)
        return self._http

    @property
    def mcp(self) -> McpManager:
        """The MCP servers of every session (per-session server specs live only here)."""
        if self._mcp is None:
            from tether.tools.mcp import McpManager

            self._mcp = McpManager()
        return self._mcp

    async def _tools(self, config: TetherConfig, session_id: str, workspace: Path) -> ToolExecutor:
        from tether.kernel.kernel import sandbox_policy
        from tether.tools import builtin_registry, shared_builtin_tools

        own = self._mcp is not None and self._mcp.has_session_servers(session_id)
        if not config.tools.mcp_servers and not own:
            return builtin_registry(config.tools.enabled)
        return await self.mcp.executor(
            shared_builtin_tools(),
            servers=config.tools.mcp_servers,
            enabled=config.tools.enabled,
            session_id=session_id,
            workspace=workspace,
            sandbox=sandbox_policy(config, mcp=True),
            start_timeout=config.mcp.start_timeout,
        )

    def _remember_mcp_servers(self, session: Session, params: CreateSessionParams) -> None:
        if params.mcp_servers:
            from tether.secrets import Secrets, register, server_secrets

            self.mcp.set_session_servers(session.session_id, params.mcp_servers)
            register(Secrets.of(server_secrets(params.mcp_servers)))

    async def _forget_in_kernel(self, session_id: str) -> None:
        if self.kernel is not None:
            self.kernel.forget(session_id)

    def _fork_mcp_servers(self, session: Session) -> None:
        if self._mcp is not None and session.parent_session_id is not None:
            self._mcp.share_session_servers(session.parent_session_id, session.session_id)

    async def _close_mcp_servers(self, session_id: str) -> None:
        if self._mcp is not None:
            await self._mcp.close_session(session_id)


def left_out(error: ConfigError) -> str:
    return f"the workspace config file was left out: {error.message}"


def _local(workspace: str | None) -> Path | None:
    if workspace is None or not canonical_workspace(workspace).startswith("file://"):
        return None
    return local_path(workspace)
