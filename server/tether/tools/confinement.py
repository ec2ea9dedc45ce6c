"""The OS sandbox of commands: the policy, what it lets a command reach, and how it is applied.

Every command (and every stdio MCP server started under ``tools.mcp_sandbox``) is started on Linux
through the wrapper of :mod:`tether.tools.wrapper`, run from memory by the real interpreter that
runs tether (:func:`wrapper_command`). Confined, the command gets:

- **Landlock** (an allow-list; anything not listed cannot be opened). Read and execute: the
  system directories of :data:`SYSTEM_READABLE` that exist, ``/etc`` (under root, entry by entry
  but for what is not world-readable: ``/etc/shadow``, private keys; root owns them, and a
  command run by root would read them without a capability; any other user's commands are
  refused them by their modes), ``/proc`` and ``/sys``, a few devices, the
  directories on ``PATH`` (not ``/`` nor ``$HOME`` or a directory above it), the Python
  installation running tether, git's configuration files in ``$HOME`` (not its credential
  store), the workspace, and ``tools.sandbox_readable``. Write: the workspace
  (``workspace-write`` only), a private temporary directory (``TMPDIR``, removed when the command
  ends), ``/dev/null`` and its kin, and ``tools.sandbox_writable``. So the rest of ``$HOME``
  (``~/.ssh``, ``~/.config/tether``, the session database) and ``/tmp`` are out of reach.
  Signals, ``ptrace`` and abstract unix sockets reach only the command's own processes.
- **Protected paths**, read-only even inside a writable path (:func:`protected_paths`): the
  workspace's ``.git`` (with the git directory a ``.git`` file names, and its common directory),
  its ``.tether`` (made, empty, when missing), and tether's own installation. A command that
  could write them would reach outside the sandbox later: a git hook or ``core.fsmonitor`` runs
  at the user's next ``git commit``, a memory file enters every later prompt, and a rewritten
  tether module confines the next command. Where the kernel allows namespaces, they are
  read-only bind mounts in a mount namespace of the command's own; elsewhere Landlock rules
  carve them out (:func:`tether.tools.landlock.carve`), at a price the result states.
- **No network** unless allowed: TCP by Landlock (ABI 4), the rest (UDP, raw, unix sockets
  reached by a path, io_uring) by a seccomp filter (:mod:`tether.tools.seccomp`).
- **No capabilities** (bounding set included) and ``no_new_privs``.

And confined or not, its whole process tree ends with it (a pid namespace, or a subreaper where
there are no namespaces; see :mod:`tether.tools.wrapper`).

:func:`isolation` finds once, by starting the wrapper on probes, which of these this system
allows, and logs a warning when it falls back; :meth:`SandboxPolicy.describe` says it with every
command. Where Landlock is missing, commands run as they would without a sandbox.
"""

from __future__ import annotations

import logging
import os
import re
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Literal

logger = logging.getLogger(__name__)

SandboxMode = Literal["workspace-write", "read-only", "off"]

SYSTEM_READABLE = (
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/opt",
    "/nix/store",
    "/proc",
    "/sys",
    "/dev/random",
    "/dev/urandom",
)
SYSTEM_FILTERED = ("/etc",)  # under root: readable but for what is not world-readable
LINKED_FROM_ETC = ("/etc/resolv.conf", "/etc/hosts", "/etc/localtime")
DEVICES_WRITABLE = ("/dev/null", "/dev/zero", "/dev/full")
HOME_READABLE = (".gitconfig", ".config/git/config", ".config/git/ignore", ".config/git/attributes")
FIRST_NETWORK_ABI = 4  # TCP bind and connect rules
NAMESPACES_VARIABLE = "TETHER_SANDBOX_NAMESPACES"  # "0": Landlock alone (a diagnostic switch)
WRAPPER_MODULES = ("processes", "landlock", "seccomp", "namespaces", "wrapper")
PROBE_TIMEOUT = 30.0
PROTECTED = ".git, .tether and tether's installation read-only"


