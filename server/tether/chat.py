"""``tether chat``: a conversation on a terminal, turn after turn, through a real ``tether serve``.

The prompt is prompt_toolkit's (history, editing, completion of slash commands, a status line
with the model, the context's fill and the tokens spent); the answers are drawn by
:class:`tether.terminal.TerminalView`, as ``tether run`` draws them, with the answer rendered as
Markdown block by block (never redrawn). While a turn runs the terminal is in raw mode and its
keys are watched: ``Esc`` or Ctrl-C cancels the turn (``kernel/cancel``), and a permission
question, asked below the diff of the edit, takes the next key as its answer. At the prompt, a
Ctrl-C twice in a row (or Ctrl-D, or ``/exit``) ends the chat.

Slash commands are the kernel's (``session/commands``: ``/mode``, ``/compact``, ``/plan``,
``/help``, the user's and the workspace's), sent as prompts, plus the ones the chat answers itself
(:data:`LOCAL_COMMANDS`). Conversations go to the user's SQLite store unless another is
configured, so ``--continue`` and ``--resume`` find them again.

prompt_toolkit is imported here only: ``tether serve`` never loads it.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prompt_toolkit import PromptSession
from prompt_toolkit.completion import CompleteEvent, Completer, Completion
from prompt_toolkit.document import Document
from prompt_toolkit.history import FileHistory
from prompt_toolkit.input import create_input
from prompt_toolkit.keys import Keys

from tether.client import SessionNotFoundError, TetherClient, TetherClientError
from tether.client.tether_client import PermissionOutcome
from tether.config import data_home, load_config
from tether.escapes import printable
from tether.headless import initialization_options, server_env, unknown_session
from tether.protocol.commands import CommandInfo
from tether.protocol.kernel import PermissionParams
from tether.protocol.messages import REASONING_KEY, Message, Role
from tether.protocol.sessions import Session
from tether.protocol.usage import Usage
from tether.terminal import TerminalView

if TYPE_CHECKING:
    from prompt_toolkit.input import Input

LOCAL_COMMANDS: dict[str, str] = {
    "model": "Show the session's model, or set it: /model NAME",
    "sessions": "List this workspace's sessions",
    "resume": "Go on with another session: /resume ID",
    "fork": "Go on in a copy of this session (the original is left as it is)",
    "cost": "The tokens this chat has spent so far",
    "exit": "Leave the chat (Ctrl-D, or Ctrl-C twice, too)",
}
"""The slash commands the chat answers itself; every other ``/name`` goes to the kernel."""

_ANSWERS: dict[str, PermissionOutcome] = {"y": "allow", "a": "allow_always"}
_CANCEL_KEYS = frozenset({Keys.Escape, Keys.ControlC})


@dataclass(frozen=True, kw_only=True)
class ChatOptions:
    workspace: Path
    script: Path | None = None
    max_iterations: int | None = None
    model: str | None = None
    approval: str | None = None
    log_level: str | None = None
    continue_last: bool = False
    resume: str | None = None  # an id; "" to choose among the workspace's sessions


@dataclass
class _Spent:
    """Tokens spent by this chat's turns (``/cost``), and the last context's size."""

    input: int = 0
    output: int = 0
    cached: int = 0
    reasoning: int = 0
    turns: int = 0
    context: int | None = None

    def add(self, usage: Usage | None) -> None:
        self.turns += 1
        if usage is None:
            return
        self.input += usage.input_tokens
        self.output += usage.output_tokens
        self.cached += usage.cached_tokens or 0
        self.reasoning += usage.reasoning_tokens or 0
        self.context = usage.context_tokens or self.context


async def run_chat(options: ChatOptions) -> int:
    """The chat, until the person leaves it; the exit code (1 when it could not start)."""
    layer = initialization_options(options.script, options.approval)
    chat = _Chat(options, layer)
    try:
        async with TetherClient.spawn(
            workspace=options.workspace,
            options=layer,
            env=server_env(options.log_level),
            client_name="tether-chat",
            on_permission=chat.ask,
        ) as client:
            chat.client = client
            if not await chat.open_first_session():
                return 1
            await chat.converse()
    except TetherClientError as exc:
        print(f"tether chat: error {exc.code}: {printable(exc.message)}", file=sys.stderr)
        return 1
    except ConnectionError as exc:
        print(f"tether chat: the server stopped: {printable(str(exc))}", file=sys.stderr)
        return 1
    return 0


class _Chat:
    def __init__(self, options: ChatOptions, layer: dict[str, Any]) -> None:
        self.options = options
        self.client: TetherClient | None = None
        self.session: Session | None = None
        self.commands: list[CommandInfo] = []
        self.spent = _Spent()
        self.view = TerminalView(sys.stdout, sys.stderr, options.workspace, markdown=True)
        self.keys = _Keys(self._cancel_turn)
        self._run_model = options.model
        self._configured_model, self._context_limit = _configured(options.workspace, layer)
        self._cancelling: asyncio.Task[bool] | None = None
        self._in_turn = False
        self._pending_interrupt = False
        self._was_interrupted = False
        self._prompt: PromptSession[str] = PromptSession(
            history=_history(),
            completer=_SlashCompleter(self),
            complete_while_typing=True,
            bottom_toolbar=self.status_line,
        )

    # -- sessions ------------------------------------------------------------------------------

    @property
    def _client(self) -> TetherClient:
        assert self.client is not None
        return self.client

    @property
    def session_id(self) -> str:
        assert self.session is not None
        return self.session.session_id

    async def open_first_session(self) -> bool:
        """The session ``--continue`` or ``--resume`` names, else a new one; False when the one
        asked for does not exist."""
        options = self.options
        session: Session | None
        if options.resume:
            try:
                session = await self._client.get_session(options.resume)
            except SessionNotFoundError:
                error = unknown_session(options.resume)
                print(f"tether chat: {error.message}", file=sys.stderr)
                return False
        elif options.resume is not None:
            session = await self._choose_session()
        elif options.continue_last:
            session = await self._last_session()
        else:
            session = None
        await self._switch(session or await self._client.create_session())
        return True

    async def _last_session(self) -> Session | None:
        listed = await self._client.list_sessions(workspace=self.options.workspace, limit=1)
        if not listed.sessions:
            self.view.note("tether: no earlier session in this workspace; starting a new one")
            return None
        return listed.sessions[0]

    async def _choose_session(self) -> Session | None:
        sessions = await self._list_sessions()
        if not sessions:
            return None
        answer = await self._prompt.prompt_async("Resume which (a number; Enter: a new one)? ")
        choice = answer.strip()
        if choice.isdigit() and 1 <= int(choice) <= len(sessions):
            return sessions[int(choice) - 1]
        return None

    async def _list_sessions(self) -> list[Session]:
        listed = await self._client.list_sessions(workspace=self.options.workspace, limit=20)
        if not listed.sessions:
            self.view.note("tether: no session in this workspace yet")
        for number, session in enumerate(listed.sessions, 1):
            when = session.updated_at.astimezone().strftime("%Y-%m-%d %H:%M")
            title = printable(session.title or "(untitled)")
            mark = "*" if self.session and session.session_id == self.session_id else " "
            self.view.note(f"{mark}{number:>2}. {when}  {session.session_id}  {title}")
        return listed.sessions

    async def _switch(self, session: Session) -> None:
        """Talk in ``session`` from now on: its commands, and the end of its conversation."""
        self.session = session
        self.commands = (await self._client.commands(session.session_id)).commands
        history = await self._client.messages(session.session_id, limit=2, order="desc")
        title = f" ({printable(session.title)})" if session.title else ""
        count = f", {history.total} messages" if history.total else ""
        self.view.note(f"tether chat: session {session.session_id}{title}{count}", "bold")
        for message in reversed(history.messages):
            self._recall(message)
        self.view.note("Esc or Ctrl-C cancels a turn; /help lists the commands", "dim")

    def _recall(self, message: Message) -> None:
        """A message of the conversation's end, dimmed and cut to a few lines; an answer after
        the reasoning that led to it (dimmed in italics, as it streamed)."""
        if message.role not in (Role.USER, Role.ASSISTANT):
            return
        reasoning = (message.metadata or {}).get(REASONING_KEY)
        if message.role is Role.ASSISTANT and isinstance(reasoning, str) and reasoning.strip():
            self._note_lines("tether thought: ", reasoning.strip(), 3, "dim italic")
        text = _text_of(message).strip()
        if text:
            who = "you" if message.role is Role.USER else "tether"
            self._note_lines(f"{who}: ", text, 6, "dim")

    def _note_lines(self, label: str, text: str, most: int, style: str) -> None:
        """``text``'s first ``most`` lines, each a note of its own (a note escapes line breaks),
        the first after ``label``; a line ``…`` says that more was left out."""
        lines = text.splitlines()
        shown = lines[:most] + (["…"] if len(lines) > most else [])
        for index, line in enumerate(shown):
            self.view.note(f"{label if index == 0 else ''}{line}", style)

    # -- the conversation ----------------------------------------------------------------------

    async def converse(self) -> None:
        interrupted = False
        with _on_sigint(self._interrupted):
            while True:
                if not await self._exchange(interrupted):
                    return
                interrupted = self._was_interrupted

    async def _exchange(self, interrupted: bool) -> bool:
        """One prompt and what it asks for; False to leave."""
        self._was_interrupted = False
        try:
            if self._pending_interrupt:  # a Ctrl-C between two prompts
                self._pending_interrupt = False
                raise KeyboardInterrupt
            text = await self._prompt.prompt_async("> ")
        except KeyboardInterrupt:
            if interrupted:
                return False
            self._was_interrupted = True
            self.view.note("(Ctrl-C again to leave, or /exit)", "dim")
            return True
        except EOFError:
            return False
        return await self._handle(text.strip())

    def _interrupted(self) -> None:
        """A Ctrl-C that came as SIGINT (the terminal was not in raw mode: between two prompts,
        say) counts as the key would: at the prompt, or cancelling the turn, or for the next
        prompt."""
        app = self._prompt.app
        if app.is_running and app.future is not None and not app.future.done():
            app.exit(exception=KeyboardInterrupt())
        elif self._in_turn:
            self._cancel_turn()
        else:
            self._pending_interrupt = True

    async def _handle(self, text: str) -> bool:
        """One line typed at the prompt; False to leave."""
        if not text:
            return True
        name, _, argument = text[1:].partition(" ") if text.startswith("/") else ("", "", "")
        if name in ("exit", "quit"):
            return False
        local = self._local_commands().get(name)
        try:
            if local is not None:
                await local(argument.strip())
            else:
                await self.turn(text)
                if name == "help":
                    self._local_help()
        except TetherClientError as exc:
            self.view.note(f"tether: error {exc.code}: {exc.message}", "red")
        return True

    def _local_commands(self) -> dict[str, Callable[[str], Awaitable[None]]]:
        return {
            "model": self._model,
            "sessions": self._sessions,
            "resume": self._resume,
            "fork": self._fork,
            "cost": self._cost,
        }

    async def turn(self, prompt: str) -> None:
        """One turn: its events drawn as they come, Esc or Ctrl-C cancelling it."""
        run = self._client.run(
            self.session_id,
            prompt,
            max_iterations=self.options.max_iterations,
            model=self._run_model,
        )
        self._cancelling = None
        self._in_turn = True
        try:
            with self.keys.watching():
                async for progress in run:
                    self.view.event(progress)
        except TetherClientError as exc:
            self.view.note(f"tether: error {exc.code}: {printable(exc.message)}", "red")
            return
        finally:
            self._in_turn = False
        result = await run
        self.view.result(result)
        self.spent.add(result.usage)

    def _cancel_turn(self) -> None:
        if self._cancelling is None and self.session is not None:
            self.view.note("cancelling…", "yellow")
            self._cancelling = asyncio.ensure_future(self._client.cancel(self.session_id))

    async def ask(self, params: PermissionParams) -> PermissionOutcome:
        """The permission question below the edit's diff; the next key answers it (Esc or
        Ctrl-C rejects, and cancels the turn)."""
        self.view.question(params)
        key = await self.keys.next_key()
        outcome = _ANSWERS.get(key.lower(), "reject")
        print(key if key.isprintable() else "", file=sys.stderr, flush=True)
        return outcome

    # -- the chat's own commands ---------------------------------------------------------------

    async def _model(self, name: str) -> None:
        if name:
            self.session = await self._client.configure(self.session_id, model=name)
            self._run_model = None
        self.view.note(f"model: {self.model or '(none configured)'}")

    async def _sessions(self, _: str) -> None:
        await self._list_sessions()

    async def _resume(self, session_id: str) -> None:
        if not session_id:
            session = await self._choose_session()
            if session is not None:
                await self._switch(session)
            return
        try:
            await self._switch(await self._client.get_session(session_id))
        except SessionNotFoundError:
            self.view.note(f"tether: there is no session {printable(session_id)}", "red")

    async def _fork(self, _: str) -> None:
        parent = self.session_id
        await self._switch(await self._client.fork(parent))
        self.view.note(f"(a fork of {parent}, which stays as it was)", "dim")

    async def _cost(self, _: str) -> None:
        spent = self.spent
        cached = f" ({spent.cached:,} cached)" if spent.cached else ""
        reasoning = f" ({spent.reasoning:,} reasoning)" if spent.reasoning else ""
        self.view.note(
            f"tokens so far: {spent.input:,} in{cached}, {spent.output:,} out{reasoning}, "
            f"in {spent.turns} turn{'s' if spent.turns != 1 else ''}"
        )

    def _local_help(self) -> None:
        self.view.note("In tether chat also:")
        for name, description in LOCAL_COMMANDS.items():
            self.view.note(f"  /{name}  {description}")

    # -- the status line -----------------------------------------------------------------------

    @property
    def model(self) -> str | None:
        session_model = self.session.model if self.session else None
        return self._run_model or session_model or self._configured_model

    def status_line(self) -> str:
        parts = [self.model or "(no model configured)"]
        context = self.spent.context
        if context is not None and self._context_limit:
            percent = round(100 * context / self._context_limit)
            parts.append(f"context {_tokens(context)}/{_tokens(self._context_limit)} ({percent}%)")
        elif context is not None:
            parts.append(f"context {_tokens(context)}")
        parts.append(f"{_tokens(self.spent.input + self.spent.output)} tokens")
        return " · ".join(parts)

    def completions(self) -> Iterator[tuple[str, str]]:
        """Every slash command's name and description, the kernel's first."""
        seen: set[str] = set()
        for command in self.commands:
            seen.add(command.name)
            yield command.name, command.description
        for name, description in LOCAL_COMMANDS.items():
            if name not in seen:
                yield name, description


class _SlashCompleter(Completer):
    """Completes ``/name`` at the start of the prompt, with each command's description."""

    def __init__(self, chat: _Chat) -> None:
        self._chat = chat

    def get_completions(
        self, document: Document, complete_event: CompleteEvent
    ) -> Iterable[Completion]:
        typed = document.text_before_cursor
        if not typed.startswith("/") or " " in typed:
            return
        for name, description in self._chat.completions():
            if name.startswith(typed[1:]):
                yield Completion(
                    f"/{name}", start_position=-len(typed), display_meta=printable(description)
                )


