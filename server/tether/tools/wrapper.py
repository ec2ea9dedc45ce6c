"""The command wrapper: starts one command confined, and leaves nothing of it running.

tether never runs this file from disk: :func:`tether.tools.confinement.wrapper_argv` compiles it
(with the modules it uses, all standard-library only) once, and starts every command as
``python -I -S -c <those modules> [OPTION]... -- PROGRAM [ARG]...`` with the real path of the
interpreter that runs tether. A command that rewrites files of tether's installation therefore
cannot change what confines the next one (and the installation is read-only to commands anyway).

Options: ``--parent PID`` (tether's pid), ``--status FD`` (a pipe to tether), ``--namespaces``
(and ``--user``: inside a user namespace), ``--sandbox`` (Landlock, seccomp, no capabilities;
without it the command only has its process tree watched), ``--read``/``--write``/``--list``
PATH, ``--protect PATH`` (read-only even inside a writable path, and none of the directories
between the two can be renamed), ``--carve PATH`` (a symbolic link, or a path that does not
exist, kept as it is: nothing can be created, removed or renamed in its directory, whatever the
mechanism), ``--network`` (no Landlock network rules), ``--seccomp`` (the network filter),
``--probe`` (no command: check the protection and exit).

With namespaces there are three processes (:func:`isolated`)::

    wrapper (W) ── pid 1 of a new pid namespace (C) ── the command (G) ── what it starts
    unconfined     mounts, then reaps                  confines itself, then exec

- W dies with tether (``PR_SET_PDEATHSIG``; it checks its parent is still tether after setting
  it), and C dies with W. When the pid 1 of a pid namespace dies the kernel kills every process
  in it, so the command's whole tree ends with W, however it detached (``setsid``, ``nohup``,
  a double fork), and tether only ever needs to kill W.
- C sets up the mounts (:mod:`tether.tools.namespaces`: the protected paths read-only, the
  directories on the way to them pinned), forks G and reaps every orphan of the namespace.
  When G exits, C waits :data:`GRACE_SECONDS` for the rest to exit, then kills what is left
  and reports how many there were.
- G confines itself (:func:`confine`: Landlock, with the directories of the ``--carve`` paths
  carved out, no capabilities, ``no_new_privs``, the seccomp network filter) and ``exec``\\ s
  the command.

Without namespaces (:func:`supervised`), W is a subreaper (``PR_SET_CHILD_SUBREAPER``): every
orphan of the command's tree is re-parented to it, so walking its descendants finds the whole
tree. It kills them when G has exited and the grace is over, on ``SIGTERM`` (tether's timeout or
cancel), and when tether dies (its parent-death signal is then ``SIGTERM``). Protected paths are
carved out of the writable ones with Landlock rules (:func:`tether.tools.landlock.carve`), which
also keeps the directories on the way to them from being renamed.

W exits as G did: with its exit code, or killed by the same signal, so tether reads the
command's own status. Before that it writes ``leftovers N`` to ``--status``: the number of
processes the command left running that were killed. The wrapper never runs a command it could
not confine as asked: it exits with status 126 (:data:`EXIT_CANNOT_RUN`, as when ``exec``
fails) and says why on stderr.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # no stub: the builtin under ``signal``
import os
import sys
import time

from tether.tools import landlock, namespaces, seccomp
from tether.tools.linux import prctl
from tether.tools.processes import descendants, is_alive, kill_found

TYPE_CHECKING = False  # not imported from typing: the wrapper imports nothing it need not
if TYPE_CHECKING:
    from collections.abc import Sequence

EXIT_CANNOT_RUN = 126  # not confined as asked, or not executable: the command did not run
EXIT_NOT_FOUND = 127
GRACE_SECONDS = 0.5  # for what a command left running to exit on its own once it has exited
POLL_SECONDS = 0.05
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
SIGCHLD: int = _signal.SIGCHLD
SIGTERM: int = _signal.SIGTERM
SIGKILL: int = _signal.SIGKILL
WATCHED = {SIGCHLD, SIGTERM}


class Options:
    """The wrapper's arguments (see the module's docstring)."""

    def __init__(self) -> None:
        self.read: list[str] = []
        self.write: list[str] = []
        self.listable: list[str] = []
        self.protect: list[str] = []
        self.carve: list[str] = []
        self.parent = 0
        self.status = -1
        self.namespaces = False
        self.user = False
        self.sandbox = False
        self.network = False
        self.seccomp = False
        self.probe = False
        self.command: list[str] = []


_LISTS = {
    "--read": "read",
    "--write": "write",
    "--list": "listable",
    "--protect": "protect",
    "--carve": "carve",
}
_NUMBERS = {"--parent": "parent", "--status": "status"}
_FLAGS = {
    "--namespaces": "namespaces",
    "--user": "user",
    "--sandbox": "sandbox",
    "--network": "network",
    "--seccomp": "seccomp",
    "--probe": "probe",
}


def parse(args: Sequence[str]) -> Options:
    """The wrapper's arguments; a ValueError for anything it does not know."""
    options = Options()
    index = 0
    while index < len(args):
        arg = args[index]
        if arg == "--":
            options.command = list(args[index + 1 :])
            if not options.command and not options.probe:
                raise ValueError("no command given")
            if options.namespaces and not options.sandbox:
                raise ValueError("--namespaces goes with --sandbox")  # no unconfined namespaces
            return options
        if arg in _FLAGS:
            setattr(options, _FLAGS[arg], True)
        elif (arg in _LISTS or arg in _NUMBERS) and index + 1 < len(args):
            value = args[index + 1]
            if arg in _LISTS:
                getattr(options, _LISTS[arg]).append(value)
            else:
                setattr(options, _NUMBERS[arg], int(value))
            index += 1
        else:
            raise ValueError(f"unexpected argument {arg!r}")
        index += 1
    raise ValueError("no command given (expected -- PROGRAM [ARG]...)")