@dataclass(frozen=True, kw_only=True)
class SandboxPolicy:
    """How commands are confined (``tools.sandbox`` and the keys beside it)."""

    mode: SandboxMode = "workspace-write"
    network: bool = False  # network connections and listening sockets allowed
    readable: tuple[str, ...] = ()  # more paths commands may read (``~`` expanded)
    writable: tuple[str, ...] = ()  # more paths commands may write

    @property
    def confines(self) -> bool:
        """Whether commands are to be confined (and Landlock is there to do it)."""
        return self.mode != "off" and landlock_abi() > 0

    def describe(self) -> str:
        """The policy in effect, in a few words (shown with every command). The first call may
        start the probes of :func:`isolation` (once per process)."""
        if self.mode == "off":
            return "sandbox: off"
        abi = landlock_abi()
        if abi == 0:
            return "sandbox: none (Landlock is not available)"
        found = isolation()
        return f"sandbox: {self.mode}, {self._network(abi, found)}; {found.describe()}"

    def _network(self, abi: int, found: Isolation) -> str:
        if self.network:
            return "network allowed"
        if found.seccomp:
            return "no network"
        if abi >= FIRST_NETWORK_ABI:
            return "no TCP (UDP and unix sockets are not blocked here)"
        return f"network not restricted (Landlock ABI {abi})"


@dataclass(frozen=True, kw_only=True)
class Isolation:
    """What this system lets the wrapper do (see :func:`isolation`)."""

    namespaces: bool  # mount and pid namespaces
    user: bool = False  # inside a user namespace (tether is not privileged)
    seccomp: bool = False  # the network filter

    def describe(self) -> str:
        if self.namespaces:
            return f"{PROTECTED} (mount namespace)"
        return (
            f"{PROTECTED} by Landlock alone (no namespaces here: nothing can be created, "
            "removed or renamed in the directories that hold them)"
        )


@cache
def landlock_abi() -> int:
    """The Landlock ABI commands are confined with; 0 (logged once) where it is unavailable."""
    from tether.tools import landlock

    abi = landlock.abi_version()
    if abi > 0:
        try:
            landlock.probe(abi)
        except OSError as exc:
            logger.warning(
                "Landlock ABI %d refuses a ruleset (%s): commands run without an OS sandbox",
                abi,
                exc.strerror or exc,
            )
            return 0
        return abi
    logger.warning(
        "Landlock is not available on this system: commands run without an OS sandbox "
        "(tools.sandbox has no effect)"
    )
    return 0


@cache
def isolation() -> Isolation:
    """How the wrapper isolates commands here, found once by starting it on probes (each checks
    that a protected directory really is read-only to the command): mount and pid namespaces
    (as root without a user namespace, else inside one), or Landlock alone (logged as a warning:
    where user namespaces are disabled, in most containers, or with
    ``TETHER_SANDBOX_NAMESPACES=0``); and whether the seccomp network filter installs."""
    from tether.tools import seccomp

    filtered = seccomp.supported() and _probe(namespaces=False, seccomp=True) is None
    if not filtered:
        logger.warning(
            "the seccomp network filter is not available here: under 'no network', commands "
            "can still use UDP and unix sockets"
        )
    if os.environ.get(NAMESPACES_VARIABLE) == "0":
        reasons = [f"{NAMESPACES_VARIABLE}=0"]
    else:
        reasons = []
        for user in (False, True) if os.geteuid() == 0 else (True,):
            error = _probe(namespaces=True, user=user, seccomp=False)
            if error is None:
                return Isolation(namespaces=True, user=user, seccomp=filtered)
            reasons.append(error)
    logger.warning(
        "mount and pid namespaces are not available (%s): .git, .tether and tether's "
        "installation are kept read-only by Landlock alone, so commands cannot create, remove "
        "or rename anything in the directories that hold them (the workspace root), and a "
        "subreaper, not a pid namespace, keeps track of their processes",
        "; ".join(reasons),
    )
    return Isolation(namespaces=False, seccomp=filtered)


