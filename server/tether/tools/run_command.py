"""``run_command``: run a program (an argv list, or a string for ``/bin/sh -c``) in the workspace.

The command runs in its own session and process group, with stdin from ``/dev/null`` and
stdout and stderr captured together (interleaved, as a terminal shows them) up to an output cap
that keeps the head and the tail. On Linux it is started through the command wrapper
(:mod:`tether.tools.wrapper`), which keeps its whole process tree together (a pid namespace, or
a subreaper): when the command exits, the wrapper kills what it left running after a short grace
and reports how many processes that was (a pipe passed to it); on timeout or cancel, tether asks
the wrapper to end (``SIGTERM``), which ends the tree; and the wrapper dies with tether. Only if
the wrapper has not ended in time, or elsewhere than on Linux, does tether kill what it can find
itself (:func:`tether.tools.processes.kill_tree`: the group, the descendants, and the processes
whose environment carries the command's mark); the result says so when processes still hold the
output open after that: they could not be found.

The command runs in the OS sandbox of ``ToolContext.sandbox`` (``tools.sandbox``, see
:mod:`tether.tools.confinement`): by default it may write only in the workspace (never in its
``.git`` or ``.tether``, nor in tether's installation) and in a private ``TMPDIR``, read the
system but not the rest of ``$HOME``, reach no process outside it, and open no network
connection. The policy is reported as the call's progress and in its result; a
failed command whose output reports a refused access gets a note saying what the sandbox allows
and how to allow more. Where Landlock is missing, or with ``tools.sandbox = "off"``, the command
can do whatever the user running tether can, which is why the tool's kind is ``execute`` (it
needs the user's approval) either way. Environment variables whose names look secret, that
the context hides (``ToolContext.hidden_env``: the provider's API key variable), or whose values
contain a configured secret (``ToolContext.secrets``: an API key, the store URL's password, see
:mod:`tether.secrets`) are not passed on; that alone would not keep them secret, since an
unconfined command can read tether's own environment in ``/proc``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import tempfile
import time
from collections.abc import AsyncIterator, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

from pydantic import Field

from tether.protocol.tools import ToolKind
from tether.secrets import Secrets, looks_secret
from tether.tools.base import ToolContext, ToolError, ToolResult
from tether.tools.confinement import (
    WRAPPED,
    SandboxPolicy,
    denial_note,
    hard_links_refusal,
    isolation,
    wrap,
)
from tether.tools.processes import MARK_VARIABLE, kill_tree, new_mark
from tether.tools.sandbox import Sandbox, format_size
from tether.tools.typed import ToolArguments, TypedTool

DEFAULT_TIMEOUT_SECONDS = 60.0
MAX_TIMEOUT_SECONDS = 600.0
DEFAULT_MAX_OUTPUT_BYTES = 64 * 1024
EXIT_GRACE_SECONDS = 1.0  # for the output to end once the command has exited
KILL_WAIT_SECONDS = 5.0
SHELL = "/bin/sh"
NO_SECRETS = Secrets()


class RunCommandArguments(ToolArguments):
    command: list[str] | str = Field(
        description="program and arguments as a list (run directly, no shell), or a string run "
        "with /bin/sh -c (pipes, redirections, &&)"
    )
    cwd: str = Field(default=".", description="directory to run in, relative to the workspace root")
    timeout: float = Field(
        default=DEFAULT_TIMEOUT_SECONDS,
        gt=0,
        le=MAX_TIMEOUT_SECONDS,
        description="seconds before the command and its processes are killed (default 60)",
    )


class RunCommand(TypedTool[RunCommandArguments]):
    def __init__(self, *, max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES) -> None:
        super().__init__(
            name="run_command",
            description=(
                "Run a command in the workspace (argv list, or a string for /bin/sh -c) with a "
                "timeout; returns its exit code and its output (stdout and stderr together)."
            ),
            kind=ToolKind.EXECUTE,
            arguments_model=RunCommandArguments,
        )
        self.max_output_bytes = max_output_bytes

    async def call(self, args: RunCommandArguments, context: ToolContext) -> ToolResult:
        argv = command_argv(args.command)
        cwd = await asyncio.to_thread(Sandbox(context.workspace).directory, args.cwd)
        output = CappedOutput(self.max_output_bytes)
        mark = new_mark()
        environment = child_environment(os.environ, context.hidden_env, context.secrets)
        environment[MARK_VARIABLE] = mark
        policy = context.sandbox
        if policy.confines:
            await asyncio.to_thread(isolation)  # the probes, once per process
        context.progress(policy.describe())
        started = time.monotonic()
        async with _launch(policy, argv, context.workspace, cwd, environment) as launch:
            transport, capture = await _spawn(launch, argv[0], cwd, output, environment, mark)
            try:
                outcome = await _supervise(transport.get_pid(), mark, capture, args.timeout, launch)
                code = transport.get_returncode()
            finally:
                transport.close()
            leftovers = launch.leftovers()
        elapsed = time.monotonic() - started
        return _result(outcome, code, output, args.timeout, elapsed, policy, leftovers)


@dataclass
class _Launch:
    """How a command is started: its argv, and when it goes through the wrapper (on Linux),
    the pipe the wrapper reports on."""

    argv: list[str]
    status: tuple[int, int] | None = None  # (read, write) ends

    @property
    def wrapped(self) -> bool:
        return self.status is not None

    @property
    def pass_fds(self) -> tuple[int, ...]:
        return (self.status[1],) if self.status is not None else ()

    def leftovers(self) -> int | None:
        """How many processes the command left running the wrapper killed once it had
        exited, as the wrapper reported (None: no report, the wrapper was killed)."""
        if self.status is None:
            return None
        os.set_blocking(self.status[0], False)
        try:
            words = os.read(self.status[0], 64).split()
        except BlockingIOError:
            return None
        if len(words) == 2 and words[0] == b"leftovers" and words[1].isdigit():
            return int(words[1])
        return None

    def close(self) -> None:
        if self.status is not None:
            for fd in self.status:
                os.close(fd)


@contextlib.asynccontextmanager
async def _launch(
    policy: SandboxPolicy,
    argv: list[str],
    workspace: Path,
    cwd: Path,
    environment: dict[str, str],
) -> AsyncIterator[_Launch]:
    """How to start the command under ``policy``: on Linux through the wrapper, which confines it
    when the policy does and watches its process tree in any case. A confined command gets a
    temporary directory of its own (``TMPDIR``, ``TMP``, ``TEMP``), removed when it ends. The
    program is looked up first, so that a missing one is reported as such, and a command the
    sandbox could not keep from a hard-linked file it protects is refused."""
    if not WRAPPED:
        yield _Launch(argv)
        return
    tmpdir = await asyncio.to_thread(_prepare, policy, argv[0], workspace, cwd, environment)
    launch = _Launch(argv, status=os.pipe())
    try:
        launch.argv = await asyncio.to_thread(
            wrap,
            policy,
            argv,
            workspace=workspace,
            tmpdir=tmpdir,
            environ=environment,
            status=launch.pass_fds[0],
        )
        yield launch
    finally:
        launch.close()
        if tmpdir is not None:
            await asyncio.to_thread(shutil.rmtree, tmpdir, ignore_errors=True)


def _prepare(
    policy: SandboxPolicy, program: str, workspace: Path, cwd: Path, environment: dict[str, str]
) -> Path | None:
    if "/" in program:
        found = (cwd / program).exists()
    else:
        found = shutil.which(program, path=environment.get("PATH", os.defpath)) is not None
    if not found:
        raise ToolError(f"command not found: {program}")
    refusal = hard_links_refusal(policy, workspace)
    if refusal is not None:
        raise ToolError(refusal)
    if not policy.confines:
        return None
    tmpdir = Path(tempfile.mkdtemp(prefix="tether-command-"))
    for name in ("TMPDIR", "TMP", "TEMP"):
        environment[name] = str(tmpdir)
    return tmpdir


async def _spawn(
    launch: _Launch,
    program: str,
    cwd: Path,
    output: CappedOutput,
    environment: dict[str, str],
    mark: str,
) -> tuple[asyncio.SubprocessTransport, _Capture]:
    """Start the command (``program`` names it in errors). The start is shielded: the process
    may run before its pipes are connected, so a cancellation that arrives meanwhile waits for
    the start, then stops the whole tree (asyncio alone would kill only the first process)."""
    loop = asyncio.get_running_loop()
    starting = asyncio.ensure_future(
        loop.subprocess_exec(
            lambda: _Capture(output, loop),
            *launch.argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            cwd=cwd,
            env=environment,
            start_new_session=True,
            pass_fds=launch.pass_fds,
        )
    )
    try:
        return await asyncio.shield(starting)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            transport, capture = await starting
            with contextlib.suppress(BaseException):
                await _stop(transport.get_pid(), mark, capture, launch)
            transport.close()
        raise
    except FileNotFoundError:
        raise ToolError(f"command not found: {program}") from None
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ToolError(f"cannot run {program}: {reason}") from None


class _Capture(asyncio.SubprocessProtocol):
    """Collects the output; tells when the process exited and when its output ended (which is
    later when processes it started still hold the output open)."""

    def __init__(self, output: CappedOutput, loop: asyncio.AbstractEventLoop) -> None:
        self.output = output
        self.exited: asyncio.Future[None] = loop.create_future()
        self.closed: asyncio.Future[None] = loop.create_future()

    def pipe_data_received(self, fd: int, data: bytes | str) -> None:
        self.output.add(data.encode() if isinstance(data, str) else data)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)


def command_argv(command: list[str] | str) -> list[str]:
    if isinstance(command, str):
        if not command.strip():
            raise ToolError("command is empty")
        return [SHELL, "-c", command]
    if not command or not command[0]:
        raise ToolError("command is empty: give the program first, then its arguments")
    return command


def child_environment(
    environ: Mapping[str, str],
    hidden: Collection[str] = frozenset(),
    secrets: Secrets = NO_SECRETS,
) -> dict[str, str]:
    """``environ`` without the variables whose names look secret (API keys, tokens, passwords),
    those named in ``hidden``, and those whose values contain one of ``secrets``."""
    return {
        name: value
        for name, value in environ.items()
        if name not in hidden and not looks_secret(name) and not secrets.hides(value)
    }


@dataclass(frozen=True)
class _Outcome:
    """How the command ended: ``how`` is ``"exited"``, ``"exited-leftovers"`` (without the
    wrapper: processes it left holding the output open were killed) or ``"timeout"``;
    ``held_open``, whether processes still hold the output open even so (they could not be
    found to be killed)."""

    how: str
    held_open: bool = False


async def _supervise(
    pid: int, mark: str, capture: _Capture, limit: float, launch: _Launch
) -> _Outcome:
    """Wait for the command, and for its output to end. Cancellation stops the tree and
    propagates."""
    how = "exited"
    try:
        if not await _within(capture.exited, limit):
            how = "timeout"
            await _stop(pid, mark, capture, launch)
        if not await _within(capture.closed, EXIT_GRACE_SECONDS):
            how = "exited-leftovers" if how == "exited" else how
            kill_tree(pid, mark, leader_exited=capture.exited.done())
            await _within(capture.closed, KILL_WAIT_SECONDS)
        await _within(capture.exited, KILL_WAIT_SECONDS)
    except BaseException:  # cancelled (or failing): leave nothing running
        with contextlib.suppress(BaseException):
            await _stop(pid, mark, capture, launch)
        raise
    return _Outcome(how, held_open=not capture.closed.done())


async def _stop(pid: int, mark: str, capture: _Capture, launch: _Launch) -> None:
    """End the command's whole tree: ask the wrapper (``SIGTERM``: it kills the tree, or dies
    and takes its pid namespace with it), and kill what can be found if it has not ended in
    time; without the wrapper, kill what can be found at once."""
    if launch.wrapped and not capture.exited.done():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        if await _within(capture.exited, KILL_WAIT_SECONDS):
            return
    kill_tree(pid, mark, leader_exited=capture.exited.done())
    await _within(capture.exited, KILL_WAIT_SECONDS)


async def _within(future: asyncio.Future[None], seconds: float) -> bool:
    """Whether ``future`` is done within ``seconds`` (it is not cancelled when it is not)."""
    done, _ = await asyncio.wait({future}, timeout=seconds)
    return bool(done)


class CappedOutput:
    """The bytes of a stream within a cap: the first half and the last half of it are kept."""

    def __init__(self, cap: int) -> None:
        self.head_cap = cap // 2
        self.tail_cap = cap - self.head_cap
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            if len(self.tail) > self.tail_cap:
                del self.tail[: len(self.tail) - self.tail_cap]

    @property
    def cut(self) -> int:
        return self.total - len(self.head) - len(self.tail)

    def text(self) -> str:
        if not self.cut:
            return (self.head + self.tail).decode(errors="replace")
        return (
            f"{self.head.decode(errors='replace')}\n"
            f"[… {format_size(self.cut)} of output cut here: {format_size(self.total)} in all, "
            f"the first and last {format_size(self.head_cap)} are shown …]\n"
            f"{self.tail.decode(errors='replace')}"
        )


def _result(
    outcome: _Outcome,
    code: int | None,
    output: CappedOutput,
    timeout: float,
    elapsed: float,
    policy: SandboxPolicy,
    leftovers: int | None,
) -> ToolResult:
    is_error = outcome.how == "timeout" or code != 0
    lines = [f"{_status(outcome, code, timeout, leftovers)} ({elapsed:.1f} s; {policy.describe()})"]
    text = output.text()
    if output.total:
        cut = f", {format_size(output.cut)} cut" if output.cut else ""
        lines.append(f"output ({format_size(output.total)}{cut}):")
        lines.append(text)
    else:
        lines.append("(no output)")
    note = denial_note(policy, text) if is_error else None
    if note is not None:
        lines.append(note if text.endswith("\n") or not output.total else f"\n{note}")
    return ToolResult("\n".join(lines), is_error=is_error)


def _status(outcome: _Outcome, code: int | None, timeout: float, leftovers: int | None) -> str:
    if outcome.how == "timeout" and outcome.held_open:
        status = f"timed out after {timeout:g} s: the command and the processes found were killed"
    elif outcome.how == "timeout":
        status = f"timed out after {timeout:g} s: the command and its processes were killed"
    elif code is not None and code < 0:
        status = f"killed by signal {_signal_name(-code)}"
    else:
        status = f"exit code {code}"
    if outcome.held_open:
        status += (
            " (processes it started still hold the output open: they detached from it and "
            "could not be found to be killed, so they may still be running; what they write "
            "next is not shown)"
        )
    elif outcome.how == "exited-leftovers":
        status += " (processes it left running with the output open were killed)"
    elif leftovers and outcome.how != "timeout":
        killed = (
            "1 process it left running was"
            if leftovers == 1
            else (f"{leftovers} processes it left running were")
        )
        status += f" ({killed} killed)"
    return status


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)