def main(args: Sequence[str]) -> int:
    """Run the command as the options say; returns its exit code (or dies by its signal)."""
    try:
        options = parse(args)
        if options.status >= 0:
            os.set_inheritable(options.status, False)
        if not _tied_to(options.parent, SIGKILL if options.namespaces else SIGTERM):
            return EXIT_CANNOT_RUN  # tether is gone already: nothing to run for
    except (OSError, ValueError) as exc:
        return _refuse(exc)
    return isolated(options) if options.namespaces else supervised(options)


def _refuse(exc: BaseException) -> int:
    print(f"tether: the command was not run: cannot confine it: {exc}", file=sys.stderr)
    return EXIT_CANNOT_RUN


def _tied_to(parent: int, signum: int) -> bool:
    """Have ``signum`` sent to this process when its parent dies; False when the parent is
    already not ``parent`` (it died before the signal was asked for)."""
    prctl(PR_SET_PDEATHSIG, signum, "PR_SET_PDEATHSIG")
    return parent == 0 or os.getppid() == parent


# With namespaces: W, then C.


def isolated(options: Options) -> int:
    """W: make the namespaces, fork C (their pid 1), relay how the command ended."""
    try:
        namespaces.enter(user=options.user)
    except OSError as exc:
        return _refuse(exc)
    report_read, report_write = os.pipe()
    alive_read, alive_write = os.pipe()  # C reads end-of-file once W is gone
    pid = os.fork()
    if pid == 0:
        os.close(report_read)
        os.close(alive_write)
        os._exit(init(options, report_write, alive_read))
    os.close(report_write)
    os.close(alive_read)
    _, status = os.waitpid(pid, 0)
    with os.fdopen(report_read, "rb") as report:
        words = report.read().split()
    if len(words) != 2:  # C ended without a report: it could not confine, and said so
        return relay(status, 0, options)
    return relay(int(words[0]), int(words[1]), options)


def init(options: Options, report: int, alive: int) -> int:
    """C, the pid 1 of the namespace: set up the mounts, run G, reap, report."""
    try:
        prctl(PR_SET_PDEATHSIG, SIGKILL, "PR_SET_PDEATHSIG")
        os.set_blocking(alive, False)
        if os.read(alive, 1) == b"":  # W died before the signal was asked for
            return EXIT_CANNOT_RUN
    except BlockingIOError:
        pass  # W is alive
    except OSError as exc:
        return _refuse(exc)
    try:
        namespaces.isolate_filesystem(options.protect, options.write)
    except OSError as exc:
        return _refuse(exc)
    status, leftovers = run(options)
    os.write(report, f"{status} {leftovers}".encode())
    return 0


# Without namespaces: W alone.


def supervised(options: Options) -> int:
    """W as a subreaper: run G, kill what it leaves, relay how it ended."""
    try:
        prctl(PR_SET_CHILD_SUBREAPER, 1, "PR_SET_CHILD_SUBREAPER")
    except OSError as exc:
        return _refuse(exc)
    status, leftovers = run(options)
    return relay(status, leftovers, options)


# Both.


def run(options: Options) -> tuple[int, int]:
    """Fork G, wait for it, then settle what it left: (its wait status, leftovers killed)."""
    _signal.pthread_sigmask(_signal.SIG_BLOCK, WATCHED)
    pid = os.fork()
    if pid == 0:
        _signal.pthread_sigmask(_signal.SIG_UNBLOCK, WATCHED)
        os._exit(become(options))
    status = None
    terminated = False
    while status is None:
        if _signal.sigwaitinfo(WATCHED).si_signo == SIGTERM:
            terminated = True
            _kill_leftovers()
        status = _reap(pid)[0]
    leftovers = _kill_leftovers() if terminated else _settle()
    _wait_children(GRACE_SECONDS)
    return status, leftovers