def _probe(*, namespaces: bool, seccomp: bool, user: bool = False) -> str | None:
    """Start the wrapper on a probe instead of a command; None when it worked, else why not."""
    with tempfile.TemporaryDirectory(prefix="tether-probe-") as directory:
        protected = os.path.join(directory, "protected")
        os.mkdir(protected)
        args = [*wrapper_command(), "--parent", str(os.getpid()), "--sandbox", "--probe"]
        args += ["--write", directory, "--protect", protected]
        args += ["--namespaces"] * namespaces + ["--user"] * user + ["--seccomp"] * seccomp
        try:
            done = subprocess.run(
                [*args, "--"],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                cwd=directory,
                timeout=PROBE_TIMEOUT,
                check=False,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return str(exc)
    if done.returncode == 0:
        return None
    return done.stderr.decode(errors="replace").strip() or f"exit status {done.returncode}"


BOOT = """\
import sys, marshal, zlib, binascii
Module = type(sys)
tools = sys.modules["tether.tools"] = Module("tether.tools")
sys.modules["tether"] = Module("tether")
sys.modules["tether"].tools = tools
for name, code in marshal.loads(zlib.decompress(binascii.a2b_base64(sys.argv[1]))):
    module = sys.modules[name] = Module(name)
    setattr(tools, name.rpartition(".")[2], module)
    exec(code, module.__dict__)
sys.exit(module.main(sys.argv[2:]))
"""


@cache
def wrapper_command() -> tuple[str, ...]:
    """How the wrapper is started: ``python -I -S -c BOOT PAYLOAD``, where ``python`` is the real
    path of the interpreter running tether (not a link a command could redirect) and ``PAYLOAD``
    the wrapper's modules, read and compiled once per process (docstrings left out),
    marshalled, compressed and base64-encoded: about 30 KB, and 5 ms less per command than
    compiling source. Nothing of tether's installation is read when a command starts."""
    import binascii
    import marshal
    import zlib

    here = Path(__file__).parent
    code = [(f"tether.tools.{name}", _compiled(here / f"{name}.py")) for name in WRAPPER_MODULES]
    payload = binascii.b2a_base64(zlib.compress(marshal.dumps(code), 9), newline=False).decode()
    return (os.path.realpath(sys.executable), "-I", "-S", "-c", BOOT, payload)


def _compiled(path: Path) -> object:
    return compile(path.read_text(), path.name, "exec", optimize=2)


def wrap(
    policy: SandboxPolicy,
    argv: Sequence[str],
    *,
    workspace: Path,
    tmpdir: Path | None,
    environ: Mapping[str, str],
    status: int | None = None,
) -> list[str]:
    """``argv`` started through the wrapper: confined under ``policy`` when it confines (in
    ``tmpdir``, its private temporary directory), its process tree watched in any case.
    ``environ`` is the command's environment (its ``PATH`` and ``HOME``); ``status``, a pipe
    the wrapper reports to. Under ``workspace-write`` this makes ``.tether`` in the workspace
    when there is none, to protect it."""
    args = [*wrapper_command(), "--parent", str(os.getpid())]
    if status is not None:
        args += ["--status", str(status)]
    if policy.confines:
        args += _confinement(policy, workspace=workspace, tmpdir=tmpdir, environ=environ)
    return [*args, "--", *argv]


def _confinement(
    policy: SandboxPolicy, *, workspace: Path, tmpdir: Path | None, environ: Mapping[str, str]
) -> list[str]:
    found = isolation()
    root = os.path.realpath(workspace)
    read = [*SYSTEM_READABLE, *_linked_from_etc(), *_python_prefixes()]
    read += _path_directories(environ)
    read += _home_files(environ)
    read += [_expand(path, environ, workspace) for path in policy.readable]
    system = _system_files() if os.geteuid() == 0 else SystemFiles(SYSTEM_FILTERED, ())
    read += system.read
    writable = [os.path.realpath(_expand(path, environ, workspace)) for path in policy.writable]
    if policy.mode == "workspace-write":
        writable.append(root)
    else:
        read.append(root)
    write = [*DEVICES_WRITABLE, *([str(tmpdir)] if tmpdir else []), *writable]
    protect = protected_paths(Path(root), writable, make=policy.mode == "workspace-write")
    args = ["--sandbox"]
    args += ["--namespaces"] * found.namespaces + ["--user"] * found.user
    if policy.network:
        args.append("--network")
    elif found.seccomp:
        args.append("--seccomp")
    args += _repeat("--list", system.listable)
    args += _repeat("--read", read)
    args += _repeat("--write", write)
    args += _repeat("--protect", protect)
    return args


def _repeat(option: str, paths: Sequence[str]) -> list[str]:
    return [item for path in dict.fromkeys(paths) for item in (option, path)]


def protected_paths(workspace: Path, writable: Sequence[str], *, make: bool = False) -> list[str]:
    """The real paths to keep read-only for a command that may write ``writable`` (real paths):
    ``.git`` and ``.tether`` of the (real) ``workspace``, the git directory and common directory
    a ``.git`` file leads to, and tether's installation, where they lie in (or hold) a writable
    path. With ``make``, an empty ``.tether`` is made first where there is none."""
    if make:
        _make_tether_directory(workspace)
    candidates = [*_guarded_in(workspace), *_installation()]
    return [
        path
        for path in dict.fromkeys(candidates)
        if any(_is_within(path, root) or _is_within(root, path) for root in writable)
    ]


def _make_tether_directory(workspace: Path) -> None:
    """An empty ``.tether``, so that it can be kept read-only (git does not show an empty
    directory); tether reads the workspace's configuration and memory files there."""
    try:
        (workspace / ".tether").mkdir()
    except FileExistsError:
        pass
    except OSError as exc:
        logger.debug("cannot make %s/.tether: %s", workspace, exc)


def _guarded_in(workspace: Path) -> Iterator[str]:
    for name in (".tether", ".git"):
        path = workspace / name
        if os.path.lexists(path):
            yield os.path.realpath(path)
    gitdir = _gitdir(workspace / ".git")
    if gitdir is not None:
        yield gitdir
        common = _gitdir(Path(gitdir) / "commondir", prefix="")
        if common is not None:
            yield common


def _gitdir(path: Path, *, prefix: str = "gitdir:") -> str | None:
    """The real path a git file names: ``.git`` (``gitdir: PATH``, in a worktree or submodule)
    or a git directory's ``commondir`` (``PATH``), relative to the file's directory."""
    try:
        if not path.is_file():
            return None
        with path.open("rb") as file:
            text = file.read(4096).decode(errors="replace").strip()
    except OSError:
        return None
    if not text.startswith(prefix) or "\n" in text:
        return None
    named = text[len(prefix) :].strip()
    return os.path.realpath(os.path.join(path.parent, named)) if named else None


@cache
def _installation() -> tuple[str, ...]:
    """The real paths of tether's installation: the Python prefixes, tether's package and the
    interpreter."""
    import tether

    paths = [sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix, sys.executable]
    paths.append(os.path.dirname(tether.__file__))
    return tuple(dict.fromkeys(os.path.realpath(path) for path in paths))


@dataclass(frozen=True)
class SystemFiles:
    """The Landlock grants of :data:`SYSTEM_FILTERED`: paths readable whole, and directories
    that are only listed (their readable entries are granted one by one)."""

    read: tuple[str, ...]
    listable: tuple[str, ...]


@cache
def _system_files() -> SystemFiles:
    """What of :data:`SYSTEM_FILTERED` commands may read, found once per process: everything
    world-readable (by mode: others may read a file, read and search a directory). A
    directory that is so, all of it, is granted whole; in another one, the entries that are
    (symbolic links need no grant: what they lead to is checked on its own)."""
    read: list[str] = []
    listable: list[str] = []
    for top in SYSTEM_FILTERED:
        if _survey(top, read, listable):
            read.append(top)
    return SystemFiles(tuple(read), tuple(listable))


def _survey(directory: str, read: list[str], listable: list[str]) -> bool:
    """Whether all of ``directory`` is world-readable; if not, the grants of what is."""
    try:
        info = os.stat(directory)
        entries = list(os.scandir(directory))
    except OSError:
        return False
    if not _world_readable(info.st_mode):
        return False
    clean: list[str] = []
    rules: tuple[list[str], list[str]] = ([], [])
    for entry in entries:
        if entry.is_symlink():
            continue
        if entry.is_dir(follow_symlinks=False):
            whole = _survey(entry.path, *rules)
        else:
            try:
                whole = _world_readable(entry.stat(follow_symlinks=False).st_mode)
            except OSError:
                whole = False
        if whole:
            clean.append(entry.path)
    if len(clean) == sum(1 for entry in entries if not entry.is_symlink()):
        return True
    listable.append(directory)
    read += clean + rules[0]
    listable += rules[1]
    return False


def _world_readable(mode: int) -> bool:
    if stat.S_ISDIR(mode):
        return mode & (stat.S_IROTH | stat.S_IXOTH) == stat.S_IROTH | stat.S_IXOTH
    return bool(mode & stat.S_IROTH)


@dataclass(frozen=True)
class McpSandbox:
    """The sandbox of a stdio MCP server: its policy, and the workspace it serves."""

    policy: SandboxPolicy
    workspace: Path


def _linked_from_etc() -> list[str]:
    """Where the files of ``/etc`` that often point elsewhere lead (``/etc/resolv.conf`` to
    ``/run/systemd/resolve/…`` or ``/run/resolvconf/…``): that one file is readable too, when
    anyone may read it."""
    found = []
    for path in LINKED_FROM_ETC:
        real = os.path.realpath(path)
        try:
            if _world_readable(os.stat(real).st_mode):
                found.append(real)
        except OSError:
            continue
    return found


def _python_prefixes() -> list[str]:
    return sorted({sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix})


def _path_directories(environ: Mapping[str, str]) -> Iterator[str]:
    """The absolute directories of ``PATH``, but none that holds ``$HOME``."""
    home = environ.get("HOME")
    for entry in environ.get("PATH", "").split(os.pathsep):
        if not entry or not os.path.isabs(entry):
            continue
        directory = os.path.normpath(entry)
        if directory == "/" or (home and _is_within(home, directory)):
            continue
        yield directory


def _home_files(environ: Mapping[str, str]) -> list[str]:
    home = environ.get("HOME")
    return [os.path.join(home, name) for name in HOME_READABLE] if home else []


def _is_within(path: str, directory: str) -> bool:
    path, directory = os.path.normpath(path), os.path.normpath(directory)
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def _expand(path: str, environ: Mapping[str, str], workspace: Path) -> str:
    """``path`` with ``~`` for ``HOME``; a relative one is taken from the workspace."""
    if path == "~" or path.startswith("~/"):
        path = os.path.join(environ.get("HOME", "~"), path[2:])
    return os.path.join(workspace, path)


_DENIED = re.compile(
    r"permission denied|operation not permitted|read-only file system|\bEACCES\b|\bEPERM\b"
    r"|\bEROFS\b",
    re.IGNORECASE,
)


def denial_note(policy: SandboxPolicy, output: str) -> str | None:
    """A note for a failed command whose output reports a refusal the sandbox may have made;
    None when the command was not confined or says nothing of the kind."""
    if not policy.confines or not _DENIED.search(output):
        return None
    writes = "the workspace and $TMPDIR" if policy.mode == "workspace-write" else "$TMPDIR"
    network = ", and open no network connection" if not policy.network else ""
    loosen = ['tools.sandbox = "off"']
    if policy.mode == "read-only":
        loosen.insert(0, 'tools.sandbox = "workspace-write"')
    if not policy.network:
        loosen.append("tools.sandbox_network = true")
    loosen.append("tools.sandbox_readable or tools.sandbox_writable")
    return (
        f'[tether\'s sandbox (tools.sandbox = "{policy.mode}") may have refused this: commands '
        f"may write only in {writes} (never in .git, .tether or tether's installation: git "
        "commit and git add fail, so leave them to the user), read only the system, the "
        f"workspace and PATH, reach no process outside the sandbox{network}. The user can "
        f"allow more in their configuration: {', '.join(loosen)}.]"
    )
