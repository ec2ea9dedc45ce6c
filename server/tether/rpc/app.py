"""What tether serves, independent of the JSON-RPC machinery: its methods and its handshake.

The session methods are ready at once; the kernel (providers, tools, HTTP) is built by
:meth:`App.load_kernel` on the first ``kernel/*`` request (its modules are imported in the
background after the handshake), so answering ``initialize`` imports as little as it can.
A configured SQL store is opened right after the handshake too (requests wait for it), and the
sweep of expired sessions starts then.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from tether import __version__
from tether.backend import Backend
from tether.protocol import (
    InitializeParams,
    InitializeResult,
    ServerCapabilities,
    ServerInfo,
    SessionCapabilities,
)
from tether.protocol.limits import DEFAULT_LIMITS
from tether.rpc import client_log
from tether.rpc.calls import Handler
from tether.sessions.ids import utcnow

if TYPE_CHECKING:
    from pathlib import Path

    from tether.config import TetherConfig
    from tether.protocol.kernel import PermissionParams, PermissionResult
    from tether.rpc.progress import Notify
    from tether.sessions import SessionStore
    from tether.tools.base import ToolExecutor

logger = logging.getLogger(__name__)

KERNEL_METHODS = ("kernel/cancel", "kernel/run", "session/commands", "session/compact")
SESSION_METHODS = (
    "session/append",
    "session/checkpoints",
    "session/clear",
    "session/configure",
    "session/create",
    "session/delete",
    "session/fork",
    "session/get",
    "session/list",
    "session/messages",
    "session/rewind",
)
"""The session methods, served once their table is made (:meth:`App.load_session_methods`, on
the first of them): the session models they validate are not the handshake's to build."""

RequestClient = Callable[[str, Any], Awaitable[Any]]
"""Sends a request to the client and returns its result (cancelling the await withdraws it)."""

LayerTools = Callable[["ToolExecutor", str, "TetherConfig"], "ToolExecutor"]
"""Wraps the tools of a run in a session, with the run's configuration (the LSP face: open
buffers as the files' text)."""

FaceApprover = Callable[["PermissionParams"], Awaitable["PermissionResult | None"]]
"""Asks the user about a call of a run the face started itself; None: not one of its runs."""


@dataclass(frozen=True)
class ClientChannel:
    """How the App reaches the client, given once by the wire that carries it."""

    notify: Notify
    request: RequestClient
    before_kernel: Callable[[], None] = lambda: None
    """Called before the kernel is loaded (the background loader's imports must be done)."""
    before_sessions: Callable[[], None] = lambda: None
    """Called before the session service is made (the background loader's imports of its
    modules must be done)."""


@dataclass(frozen=True)
class FaceHooks:
    """What a face that runs turns of its own (the LSP face: ``tether.ask``) adds to the App.

    Given to :class:`App` as it is made, or, for a face that is built only once the handshake
    is over (the LSP face waits for pygls to be imported), handed to :meth:`App.attach_face`
    once, as the face is made. Nothing else changes the App's hooks."""

    tool_layer: LayerTools | None = None
    """Wraps the tools of each run (the LSP face: open buffers as the files' text)."""
    approver: FaceApprover | None = None
    """Asked first about every call that needs the user's approval."""
    stop: Callable[[], Awaitable[None]] | None = None
    """Stops what the face runs beyond its requests (its turns), as the server closes."""
    trace: Callable[[], str] | None = None
    """The client's ``$/setTrace`` value (None: ``off``), for the client log."""


NO_FACE = FaceHooks()