def _reap(pid: int = 0) -> tuple[int | None, bool]:
    """Reap every child that has exited: the wait status of ``pid`` if it was one of them, and
    whether any child is left."""
    found = None
    while True:
        try:
            child, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return found, False
        if child == 0:
            return found, True
        if child == pid:
            found = status


def _wait_children(seconds: float) -> None:
    """Reap the children killed (and those re-parented here as their parents die), waiting
    ``seconds`` at most (a process in an uninterruptible sleep dies when it wakes)."""
    deadline = time.monotonic() + seconds
    while _reap()[1]:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        _signal.sigtimedwait({SIGCHLD}, min(remaining, POLL_SECONDS))


def _settle() -> int:
    """Once the command has exited: give what it left running a short grace to exit, then
    kill it; returns how many processes were killed. Every orphan of the tree is re-parented to
    this process (a subreaper, or the pid 1 of the namespace), so the tree is empty exactly when
    this process has no child left, which needs no walk of ``/proc``."""
    deadline = time.monotonic() + GRACE_SECONDS
    while _reap()[1]:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return _kill_leftovers()
        received = _signal.sigtimedwait(WATCHED, min(remaining, POLL_SECONDS))
        if received is not None and received.si_signo == SIGTERM:
            return _kill_leftovers()
    return 0


def _leftovers() -> set[int]:
    return {pid for pid in descendants(os.getpid()) if is_alive(pid)}


def _kill_leftovers() -> int:
    return len(kill_found(_leftovers))


def relay(status: int, leftovers: int, options: Options) -> int:
    """Report ``leftovers`` to tether, then end as the wait ``status`` says G did."""
    if options.status >= 0:
        try:
            os.write(options.status, f"leftovers {leftovers}\n".encode())
            os.close(options.status)
        except OSError:
            pass  # tether is gone
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        prctl(PR_SET_DUMPABLE, 0, "PR_SET_DUMPABLE")  # no core file of the wrapper for the crash
        if signum != SIGKILL:
            _signal.signal(signum, _signal.SIG_DFL)
        _signal.pthread_sigmask(_signal.SIG_UNBLOCK, {signum})
        os.kill(os.getpid(), signum)
        return 128 + signum  # a signal this process does not die of
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else EXIT_CANNOT_RUN


# G: the command.


def become(options: Options) -> int:
    """G: confine this process and become the command; returns only when that fails."""
    try:
        if options.sandbox:
            confine(options)
    except (OSError, ValueError) as exc:
        return _refuse(exc)
    if options.probe:
        return _probe(options)
    _restore_signals()
    command = options.command
    try:
        os.execvp(command[0], command)
    except FileNotFoundError:
        print(f"tether: command not found: {command[0]}", file=sys.stderr)
        return EXIT_NOT_FOUND
    except OSError as exc:
        print(f"tether: cannot run {command[0]}: {exc.strerror}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    return EXIT_CANNOT_RUN  # not reached: execvp returns only by raising


def confine(options: Options) -> None:
    """Landlock, no capabilities, ``no_new_privs``, and with ``--seccomp`` the network filter.
    The Landlock rules carve the ``--carve`` paths out of the writable ones, and the
    ``--protect`` paths too where no mount namespace made them read-only."""
    read, write = list(options.read), list(options.write)
    carved = options.carve if options.namespaces else options.protect + options.carve
    if carved:
        carved_read, write = landlock.carve(write, carved)
        read += carved_read
    landlock.restrict(read, write, network=options.network, listable=options.listable)
    if options.seccomp:
        seccomp.install(seccomp.network_filter())


def _probe(options: Options) -> int:
    """Instead of a command: check that nothing can be created in the protected directories,
    and that the directories on the way to them cannot be renamed."""
    for path in options.protect:
        if not os.path.isdir(path):
            continue
        probe = os.path.join(path, f".tether-probe-{os.getpid()}")
        try:
            os.close(os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        except OSError:
            continue
        os.unlink(probe)
        print(f"tether: {path} stayed writable", file=sys.stderr)
        return EXIT_CANNOT_RUN
    for path in namespaces.pinned(options.protect, options.write):
        try:
            os.rename(path, f"{path}.tether-probe")
        except OSError:
            continue
        os.rename(f"{path}.tether-probe", path)
        print(f"tether: {path} could be renamed", file=sys.stderr)
        return EXIT_CANNOT_RUN
    return 0


def _restore_signals() -> None:
    """Give ``SIGPIPE`` and ``SIGXFSZ`` back their default action, which Python ignores and an
    ignored signal stays ignored across ``exec`` (``subprocess`` does the same for its
    children: ``restore_signals``)."""
    for name in ("SIGPIPE", "SIGXFSZ"):
        number = getattr(_signal, name, None)
        if number is not None:
            _signal.signal(number, _signal.SIG_DFL)
