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
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from tether.protocol import ConfigError
from tether.sessions.ids import utcnow
from tether.sessions.workspaces import canonical_workspace, local_path

if TYPE_CHECKING:
    import httpx

    from tether.checkpoints import CheckpointStore
    from tether.config import ProviderConfig, ProviderType, TetherConfig
    from tether.kernel.agents import AgentProfile
    from tether.kernel.approval import Approver
    from tether.kernel.checkpoints import Checkpoints
    from tether.kernel.kernel import Kernel
    from tether.memory.instructions import InstructionLoader
    from tether.protocol import CreateSessionParams, Session
    from tether.protocol.kernel import RunWarning
    from tether.protocol.sessions import SessionFields
    from tether.protocol.tools import McpServerSpec
    from tether.providers.base import Provider
    from tether.secrets import Secrets
    from tether.sessions import SessionService, SessionStore
    from tether.tools.base import ToolExecutor
    from tether.tools.confinement import SandboxPolicy
    from tether.tools.mcp import McpManager

logger = logging.getLogger(__name__)

MEMORY_STORE_KIND = "memory"
""":class:`tether.sessions.MemoryStore`'s kind, said at ``initialize`` without importing it."""

INSTRUCTIONS_LISTED_FOR = 1.0
"""Seconds ``session/get`` lists the instruction files it found without looking again."""


def preload_provider(kind: ProviderType | None, base_url: str | None = None) -> None:
    """Load the configured provider's stack (its module, httpx, aiohttp, the TLS roots unless
    ``base_url`` is a plain ``http://`` one: a few hundred ms) on a daemon thread, so that the
    first run does not wait for it; a run that needs it first waits on the import lock rather
    than importing twice."""
    if kind is None or kind == "scripted" or f"tether.providers.{kind}" in sys.modules:
        return
    threading.Thread(
        target=_warm_provider,
        args=(kind, base_url),
        name="tether-preload-provider",
        daemon=True,
    ).start()


def _warm_provider(kind: ProviderType, base_url: str | None) -> None:
    try:
        importlib.import_module("tether.providers").warm(kind, base_url)
    except Exception:  # loaded again by the first run, which reports the error there
        logger.exception("could not load the %s provider in the background", kind)