class App(Backend):
    """The services behind the methods, and the table of request methods they answer."""

    def __init__(
        self,
        store: SessionStore | None = None,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], datetime] = utcnow,
        face: FaceHooks = NO_FACE,
    ) -> None:
        """``store``: the session store to use whatever the configuration says (tests);
        ``face``: the hooks of a face that runs turns of its own, when it is made first."""
        super().__init__(store, environ, clock)
        self._face = face
        self.limits = DEFAULT_LIMITS  # the configuration's, once initialize has loaded it
        self.methods: dict[str, Handler] = {}  # SESSION_METHODS and KERNEL_METHODS join it
        self.client: InitializeParams | None = None
        self._client: ClientChannel | None = None  # the wire's, once it is made
        self._session_methods_loaded = False
        self._kernel_loaded = False
        self.run_tokens: dict[str | int, str] = {}  # work-done token -> session of its run

    def attach_client(self, channel: ClientChannel) -> None:
        """The wire's way to the client; one wire only."""
        if self._client is not None:
            raise RuntimeError("the App already has a wire to its client")
        self._client = channel
        self.before_sessions = channel.before_sessions

    def notify(self, method: str, params: Any) -> None:
        """A notification to the client (dropped while no wire carries the App)."""
        if self._client is not None:
            self._client.notify(method, params)

    async def request_client(self, method: str, params: Any) -> Any:
        """A request to the client, its result (cancelling the await withdraws it)."""
        if self._client is None:
            raise RuntimeError(f"no client to send {method} to")
        return await self._client.request(method, params)

    def attach_face(self, face: FaceHooks) -> None:
        """The hooks of a face made after the App (the LSP face, once pygls is loaded); one
        face only: a second would silently take the first one's place."""
        if self._face is not NO_FACE:
            raise RuntimeError("the App already has a face's hooks")
        self._face = face

    def trace(self) -> str:
        """The client's ``$/setTrace`` value (``off`` until a face keeps it)."""
        return "off" if self._face.trace is None else self._face.trace()

    def initialize(self, params: InitializeParams) -> InitializeResult:
        """Record what the client told us, load the configuration, say what this server offers."""
        from tether.config import PROVIDER_TYPES
        from tether.tools import BUILTIN_TOOL_NAMES

        config = self.load_config(_first_workspace(params), params.initialization_options)
        self.client = params
        self.limits = config.limits.limits()
        self._log_to_client(params)
        kind, durable = self.store_kind()
        # model_construct: the server's own answer, not validated (that would build a validator
        # per model for the one answer; its serializer is built as it is sent)
        return InitializeResult.model_construct(
            server_info=ServerInfo.model_construct(name="tether", version=__version__),
            capabilities=ServerCapabilities.model_construct(
                sessions=SessionCapabilities.model_construct(
                    store=kind, fork=True, durable=durable
                ),
                methods=sorted({*self.methods, *SESSION_METHODS, *KERNEL_METHODS}),
                providers=list(PROVIDER_TYPES),
                tools=[
                    name
                    for name in BUILTIN_TOOL_NAMES
                    if config.tools.enabled is None or name in config.tools.enabled
                ],
            ),
        )

    def _log_to_client(self, params: InitializeParams) -> None:
        """tether's warnings and errors go to a client that shows window messages (LSP's
        ``window.showMessage`` capability) as ``window/logMessage``; its info lines while the
        client traces (``$/setTrace``)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # initialized outside an event loop (a test): the log stays local
            return
        if params.capabilities.window.show_message is not None:
            client_log.attach(self.notify, self.trace, loop)
        else:
            client_log.detach()

    async def aclose(self) -> None:
        if self._face.stop is not None:
            await self._face.stop()
        await super().aclose()

    def load_session_methods(self) -> None:
        """Make the session methods' table (:data:`SESSION_METHODS`): on the first of them, or
        as the kernel loads. Once: later calls do nothing; a method already in the table (a
        test's) stays."""
        if self._session_methods_loaded:
            return
        from tether.rpc.checkpoint_methods import checkpoint_methods
        from tether.rpc.handlers import session_methods

        methods = session_methods(self.sessions, lambda: self.limits)
        methods.update(checkpoint_methods(self.checkpoints, self.sessions, lambda: self.limits))
        for name, method in methods.items():
            self.methods.setdefault(name, method)
        self._session_methods_loaded = True

    def load_kernel(self) -> None:
        """Build the kernel and add its methods (after the handshake: this imports a lot).
        Once: later calls do nothing."""
        if self._kernel_loaded:
            return
        if self._client is not None:
            self._client.before_kernel()
        self.load_session_methods()
        from tether.rpc.kernel_methods import kernel_methods

        kernel = self.build_kernel(self._ask_permission)
        self.methods.update(kernel_methods(kernel, self.sessions, self.notify, self.run_tokens))
        self._kernel_loaded = True

    async def _tools(self, config: TetherConfig, session_id: str, workspace: Path) -> ToolExecutor:
        executor = await super()._tools(config, session_id, workspace)
        if self._face.tool_layer is None:
            return executor
        return self._face.tool_layer(executor, session_id, config)

    async def _ask_permission(self, params: PermissionParams) -> PermissionResult:
        """``tool/requestPermission`` to a client that declared it answers it (the face asks
        its own way about the runs it started)."""
        from pydantic import ValidationError

        if self._face.approver is not None:
            answer = await self._face.approver(params)
            if answer is not None:
                return answer

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
                '{"outcome": "allow" | "allow_always" | "reject" | "reject_always"}'
            ) from None

    def warn(self, message: str) -> None:
        self.notify("window/showMessage", {"type": _LSP_WARNING, "message": message})


_LSP_WARNING = 2  # MessageType.Warning of window/showMessage


def _first_workspace(params: InitializeParams) -> str | None:
    if params.workspace_folders:
        return params.workspace_folders[0].uri
    return params.root_uri or params.root_path