class _Keys:
    """The keys pressed while a turn runs, the terminal in raw mode: ``Esc`` or Ctrl-C calls
    ``on_cancel``; a permission question (:meth:`next_key`) takes the next key. Keys typed
    meanwhile are not kept for the next prompt."""

    def __init__(self, on_cancel: Callable[[], None]) -> None:
        self._on_cancel = on_cancel
        self._input: Input | None = None
        self._waiting: asyncio.Future[str] | None = None

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        if self._input is None:
            self._input = create_input()
        terminal = self._input
        with terminal.raw_mode(), terminal.attach(self._ready):
            yield

    def _ready(self) -> None:
        terminal = self._input
        assert terminal is not None
        for press in [*terminal.read_keys(), *terminal.flush_keys()]:
            self._pressed(press.key)

    def _pressed(self, key: Keys | str) -> None:
        waiting = self._waiting if self._waiting and not self._waiting.done() else None
        if key in _CANCEL_KEYS:
            if waiting is not None:
                waiting.set_result("")
            self._on_cancel()
        elif waiting is not None and key in (Keys.ControlM, Keys.ControlJ):
            waiting.set_result("")
        elif waiting is not None and len(key) == 1:
            waiting.set_result(str(key))

    async def next_key(self) -> str:
        """The next key typed ("" for Enter, Esc or Ctrl-C)."""
        self._waiting = asyncio.get_running_loop().create_future()
        try:
            return await self._waiting
        finally:
            self._waiting = None