class Backend:
    """The services behind a face, from the handshake to the exit."""

    def __init__(
        self,
        store: SessionStore | None = None,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        """``store``: the session store to use whatever the configuration says (tests)."""
        self._sessions: SessionService | None = None  # made on first use (:attr:`sessions`)
        self._store = store  # the store to serve from; None: a memory store
        self._default_workspace: str | None = None
        self.before_sessions: Callable[[], None] = lambda: None
        """Called before the session service is first made (a face's background imports of
        its modules must be done: see :attr:`sessions`)."""
        self._store_given = store is not None
        self._clock = clock
        self._sweeper: asyncio.Task[None] | None = None
        self.kernel: Kernel | None = None
        self._environ = os.environ if environ is None else environ
        self._workspace: Path | None = None  # the default workspace (a local folder)
        self._folders: dict[Path | None, _Folder] = {}  # each workspace's configuration
        self._init_options: Mapping[str, Any] | None = None
        self._init_source: str | None = None  # the layer's name in errors (None: initialize's)
        self._http: httpx.AsyncClient | None = None
        self._http_limit = 0  # the max_connections of _http
        self._old_http: list[httpx.AsyncClient] = []  # replaced, still serving runs begun on them
        self._providers: dict[str, Provider] = {}
        self._mcp: McpManager | None = None  # made when a session or a run first needs it
        self._mcp_starts: dict[str, asyncio.Task[None]] = {}  # a new session's servers starting
        self._checkpoints: Checkpoints | None = None  # made on first use
        self._checkpoint_store: CheckpointStore | None = None
        self._checkpoint_stores: list[CheckpointStore] = []  # every one made: closed at exit
        self._background: set[asyncio.Future[None]] = set()  # kept until done
        self._instruction_loader: InstructionLoader | None = None
        self._workspace_folders: dict[str, Path] = {}  # a session's workspace URI -> its folder
        # a workspace URI -> its instruction files, and when they were looked at
        self._instructions_listed: dict[str, tuple[list[str] | None, float]] = {}

    @property
    def sessions(self) -> SessionService:
        """The session service, made on first use: its modules and the session and message
        models it imports are not the handshake's to wait for (:meth:`load_config` only notes
        the default workspace and the store). A server imports them in the background right
        after the handshake; :attr:`before_sessions` waits for that."""
        if self._sessions is None:
            self.before_sessions()
            from tether.sessions import MemoryStore, SessionService
            from tether.sessions.service import SessionHooks

            service = SessionService(
                self._store or MemoryStore(),
                SessionHooks(
                    created=self._session_created,
                    forked=self._session_forked,
                    deleted=self._session_deleted,
                    check=self._check_fields,
                    instructions=self.instruction_paths,
                ),
            )
            service.set_default_workspace(self._default_workspace)
            self._sessions = service
        return self._sessions

    def store_kind(self) -> tuple[str, bool]:
        """The kind of the session store and whether it is durable, known without making the
        session service (``initialize`` says them)."""
        store = self._current_store()
        if store is None:
            return MEMORY_STORE_KIND, False
        return store.kind, store.durable

    def _current_store(self) -> SessionStore | None:
        """The store served from; None for the memory store a session service not made yet
        will make."""
        return self._sessions.store if self._sessions is not None else self._store

    def _use_store(self, store: SessionStore) -> None:
        self._store = store
        if self._sessions is not None:
            self._sessions.use_store(store)

    @property
    def environ(self) -> Mapping[str, str]:
        """The environment the configuration is read from."""
        return self._environ

    def load_config(
        self, workspace: str | None, init_options: Mapping[str, Any] | None = None
    ) -> TetherConfig:
        """Load the configuration (``workspace`` is the default workspace of new sessions, and
        the one whose ``.tether/config.toml`` the server's own settings come from), pick the
        configured store, and schedule :meth:`start` on the running loop."""
        self._default_workspace = canonical_workspace(workspace) if workspace else None
        if self._sessions is not None:
            self._sessions.set_default_workspace(workspace)
        self._workspace = _local(self._default_workspace)
        self._init_options = init_options
        self._folders.clear()
        self._checkpoints = None  # over the store configured now
        self._checkpoint_store = None
        config = self.config()
        url = config.sessions.url(self._environ)
        if url is not None and not self._store_given:
            from tether.sessions.opening import OpeningStore

            self._use_store(OpeningStore(url))
        try:
            asyncio.get_running_loop().call_soon(self.start)
        except RuntimeError:  # no event loop: the store opens on first use, nothing is swept
            pass
        return config

    async def _check_fields(self, workspace: str, fields: SessionFields) -> None:
        """A session's ``agent`` must name a profile (-32602 naming it otherwise)."""
        if fields.agent is None:
            return
        from tether.kernel.agents import Profiles

        await asyncio.to_thread(Profiles(self._environ).require, fields.agent, _local(workspace))

    async def agent_profiles(self, workspace: str) -> list[AgentProfile]:
        """The agent profiles a session of ``workspace`` may run under."""
        from tether.kernel.agents import Profiles

        return await Profiles(self._environ).listed(_local(workspace))

    def build_kernel(self, approver: Approver | None) -> Kernel:
        """The kernel over this backend's store, providers and tools (imports a lot)."""
        from tether.kernel.agents import Profiles
        from tether.kernel.kernel import Kernel
        from tether.memory import load_memory, surely_no_memory

        self.kernel = Kernel(
            self.sessions.store,
            config=self.config,
            load_config=self.load_folder,
            providers=self._provider,
            tools=self._tools,
            memory=load_memory,
            no_memory=surely_no_memory,
            approver=approver,
            warnings=self.run_warnings,
            secrets=self.secrets,
            profiles=Profiles(self._environ),
            instructions=self.instruction_loader,
            checkpoints=self.checkpoints() if self.config().checkpoints.enabled else None,
        )
        return self.kernel

    def checkpoints(self) -> Checkpoints:
        """The checkpoints of sessions (``session/checkpoints``, ``session/rewind``), over this
        backend's store and the checkpoint store of the configuration (made on first use)."""
        if self._checkpoints is None:
            from tether.kernel.checkpoints import Checkpoints

            self._checkpoints = Checkpoints(
                self.sessions.store,
                self.checkpoint_store(),
                lambda: self.config().sessions.lease_delta(),
            )
        return self._checkpoints

    def checkpoint_store(self) -> CheckpointStore:
        """The checkpoint store of the configuration (made on first use, light to import)."""
        if self._checkpoint_store is None:
            from tether.checkpoints import CheckpointStore

            config = self.config()
            self._checkpoint_store = CheckpointStore(
                config.checkpoints.root(self._environ),
                max_file_bytes=config.checkpoints.max_file_bytes,
                max_checkpoint_bytes=config.checkpoints.max_checkpoint_bytes,
            )
            self._checkpoint_stores.append(self._checkpoint_store)
        return self._checkpoint_store

    def _prewarm_checkpoints(self, session: Session) -> None:
        """A session opens in a workspace: the checkpoint store takes the workspace's first
        snapshot in the background, after this request is answered (see
        :meth:`CheckpointStore.prewarm`), so that its first run's first edit does not wait."""
        folder = _local(session.workspace)
        if folder is None or not self.config().checkpoints.enabled:
            return
        try:
            asyncio.get_running_loop().call_soon(self.checkpoint_store().prewarm, folder)
        except RuntimeError:  # no event loop: nothing runs in the background
            pass

    @property
    def instruction_loader(self) -> InstructionLoader:
        """Reads the instruction files (``AGENTS.md``) of runs and of ``session/get``."""
        if self._instruction_loader is None:
            from tether.config import user_config_path
            from tether.memory.instructions import InstructionLoader

            user = user_config_path(self._environ)
            self._instruction_loader = InstructionLoader(None if user is None else user.parent)
        return self._instruction_loader

    async def instruction_paths(self, workspace: str) -> list[str] | None:
        """``session/get``'s ``instructions``: the instruction files a run at the root of
        ``workspace`` (a URI) reads; None when instructions are off or it is not local. Looked
        at again at most every :data:`INSTRUCTIONS_LISTED_FOR` seconds: the ``stat`` of each
        place was half the cost of a ``session/get`` (a run always looks again)."""
        now = time.monotonic()
        listed = self._instructions_listed.get(workspace)
        if listed is not None and now - listed[1] < INSTRUCTIONS_LISTED_FOR:
            return listed[0]
        paths = await self._instruction_paths(workspace)
        if len(self._instructions_listed) >= 1024:
            self._instructions_listed.clear()
        self._instructions_listed[workspace] = (paths, now)
        return paths

    async def _instruction_paths(self, workspace: str) -> list[str] | None:
        folder = self._workspace_folders.get(workspace)
        if folder is None:  # worked out once per workspace: ~25 µs a time
            if len(self._workspace_folders) >= 1024:
                self._workspace_folders.clear()
            folder = self._workspace_folders[workspace] = _local(workspace) or _NOT_LOCAL
        if folder is _NOT_LOCAL:
            return None
        await self.load_folder(folder)
        config = self.config(folder).instructions
        if not config.enabled:
            return None
        loader = self.instruction_loader
        found = loader.cached(folder, None, config.files)
        if found is None:
            found = await asyncio.to_thread(loader.load, folder, None, config.files)
        return found.paths

    def secrets(self, config: TetherConfig, session_id: str) -> Secrets:
        """The secrets of a run in ``session_id`` (:mod:`tether.secrets`): its configuration's
        (``config``, with the API keys of the environment), and those of the session's own MCP
        servers."""
        from tether.secrets import Secrets, configured_secrets, server_secrets

        folder = next((f for f in self._folders.values() if f.config is config), None)
        if folder is not None:
            secrets = folder.secrets
        else:
            secrets = configured_secrets(config, self._environ)
        own = self._mcp.session_specs(session_id) if self._mcp is not None else ()
        return secrets | Secrets.of(server_secrets(own)) if own else secrets

    def config(self, workspace: Path | None = None) -> TetherConfig:
        """The configuration of the sessions of ``workspace`` (a local folder; None: the default
        workspace): every layer, with that folder's own ``.tether/config.toml``. Each folder's
        is loaded when first asked for; while its file is left out for an error, it is read
        again once it changes (:func:`_identity`), so a fixed file applies from the next run on.
        The first time a folder other than the default one is found with an error, the user is
        told (:meth:`warn`)."""
        key = workspace or self._workspace
        if self._stale(key):
            self._keep(key, self._read_folder(key))
        return self._folders[key].config

    async def load_folder(self, workspace: Path | None) -> None:
        """Read the configuration of ``workspace`` on a thread when :meth:`config` would read
        files (the first time, or once its file in error has changed), so that a run does not
        read and parse them on the event loop."""
        key = workspace or self._workspace
        if self._stale(key):
            self._keep(key, await asyncio.to_thread(self._read_folder, key))

    @property
    def workspace_error(self) -> ConfigError | None:
        """The error of the default workspace's file, left out (None when it loads)."""
        folder = self._folders.get(self._workspace)
        return None if folder is None else folder.error

    def _stale(self, key: Path | None) -> bool:
        folder = self._folders.get(key)
        if folder is None:
            return True
        return folder.error is not None and _identity(self._files(key)) != folder.identity

    def _files(self, workspace: Path | None) -> list[Path]:
        """The files a folder's configuration is read from."""
        from tether.config import user_config_path, workspace_config_path

        user = user_config_path(self._environ)
        files = [] if user is None else [user]
        return files if workspace is None else [*files, workspace_config_path(workspace)]

    def _read_folder(self, workspace: Path | None, settings: _Settings | None = None) -> _Read:
        """Every layer but a workspace file that cannot be used, which is kept as the error
        (reads files: on a thread, or the first time outside a run). ``settings``: the client's
        layer and its name, when not the one in force."""
        from tether.config import INIT_OPTIONS_SOURCE, load_config

        options, source = settings or (self._init_options, self._init_source)
        identity = _identity(self._files(workspace))  # first: a change while reading is seen
        errors: list[ConfigError] = []
        try:
            config = load_config(
                workspace=workspace,
                environ=self._environ,
                init_options=options,
                on_workspace_error=errors.append,
                init_source=source or INIT_OPTIONS_SOURCE,
            )
        except ConfigError as exc:  # the user's own layers
            return _Read(identity, None, exc)
        return _Read(identity, config, errors[0] if errors else None)

    def settings_changed(self, settings: object) -> None:
        """``workspace/didChangeConfiguration`` (a notification: nothing to answer) by
        :meth:`reconfigure`; settings that cannot be used are a warning to the user, and the
        configuration in force stays."""
        try:
            self.reconfigure(settings)
        except ConfigError as exc:
            message = f"the new settings were not applied (the previous ones stay): {exc.message}"
            logger.warning("%s", message)
            self.warn(message)

    def reconfigure(self, settings: object) -> list[str]:
        """``workspace/didChangeConfiguration``: ``settings`` (:func:`tether.config.settings_layer`)
        replace the client's layer that ``initializationOptions`` set, validated as that layer
        is, over the same files and environment. Runs in progress keep the configuration they
        began with; the next ones read the new one. What a running server keeps
        (:data:`tether.config.RESTART_SECTIONS`) stays as it started: the keys whose change
        was held back are returned, and the user is told. Invalid settings change nothing and
        raise :class:`ConfigError`. Reads the configuration files on the calling thread, so
        that changes apply in the order they come."""
        from tether.config import SETTINGS_SOURCE, held_for_restart, keep_restart_sections
        from tether.config import settings_layer as layer_of

        layer = layer_of(settings)
        if layer is None:
            return []
        key = self._workspace
        before = self.config()
        read = self._read_folder(key, (layer, SETTINGS_SOURCE))
        if read.config is None:
            assert read.error is not None
            raise read.error
        held = held_for_restart(before, read.config)
        if held:
            layer = keep_restart_sections(layer, self._init_options)
            read = self._read_folder(key, (layer, SETTINGS_SOURCE))
            assert read.config is not None  # the layers that loaded, with sections that did
        self._init_options, self._init_source = layer, SETTINGS_SOURCE
        self._folders.clear()  # each other folder is read again when next asked for
        self._instructions_listed.clear()
        self._keep(key, read)
        if held:
            message = (
                f"{', '.join(held)}: changed in the settings, but the server keeps the value "
                "it started with until it restarts (the other settings apply now)"
            )
            logger.warning("%s", message)
            self.warn(message)
        logger.info("settings changed by the client: the next runs use them")
        preload_provider(self.config().provider.type)  # a provider not used yet: loaded now
        return held

    def _keep(self, key: Path | None, read: _Read) -> None:
        """Keep what :meth:`_read_folder` read; the user's own layers broken since the folder
        was loaded keep what works (and the first load fails)."""
        known = self._folders.get(key)
        if read.config is None:
            assert read.error is not None
            if known is None:
                raise read.error
            logger.warning("the configuration was not reloaded: %s", read.error.message)
            self._folders[key] = replace(known, identity=read.identity)
            return
        secrets = _secrets_of(read.config, self._environ)
        self._folders[key] = _Folder(read.config, read.error, secrets, read.identity)
        if known is None and read.error is not None and key != self._workspace:
            self._tell(read.error)

    def run_warnings(self, workspace: Path | None = None) -> list[RunWarning]:
        """What each run in ``workspace`` (None: the default) reports: the error of its folder's
        workspace file, left out. Read after :meth:`config` of the same folder."""
        from tether.protocol.kernel import RunWarning

        folder = self._folders.get(workspace or self._workspace)
        if folder is None or folder.error is None:
            return []
        error = folder.error
        return [RunWarning(code=error.code, message=left_out(error), data=error.data)]

    def warn(self, message: str) -> None:
        """Tell the user about a problem that does not stop the server (a face shows it its own
        way; the log has it anyway)."""

    def _tell(self, error: ConfigError) -> None:
        message = left_out(error)
        logger.warning("%s", message)
        self.warn(message)

    def start(self) -> None:
        """After the handshake: open the configured store, start sweeping expired sessions."""
        store = self._current_store()
        if store is not None:  # a memory store (None) has nothing to open
            from tether.sessions.opening import OpeningStore  # loaded with the store already

            if isinstance(store, OpeningStore):
                store.start()
        if self.workspace_error is not None:
            self._tell(self.workspace_error)
        if self.config().sessions.ttl is not None and self._sweeper is None:
            self._sweeper = asyncio.ensure_future(self._sweep_forever())
        provider = self.config().provider
        preload_provider(provider.type, provider.base_url)

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
        the store; close the checkpoint stores (what they do in the background is waited for a
        few seconds, then ended: no git outlives the process)."""
        if self._checkpoint_stores:
            stores, self._checkpoint_stores = self._checkpoint_stores, []
            await asyncio.gather(*(asyncio.to_thread(store.close) for store in stores))
        if self._sweeper is not None:
            self._sweeper.cancel()
        for starting in list(self._mcp_starts.values()):
            starting.cancel()
        if self._mcp is not None:
            await self._mcp.aclose()
        for provider in self._providers.values():
            await provider.aclose()
        for http in [*self._old_http, *([self._http] if self._http is not None else [])]:
            await http.aclose()
        store = self._current_store()
        if store is not None:
            await store.aclose()

    def _provider(self, config: ProviderConfig) -> Provider:
        """One provider per distinct configuration, kept for the life of the server (a scripted
        provider goes on through its script from one run to the next)."""
        from tether.providers import make_provider

        key = config.model_dump_json()
        provider = self._providers.get(key)
        if provider is None:
            limit = config.max_connections  # not a workspace file's key: the same everywhere
            provider = make_provider(config, lambda: self._shared_http(limit))
            self._providers[key] = provider
        return provider

    def _shared_http(self, max_connections: int) -> httpx.AsyncClient:
        """The one HTTP client every provider shares, made on first use with the configured
        ``provider.max_connections``, made again when the settings change that (the providers
        made before keep theirs, and the runs on them too), and closed by :meth:`aclose`."""
        from tether.providers.client import make_client

        if self._http is not None and self._http_limit != max_connections:
            self._old_http.append(self._http)
            self._http = None
        if self._http is None:
            self._http = make_client(max_connections)
            self._http_limit = max_connections
        return self._http

    @property
    def mcp(self) -> McpManager:
        """The MCP servers of every session (per-session server specs live only here)."""
        if self._mcp is None:
            from tether.tools.mcp import McpManager

            self._mcp = McpManager()
        return self._mcp

    async def _tools(self, config: TetherConfig, session_id: str, workspace: Path) -> ToolExecutor:
        from tether.tools import builtin_registry, shared_builtin_tools

        if not self._has_mcp_servers(config, session_id):
            return builtin_registry(config.tools.enabled)
        return await self.mcp.executor(
            shared_builtin_tools(), **self._mcp_arguments(config, session_id, workspace)
        )

    def _has_mcp_servers(self, config: TetherConfig, session_id: str) -> bool:
        own = self._mcp is not None and self._mcp.has_session_servers(session_id)
        return bool(config.tools.mcp_servers) or own

    def _mcp_arguments(
        self, config: TetherConfig, session_id: str, workspace: Path
    ) -> _McpArguments:
        """What picks and starts a run's MCP servers (:meth:`McpManager.executor`)."""
        from tether.kernel.kernel import sandbox_policy

        return _McpArguments(
            servers=config.tools.mcp_servers,
            enabled=config.tools.enabled,
            session_id=session_id,
            workspace=workspace,
            sandbox=sandbox_policy(config, mcp=True),
            start_timeout=config.mcp.start_timeout,
        )

    def _session_created(self, session: Session, params: CreateSessionParams) -> None:
        """A session was made: the checkpoint store prepared for its workspace, its MCP
        servers remembered and started in the background."""
        self._prewarm_checkpoints(session)
        self._remember_mcp_servers(session, params)
        self.start_mcp_servers_soon(session.session_id, session.workspace)

    def start_mcp_servers_soon(self, session_id: str, workspace: str) -> None:
        """Start the MCP servers of a session just made (or given servers again) in the
        background, once the request is answered, so that its first run waits only for those
        still starting (a server takes one to a few seconds to start). Runs need a local
        workspace: nothing for another, nor without an event loop (the first run starts them)."""
        folder = _local(workspace)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        if folder is None:
            return
        if not self._stale(folder) and not self._has_mcp_servers(self.config(folder), session_id):
            return  # the usual case, known without a task
        task = loop.create_task(self._start_mcp_servers(session_id, folder))
        self._mcp_starts[session_id] = task
        task.add_done_callback(lambda done: self._started_mcp_servers(session_id, done))

    def _started_mcp_servers(self, session_id: str, task: asyncio.Task[None]) -> None:
        if self._mcp_starts.get(session_id) is task:
            del self._mcp_starts[session_id]

    async def _start_mcp_servers(self, session_id: str, workspace: Path) -> None:
        try:
            await self.load_folder(workspace)
            config = self.config(workspace)
            if not self._has_mcp_servers(config, session_id):
                return
            # The MCP SDK takes a few hundred ms to import: not on the event loop.
            await asyncio.to_thread(importlib.import_module, "tether.tools.mcp.connection")
            await self.mcp.start(**self._mcp_arguments(config, session_id, workspace))
        except Exception:  # the first run starts them, and reports what fails then
            logger.exception("could not start the MCP servers of session %s", session_id)

    def _remember_mcp_servers(self, session: Session, params: CreateSessionParams) -> None:
        if params.mcp_servers:
            from tether.secrets import Secrets, register, server_secrets

            self.mcp.set_session_servers(session.session_id, params.mcp_servers)
            register(Secrets.of(server_secrets(params.mcp_servers)))

    def _session_forked(self, session: Session) -> None:
        """A session was forked: like a new one, and it shares its parent's MCP servers."""
        self._prewarm_checkpoints(session)
        if self._mcp is not None and session.parent_session_id is not None:
            self._mcp.share_session_servers(session.parent_session_id, session.session_id)

    async def _session_deleted(self, session_id: str) -> None:
        """A session was deleted or has expired: release its MCP servers, drop its checkpoints
        (in the background: the answer does not wait). A face that keeps something of its own
        per session extends this to forget it."""
        await self.close_mcp_servers(session_id)
        config = self.config().checkpoints
        if config.enabled:
            forget = self.checkpoints().session_deleted(session_id, interval=config.gc_interval)
            task = asyncio.ensure_future(forget)
            self._background.add(task)
            task.add_done_callback(self._background_done)

    def _background_done(self, task: asyncio.Future[None]) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.warning("checkpoints of a deleted session: %s", task.exception())

    async def close_mcp_servers(self, session_id: str) -> None:
        """Stop the session's own MCP servers (those still starting in the background too) and
        forget them."""
        starting = self._mcp_starts.pop(session_id, None)
        if starting is not None:
            starting.cancel()
        if self._mcp is not None:
            await self._mcp.close_session(session_id)


class _McpArguments(TypedDict):
    """What picks and starts a session's MCP servers (:meth:`McpManager.start`, ``executor``)."""

    servers: Sequence[McpServerSpec]
    enabled: Collection[str] | None
    session_id: str
    workspace: Path
    sandbox: SandboxPolicy | None
    start_timeout: float


_Identity = tuple[tuple[int, ...] | None, ...]
_Settings = tuple["Mapping[str, Any] | None", "str | None"]  # a client layer and its name


def _identity(files: list[Path]) -> _Identity:
    """What changes when one of ``files`` does: for each, the device, inode, size and
    modification time of the path and of what it links to (None: there is none)."""
    found: list[tuple[int, ...] | None] = []
    for path in files:
        for follow in (False, True):
            try:
                info = os.stat(path, follow_symlinks=follow)
            except (OSError, ValueError):
                found.append(None)
            else:
                found.append((info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns))
    return tuple(found)


@dataclass(frozen=True)
class _Read:
    """A folder's configuration as read (None when the user's own layers failed: ``error``),
    the error of its workspace file, and the identity of the files read."""

    identity: _Identity
    config: TetherConfig | None
    error: ConfigError | None


@dataclass(frozen=True)
class _Folder:
    """The configuration of one workspace folder, and the error of its file when left out."""

    config: TetherConfig
    error: ConfigError | None
    secrets: Secrets  # of the configuration, redacted from every log record once it is loaded
    identity: _Identity  # of the files it was read from (read again on a change while in error)


def _secrets_of(config: TetherConfig, environ: Mapping[str, str]) -> Secrets:
    from tether.secrets import configured_secrets, register

    secrets = configured_secrets(config, environ)
    register(secrets)
    return secrets


def left_out(error: ConfigError) -> str:
    return f"the workspace config file was left out: {error.message}"


_NOT_LOCAL = Path("/dev/null/not-local")  # a workspace that is not a local folder


def _local(workspace: str | None) -> Path | None:
    if workspace is None or not canonical_workspace(workspace).startswith("file://"):
        return None
    return local_path(workspace)
