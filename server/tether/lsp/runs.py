"""Turns started from any LSP client: ``tether.ask`` (what the code actions send), ``tether.cancel``
and ``tether.newSession``, in the current session of the workspace folder that holds the
document they are about (else of the default workspace).

``tether.ask`` answers ``{sessionId, runId}`` as soon as the turn's run has started: an editor
waits on no model (eglot gives up on a command after 10 s, or freezes while it waits). The turn
then reports through ``$/progress`` on a token made with ``window/workDoneProgress/create``; its
permission questions are ``window/showMessageRequest`` (Allow / Always allow / Reject); its edits
go through ``workspace/applyEdit``; its answer is appended to a Markdown transcript shown with
``window/showDocument`` (or, for a client without it, with ``window/showMessage``).
``window/workDoneProgress/cancel`` on its token, or ``tether.cancel``, stops it as
``kernel/cancel`` does, whatever it waits for. One turn at a time per session, and its stop, are
the kernel's: this module keeps no flag of its own.

No wait on the client holds a turn for good: the requests no person answers
(``workspace/applyEdit``, ``window/workDoneProgress/create``, ``window/showDocument``) are
withdrawn after the ``lsp.apply_edit_timeout`` of the session's workspace folder; a permission
question waits for the person, until the turn is stopped.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.kernel.approval import ApprovalError
from tether.lsp.actions import AskArguments, prompt_of, title_of
from tether.lsp.documents import Buffers, BufferTools
from tether.lsp.transcripts import Turn, append_turn, transcript_path
from tether.protocol import CreateSessionParams, ListSessionsParams, TetherError
from tether.protocol.errors import RequestCancelled
from tether.protocol.kernel import (
    Notice,
    PermissionParams,
    PermissionResult,
    ProgressParams,
    RunParams,
    RunResult,
    RunStarted,
    StopReason,
)
from tether.repofiles import RepoFileError, read_repo_file
from tether.rpc.errors import ClientError
from tether.rpc.progress import WorkDoneProgress
from tether.sessions.ids import utcnow
from tether.sessions.workspaces import local_path
from tether.tools.editor_requests import Bound, bounded_request

if TYPE_CHECKING:
    from tether.config import TetherConfig
    from tether.protocol.commands import CommandInfo
    from tether.rpc.app import App
    from tether.tools.base import ToolExecutor

logger = logging.getLogger(__name__)

ALLOW, ALWAYS, REJECT = "Allow", "Always allow", "Reject"
_OUTCOMES = {ALLOW: "allow", ALWAYS: "allow_always", REJECT: "reject"}
_INFO, _WARNING, _ERROR = 3, 2, 1  # MessageType
_MESSAGE_TYPES = {"info": _INFO, "warning": _WARNING, "error": _ERROR}  # of a notice's level
MAX_BACKLOG = 100  # reports kept while the turn's token is being made (the latest)
MAX_SHOWN_CHARS = 4000  # of an answer shown with window/showMessage
MAX_DOCUMENT_BYTES = 8 * 1024 * 1024  # of a document read from the disk for a turn's prompt


@dataclass
class _Turn:
    """A turn started here: what its transcript and its progress show."""

    session_id: str
    root: Path
    record: Turn
    progress: WorkDoneProgress
    token: str | None = None  # its work-done token, once the client made it
    directory: Path | None = None  # the folder of the document asked about (its AGENTS.md)
    # its reports while the token is being made (None: not being made)
    backlog: deque[dict[str, Any]] | None = None
    # the run's id once it has started (the kernel holds the session for it)
    began: asyncio.Future[str] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    # done once the turn is in its transcript (or, not started, records nothing)
    recorded: asyncio.Future[None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class Runs:
    """The turns of one LSP connection."""

    def __init__(self, app: App, buffers: Buffers) -> None:
        self.app = app
        self.buffers = buffers
        self.current: dict[str | None, str] = {}  # workspace folder (None: default) -> session
        self.active: list[_Turn] = []  # the turns started here that have not ended
        self._spawned: dict[str, str] = {}  # a sub-agent's session -> the turn's session
        self._tasks: set[asyncio.Task[None]] = set()  # each turn's run, to its transcript
        self._tokens = itertools.count(1)

    # -- the commands ------------------------------------------------------------------------

    async def ask(self, arguments: AskArguments) -> dict[str, Any]:
        """Start a turn; answered as soon as its run has started (the session's lease taken:
        a busy session is the kernel's ``SessionBusy``), so that no editor waits on the model.
        The turn then reports through ``$/progress``, and its answer is shown with
        ``window/showDocument`` (else ``window/showMessage``)."""
        session_id, root = await self._session(self._folder_of(arguments.uri))
        title = title_of(arguments)
        prompt = await self._prompt(arguments, root)
        self.app.load_kernel()  # a command may come before any kernel/* request
        progress = WorkDoneProgress(f"tether: {title}")
        turn = _Turn(session_id, root, Turn(title, prompt, utcnow()), progress)
        turn.directory = _folder_inside(_local(arguments.uri), root)
        turn.began.add_done_callback(_retrieved)
        self.active.append(turn)
        task = asyncio.ensure_future(self._turn(turn))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        try:
            run_id = await asyncio.shield(turn.began)
        except asyncio.CancelledError:  # $/cancelRequest before the run started
            task.cancel()  # the kernel gives back a lease it took meanwhile
            raise RequestCancelled("tether.ask cancelled before its turn started") from None
        return {"sessionId": session_id, "runId": run_id}

    async def _prompt(self, arguments: AskArguments, root: Path) -> str:
        """The turn's prompt, with the selection as the editor has it (else as saved)."""
        path = _local(arguments.uri)
        text = None
        if path is not None:
            text = self.buffers.text(path)
            if text is None:
                text = await asyncio.to_thread(_read, path)
        return prompt_of(arguments, text, path, root)

    async def _turn(self, turn: _Turn) -> None:
        """The kernel's run of the turn, then its answer shown. A turn that did not start (a
        busy session, a stop before the lease was taken) is the answer of ``tether.ask``, and
        records nothing."""
        kernel = self.app.kernel
        assert kernel is not None, "ask loads it"
        result: RunResult | None = None
        error: TetherError | None = None
        try:
            directory = None if turn.directory is None else str(turn.directory)
            params = RunParams(
                session_id=turn.session_id, prompt=turn.record.prompt, directory=directory
            )
            result = await kernel.run(params, lambda event: self._event(turn, event))
        except TetherError as exc:
            error = exc
        finally:
            self.active.remove(turn)
            for child in [c for c, root in self._spawned.items() if root == turn.session_id]:
                del self._spawned[child]
            if turn.token is not None:
                self.app.run_tokens.pop(turn.token, None)
        if not turn.began.done():
            if result is not None:
                turn.began.set_result(result.run_id)
            else:
                assert error is not None
                turn.began.set_exception(error)
            turn.recorded.set_result(None)
            return
        if turn.token is not None and turn.progress.final is None:
            self.app.notify("$/progress", {"token": turn.token, "value": turn.progress.end()})
        try:
            shown = await self._record(turn, result, error)
        finally:
            turn.recorded.set_result(None)
        await self._show(shown, turn, result, error)

    async def _record(
        self, turn: _Turn, result: RunResult | None, error: TetherError | None
    ) -> Path:
        """Append the turn to the session's transcript: the copy of it to show."""
        transcript = transcript_path(self._data_home(), turn.session_id)
        markdown = turn.record.markdown(result, None if error is None else error.message)
        run_id = turn.began.result()
        return await asyncio.to_thread(append_turn, transcript, turn.session_id, markdown, run_id)

    async def cancel(self) -> dict[str, Any]:
        """Stop the turns started here (the kernel's ``kernel/cancel``); answered once they
        have left their sessions and are in their transcripts (the kernel's
        :data:`~tether.kernel.kernel.STOP_WAIT` at most), so that the sessions take the next
        ``tether.ask`` at once."""
        from tether.kernel.kernel import STOP_WAIT

        kernel = self.app.kernel
        turns = list(self.active)
        if kernel is None or not turns:
            return {"cancelled": False}
        sessions = {turn.session_id for turn in turns}
        stopped = await asyncio.gather(*(kernel.stop(session) for session in sessions))
        await asyncio.wait([turn.recorded for turn in turns], timeout=STOP_WAIT)
        return {"cancelled": any(stopped)}

    async def aclose(self) -> None:
        """The server is closing (the client has gone): stop the turns and put them in their
        transcripts, then end what they still wait for (their token, their showDocument: no
        client will answer)."""
        from tether.kernel.kernel import STOP_WAIT

        await self.cancel()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=STOP_WAIT)

    def cancel_token(self, token: str | int) -> bool:
        """``window/workDoneProgress/cancel``: stop the run reporting on ``token``."""
        session_id = self.app.run_tokens.get(token)
        logger.debug("window/workDoneProgress/cancel %r: the run of session %s", token, session_id)
        if session_id is None or self.app.kernel is None:
            return False
        return self.app.kernel.cancel(session_id)

    async def undo(self, uri: str | None = None) -> dict[str, Any]:
        """``tether.undo``: the files of the last turn that changed any, in the current session
        of the workspace folder of the document ``uri``, put back (the kernel's undo)."""
        session_id, _ = await self._session(self._folder_of(uri))
        undone = await self.app.checkpoints().undo(session_id)
        count = len(undone.restored) + len(undone.removed)
        message = f"tether: the last turn's changes to {count} file(s) are undone"
        self.app.notify("window/showMessage", {"type": _INFO, "message": message})
        return undone.model_dump(mode="json", by_alias=True)

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
        if not self._here(params.session_id):
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
            self._here(session_id)
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

    async def commands(self, uri: str) -> list[CommandInfo]:
        """The custom commands (the user's, and those of the workspace folder of the document
        ``uri``) that code actions offer to run on a selection, by name."""
        from tether.kernel.commands import WORKSPACE_COMMANDS, load_commands, user_commands_dir

        root = _local(self._folder_of(uri) or self.app.sessions.default_workspace)
        user = user_commands_dir(self.app.environ)
        folders = [user, None if root is None else root / WORKSPACE_COMMANDS]
        if not any(folder is not None and folder.is_dir() for folder in folders):
            return []  # asked at every move of the cursor by some editors: no thread then
        loaded = await asyncio.to_thread(load_commands, user, root)
        return [loaded.commands[name].info() for name in sorted(loaded.commands)]

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

    def _here(self, session_id: str) -> bool:
        """Whether a turn started here runs in the session (or is starting in it), or in the
        session of the run that started this sub-agent."""
        root = self._spawned.get(session_id, session_id)
        return any(turn.session_id == root for turn in self.active)

    def _event(self, turn: _Turn, params: ProgressParams) -> None:
        """An event of the turn's run: kept for its transcript, and reported on its token; a
        notice (an MCP server that did not start) is told with ``window/showMessage``. A
        sub-agent's events are its own session's: the turn shows its ``task`` call alone."""
        if params.parent_run_id is not None:
            self._spawned[params.session_id] = turn.session_id
            return
        event = params.event
        turn.record.add(event)
        value = turn.progress.value(event)
        match event:
            case RunStarted() if not turn.began.done():
                turn.began.set_result(params.run_id)
                self._start_reporting(turn)
                return  # its begin is sent once the token is made
            case Notice(level=level, message=message):
                notice = {"type": _MESSAGE_TYPES[level], "message": f"tether: {message}"}
                self.app.notify("window/showMessage", notice)
            case _:
                pass  # the transcript and the progress values above take every kind
        if value is not None and turn.token is not None:
            self.app.notify("$/progress", {"token": turn.token, "value": value})
        elif value is not None and turn.backlog is not None:
            turn.backlog.append(value)

    def _start_reporting(self, turn: _Turn) -> None:
        """Ask the client for the turn's work-done token (the command's own ends with its
        answer); reports begin once it is made."""
        client = self.app.client
        if client is None or not client.capabilities.window.work_done_progress:
            return
        turn.backlog = deque(maxlen=MAX_BACKLOG)
        task = asyncio.ensure_future(self._report_on_new_token(turn))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _report_on_new_token(self, turn: _Turn) -> None:
        token = f"tether-turn-{next(self._tokens)}"
        params = {"token": token}
        try:
            await self._bounded_request("window/workDoneProgress/create", params, turn.root)
        except ClientError as exc:
            logger.info("no progress for the turn: %s", exc.message)
            return
        except TimeoutError:
            logger.info("no progress for the turn: window/workDoneProgress/create unanswered")
            return
        finally:
            backlog, turn.backlog = turn.backlog or (), None
        # What the turn reported meanwhile, its end too when it ended meanwhile.
        for value in (turn.progress.begin("thinking"), *backlog):
            self.app.notify("$/progress", {"token": token, "value": value})
        if turn in self.active:
            turn.token = token
            self.app.run_tokens[token] = turn.session_id
        elif not any(value["kind"] == "end" for value in backlog):
            self.app.notify("$/progress", {"token": token, "value": turn.progress.end()})

    async def _show(
        self, shown: Path, turn: _Turn, result: RunResult | None, error: TetherError | None
    ) -> None:
        """The transcript with ``window/showDocument``; else the answer in
        ``window/showMessage``, saying so when the turn was stopped."""
        client = self.app.client
        support = client.capabilities.window.show_document if client is not None else None
        if support and support.get("support") is True:
            try:
                params = {"uri": shown.as_uri(), "takeFocus": True}
                answer = await self._bounded_request("window/showDocument", params, turn.root)
                if isinstance(answer, dict) and answer.get("success") is True:
                    return
            except ClientError as exc:
                logger.info("window/showDocument failed: %s", exc.message)
            except TimeoutError:
                logger.info("window/showDocument was not answered: the answer is shown instead")
        message, kind = _shown_message(turn.record.text, result, error)
        if len(message) > MAX_SHOWN_CHARS:
            message = message[:MAX_SHOWN_CHARS] + f"… (the rest: {shown})"
        self.app.notify("window/showMessage", {"type": kind, "message": message})

    def _data_home(self) -> Path:
        from tether.config import data_home

        return data_home(self.app.environ)


def _shown_message(
    text: str, result: RunResult | None, error: TetherError | None
) -> tuple[str, int]:
    """The answer of a turn as ``window/showMessage`` shows it, and its message type."""
    if error is not None:
        return f"tether: {error.message}", _ERROR
    assert result is not None
    answer = text or result.response  # the text of every model call of the turn
    if result.stop_reason == StopReason.CANCELLED:
        stopped = "tether: the turn was cancelled"
        return (f"{answer}\n\n({stopped})" if answer else stopped), _WARNING
    return answer or f"tether: {result.stop_reason}", _INFO


def _retrieved(future: asyncio.Future[str]) -> None:
    """Take the exception of a turn that did not start, when nobody waits for it any more
    (its ``tether.ask`` was cancelled): no "never retrieved" warning."""
    if not future.cancelled():
        future.exception()


def _folder_inside(document: Path | None, root: Path) -> Path | None:
    """The folder of ``document`` when it is a folder inside ``root`` (the turn works there)."""
    if document is None or not document.parent.is_relative_to(root):
        return None
    if not document.parent.is_dir():  # a document of a folder deleted since: the root's
        return None
    return document.parent


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