@contextlib.contextmanager
def _on_sigint(handler: Callable[[], None]) -> Iterator[None]:
    """``handler`` for SIGINT on the running loop, instead of the KeyboardInterrupt that would
    end the chat wherever it is (where the loop cannot take signals: as before)."""
    loop = asyncio.get_running_loop()
    try:
        loop.add_signal_handler(signal.SIGINT, handler)
    except (NotImplementedError, RuntimeError, ValueError):  # not the main thread; Windows
        yield
        return
    try:
        yield
    finally:
        loop.remove_signal_handler(signal.SIGINT)


def _configured(workspace: Path, layer: dict[str, Any]) -> tuple[str | None, int | None]:
    """The configured model and context limit, for the status line (None when unknown)."""
    try:
        config = load_config(workspace=workspace, init_options=layer, on_workspace_error=_ignore)
    except Exception:  # the server reports a configuration's problems itself
        return None, None
    return config.provider.model, config.context.max_tokens


def _ignore(_: object) -> None:
    return None


def _history() -> FileHistory | None:
    """The prompts typed before, kept in tether's data directory (none when it cannot be)."""
    try:
        home = data_home()
        home.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return FileHistory(str(home / "chat-history"))


def _text_of(message: Message) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "".join(
        text for block in content if isinstance(text := getattr(block, "text", None), str)
    )


def _tokens(count: int) -> str:
    return f"{count / 1000:.1f}k" if count >= 1000 else str(count)
