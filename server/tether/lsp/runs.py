"""Turns started from any LSP client: ``tether.ask`` (what the code actions send), ``tether.cancel``
and ``tether.newSession``, in the current session of the workspace folder that holds the
document they are about (else of the default workspace).

A turn reports through ``$/progress`` on a work-done token (the client's, or one made with
``window/workDoneProgress/create``); its permission questions are ``window/showMessageRequest``
(Allow / Always allow / Reject); its edits go through ``workspace/applyEdit``; its answer is
appended to a Markdown transcript shown with ``window/showDocument`` (or, for a client without
it, with ``window/showMessage``). ``window/workDoneProgress/cancel`` on its token, or
``tether.cancel``, stops it as ``kernel/cancel`` does, whatever it waits for.

No wait on the client holds a turn for good: the requests no person answers
(``workspace/applyEdit``, ``window/workDoneProgress/create``, ``window/showDocument``) are
withdrawn after the ``lsp.apply_edit_timeout`` of the session's workspace folder; a permission
question waits for the person, until the turn is stopped.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from tether.kernel.approval import ApprovalError
from tether.lsp.actions import AskArguments, prompt_of, title_of
from tether.lsp.documents import Buffers, BufferTools
from tether.lsp.transcripts import Turn, append_turn, transcript_path
from tether.protocol import CreateSessionParams, ListSessionsParams, TetherError
from tether.protocol.errors import RequestCancelled, SessionBusy
from tether.protocol.kernel import (
    MessageDelta,
    PermissionParams,
    PermissionResult,
    ProgressParams,
    RunParams,
    RunResult,
    StopReason,
    ToolCallStarted,
    ToolCallUpdate,
)
from tether.repofiles import RepoFileError, read_repo_file
from tether.rpc.errors import ClientError
from tether.sessions.ids import utcnow, uuid7
from tether.sessions.workspaces import local_path
from tether.tools.editor_requests import Bound, bounded_request

if TYPE_CHECKING:
    from tether.config import TetherConfig
    from tether.rpc.app import App
    from tether.tools.base import ToolExecutor

logger = logging.getLogger(__name__)
T = TypeVar("T")

ALLOW, ALWAYS, REJECT = "Allow", "Always allow", "Reject"
_OUTCOMES = {ALLOW: "allow", ALWAYS: "allow_always", REJECT: "reject"}
_INFO, _WARNING, _ERROR = 3, 2, 1  # MessageType
MAX_SHOWN_CHARS = 4000  # of an answer shown with window/showMessage
MAX_DOCUMENT_BYTES = 8 * 1024 * 1024  # of a document read from the disk for a turn's prompt


@dataclass
class _Run:
    token: str | int | None
    turn: Turn
    last_report: str = ""
    cancelled: bool = False  # asked to stop, maybe before the kernel had started it
    stopped: bool = False  # the kernel was told (once: a second cancel would cut its ending)
    waiting: asyncio.Future[Any] | None = None  # what the turn waits for before its run
    # done once the turn has left its session (its run ended and gave the session back)
    ended: asyncio.Future[None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class Runs:
    """The turns of one LSP connection."""

    def __init__(self, app: App, buffers: Buffers) -> None:
        self.app = app
        self.buffers = buffers
        self.current: dict[str | None, str] = {}  # workspace folder (None: default) -> session
        self.active: dict[str, _Run] = {}  # session id -> its turn started here
        self._tokens = itertools.count(1)

    # -- the commands ------------------------------------------------------------------------

    async def ask(self, arguments: AskArguments, token: str | int | None) -> dict[str, Any]:
        """Run a turn to its end; the answer says where its transcript is."""
        session_id, root = await self._session(self._folder_of(arguments.uri))
        if session_id in self.active:  # one turn at a time: the kernel would refuse it anyway
            raise SessionBusy(session_id, holder="this-process")
        run = self.active[session_id] = _Run(None, Turn(title_of(arguments), "", utcnow()))
        try:
            run.turn.prompt = await self._prompt(arguments, root)
            if token is None:
                token = await self._unless_stopped(run, self._create_token(root))
            run.token = token
            result, error = await self._run(session_id, run)
        finally:
            self.active.pop(session_id, None)
            run.ended.set_result(None)
        transcript = transcript_path(self._data_home(), session_id)
        markdown = run.turn.markdown(result, None if error is None else error.message)
        await asyncio.to_thread(append_turn, transcript, session_id, markdown)
        if isinstance(error, RequestCancelled):
            raise error
        await self._show(transcript, result, error, root)
        reason = str(result.stop_reason) if result is not None else "error"
        return {"sessionId": session_id, "stopReason": reason, "transcript": transcript.as_uri()}

    async def _prompt(self, arguments: AskArguments, root: Path) -> str:
        """The turn's prompt, with the selection as the editor has it (else as saved)."""
        path = _local(arguments.uri)
        text = None
        if path is not None:
            text = self.buffers.text(path)
            if text is None:
                text = await asyncio.to_thread(_read, path)
        return prompt_of(arguments, text, path, root)

    async def _unless_stopped(self, run: _Run, work: Coroutine[Any, Any, T]) -> T | None:
        """``work``, unless the turn is stopped first (``tether.cancel``): None then, at once."""
        waiting: asyncio.Future[T] = asyncio.ensure_future(work)
        run.waiting = waiting
        try:
            return await waiting
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise
            return None
        finally:
            run.waiting = None

    async def _run(self, session_id: str, run: _Run) -> tuple[RunResult | None, TetherError | None]:
        """The kernel's run of the turn, between the begin and the end of its progress; a turn
        stopped before its run began records nothing."""
        if run.cancelled:
            return _stopped_before(session_id), None
        self.app.load_kernel()  # a command may come before any kernel/* request
        kernel = self.app.kernel
        assert kernel is not None, "load_kernel builds it"
        if run.token is not None:
            self.app.run_tokens[run.token] = session_id
        begin = {"kind": "begin", "title": f"tether: {run.turn.title}", "cancellable": True}
        self._progress(run, {**begin, "message": "thinking"})
        result: RunResult | None = None
        error: TetherError | None = None
        try:
            params = RunParams(session_id=session_id, prompt=run.turn.prompt)
            result = await kernel.run(params, lambda event: self._event(run, event))
        except TetherError as exc:
            error = exc
        finally:
            if run.token is not None:
                self.app.run_tokens.pop(run.token, None)
            reason = str(result.stop_reason) if result is not None else "error"
            self._progress(run, {"kind": "end", "message": reason})
        return result, error

    async def cancel(self) -> dict[str, Any]:
        """Stop the turns started here; answered once they have left their sessions (the
        kernel's :data:`~tether.kernel.kernel.STOP_WAIT` at most), which then take the next
        ``tether.ask`` at once."""
        from tether.kernel.kernel import STOP_WAIT

        stopped = [
            self.active[session_id] for session_id in list(self.active) if self._stop(session_id)
        ]
        if stopped:
            await asyncio.wait([run.ended for run in stopped], timeout=STOP_WAIT)
        return {"cancelled": bool(stopped)}

    def cancel_token(self, token: str | int) -> bool:
        """``window/workDoneProgress/cancel``: stop the run reporting on ``token``."""
        session_id = self.app.run_tokens.get(token)
        logger.debug("window/workDoneProgress/cancel %r: the run of session %s", token, session_id)
        if session_id is None or self.app.kernel is None:
            return False
        if session_id in self.active:
            return self._stop(session_id)
        return self.app.kernel.cancel(session_id)

    def _stop(self, session_id: str) -> bool:
        """A turn is stopped as soon as the kernel runs it (its first event, when the kernel
        was still taking the session's lease)."""
        run = self.active[session_id]
        run.cancelled = True
        if run.waiting is not None:
            run.waiting.cancel()
        if not run.stopped and self.app.kernel is not None:
            run.stopped = self.app.kernel.cancel(session_id)
        return True

    async def new_session(self, uri: str | None = None) -> dict[str, Any]:
        """A new session for the next turns in the workspace folder of the document ``uri``
        (else the default workspace)."""
        folder = self._folder_of(uri)
        session = await self.app.sessions.create(CreateSessionParams(workspace=folder))
        self.current[folder] = session.session_id
        self.app.notify(
            "window/showMessage", {"type": _INFO, "message": "tether: a new session starts"}
        )
        return {"sessionId": session.session_id}

    # -- what the kernel asks ----------------------------------------------------------------

    async def approve(self, params: PermissionParams) -> PermissionResult | None:
        """Ask about a call of a turn started here with ``window/showMessageRequest``."""
        if params.session_id not in self.active:
            return None
        title = params.tool_call.title or params.tool_call.name
        message = f"tether wants to: {title}"
        if params.reason:
            message += f" ({params.reason})"
        request = {
            "type": _WARNING,
            "message": message,
            "actions": [{"title": ALLOW}, {"title": ALWAYS}, {"title": REJECT}],
        }
        try:
            answer = await self.request("window/showMessageRequest", request)
        except ClientError as exc:
            raise ApprovalError(f"window/showMessageRequest failed: {exc.message}") from None
        chosen = answer.get("title") if isinstance(answer, dict) else None
        outcome = _OUTCOMES.get(chosen, "reject") if isinstance(chosen, str) else "reject"
        return PermissionResult.model_validate({"outcome": outcome})

    def tools(self, executor: ToolExecutor, session_id: str, config: TetherConfig) -> ToolExecutor:
        """Open buffers for every run's file tools; writes through the editor for turns
        started here, when the client applies edits (each within the run's
        ``lsp.apply_edit_timeout``: ``config`` is its session folder's)."""
        client = self.app.client
        writes = (
            session_id in self.active
            and client is not None
            and client.capabilities.workspace.apply_edit
        )
        apply_edit = self.request if writes else None
        return BufferTools(executor, self.buffers, apply_edit, config.lsp.apply_edit_timeout)

    # -- helpers -----------------------------------------------------------------------------

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        """A standard request to the client, its params and result as plain JSON data."""
        return await self.app.request_client(method, params)

    async def _bounded_request(self, method: str, params: dict[str, Any], root: Path) -> Any:
        """A request no person answers, within the ``lsp.apply_edit_timeout`` of the session's
        workspace folder ``root`` (a workspace file may shorten it): then it is withdrawn and
        :class:`~tether.tools.editor_requests.Unanswered` (a :class:`TimeoutError`) raised."""
        await self.app.load_folder(root)  # read off the event loop the first time
        timeout = self.app.config(root).lsp.apply_edit_timeout
        return await bounded_request(
            self.request, method, params, Bound(timeout, "lsp.apply_edit_timeout")
        )

    async def _session(self, folder: str | None) -> tuple[str, Path]:
        """The current session of a workspace folder (None: the default workspace): the one
        used last here, else the newest of the folder, else a new one. Each folder is its own
        workspace, with its own ``.tether/config.toml``."""
        sessions = self.app.sessions
        current = self.current.get(folder)
        if current is not None:
            try:
                from tether.protocol import GetSessionParams

                session = await sessions.get(GetSessionParams(session_id=current))
                return session.session_id, local_path(session.workspace)
            except TetherError:
                del self.current[folder]
        listed = await sessions.list_sessions(
            ListSessionsParams(workspace=folder or sessions.default_workspace, limit=1)
        )
        if listed.sessions:
            session = listed.sessions[0]
        else:
            session = await sessions.create(CreateSessionParams(workspace=folder))
        self.current[folder] = session.session_id
        return session.session_id, local_path(session.workspace)

    def _folder_of(self, uri: str | None) -> str | None:
        """The workspace folder (its URI) that holds the document ``uri``, the innermost when
        folders nest; None when it is in none of them, or is no local file."""
        path = _local(uri)
        if path is None:
            return None
        best: tuple[int, str] | None = None
        for folder in self.buffers.workspace.folders.values():
            root = _local(folder.uri)
            if root is not None and path.is_relative_to(root):
                if best is None or len(root.parts) > best[0]:
                    best = (len(root.parts), folder.uri)
        return None if best is None else best[1]

    async def _create_token(self, root: Path) -> str | None:
        client = self.app.client
        if client is None or not client.capabilities.window.work_done_progress:
            return None
        token = f"tether-turn-{next(self._tokens)}"
        try:
            await self._bounded_request("window/workDoneProgress/create", {"token": token}, root)
        except ClientError as exc:
            logger.info("no progress for the turn: %s", exc.message)
            return None
        except TimeoutError:
            logger.info("no progress for the turn: window/workDoneProgress/create unanswered")
            return None
        return token

    def _progress(self, run: _Run, value: dict[str, Any]) -> None:
        if run.token is not None:
            self.app.notify("$/progress", {"token": run.token, "value": value})

    def _event(self, run: _Run, params: ProgressParams) -> None:
        if run.cancelled and not run.stopped and self.app.kernel is not None:
            run.stopped = self.app.kernel.cancel(params.session_id)
        event = params.event
        report: str | None = None
        if isinstance(event, MessageDelta):
            run.turn.text.append(event.text)
            report = _tail("".join(run.turn.text))
        elif isinstance(event, ToolCallStarted):
            run.turn.calls.append(event.title or event.name)
            report = event.title or event.name
        elif isinstance(event, ToolCallUpdate) and event.status == "failed":
            report = f"failed: {_tail(event.error or '')}"
        if report and report != run.last_report:
            run.last_report = report
            self._progress(run, {"kind": "report", "message": report})

    async def _show(
        self, transcript: Path, result: RunResult | None, error: TetherError | None, root: Path
    ) -> None:
        client = self.app.client
        support = client.capabilities.window.show_document if client is not None else None
        if support and support.get("support") is True:
            try:
                params = {"uri": transcript.as_uri(), "takeFocus": True}
                answer = await self._bounded_request("window/showDocument", params, root)
                if isinstance(answer, dict) and answer.get("success") is True:
                    return
            except ClientError as exc:
                logger.info("window/showDocument failed: %s", exc.message)
            except TimeoutError:
                logger.info("window/showDocument was not answered: the answer is shown instead")
        if error is not None:
            message, kind = f"tether: {error.message}", _ERROR
        else:
            assert result is not None
            message, kind = result.response or f"tether: {result.stop_reason}", _INFO
        if len(message) > MAX_SHOWN_CHARS:
            message = message[:MAX_SHOWN_CHARS] + f"… (the rest: {transcript})"
        self.app.notify("window/showMessage", {"type": kind, "message": message})

    def _data_home(self) -> Path:
        from tether.config import data_home

        return data_home(self.app.environ)


def _stopped_before(session_id: str) -> RunResult:
    """The result of a turn stopped before its run began (as ``kernel/cancel`` answers a run
    still claiming its session)."""
    return RunResult(
        run_id=uuid7(), session_id=session_id, stop_reason=StopReason.CANCELLED, iterations=0
    )


def _local(uri: str | None) -> Path | None:
    if uri is None or not uri.startswith("file:"):
        return None
    try:
        return local_path(uri).resolve()
    except (OSError, ValueError, TetherError):
        return None


def _read(path: Path) -> str | None:
    """The saved text of the document a turn is about, read as a repository's file: never a
    FIFO or a device (``/dev/zero`` behind a link would never end), at most 8 MiB."""
    try:
        data = read_repo_file(path, max_bytes=MAX_DOCUMENT_BYTES)
    except RepoFileError:
        return None
    return None if data is None else data.decode("utf-8", errors="replace")


def _tail(text: str, limit: int = 80) -> str:
    line = text.rstrip().rsplit("\n", 1)[-1].strip()
    return line if len(line) <= limit else "…" + line[-(limit - 1) :]
