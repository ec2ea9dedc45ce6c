"""The OS sandbox of commands: the policy, what it lets a command reach, and how it is applied.

Every command and every stdio MCP server is started on Linux through the wrapper of
:mod:`tether.tools.wrapper`, run from memory by the real interpreter that runs tether
(:func:`wrapper_command`). Confined (``tools.sandbox``, ``tools.mcp_sandbox``), it gets:

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
- **Protected paths**, read-only even inside a writable path (:func:`protection`): the
  workspace's ``.git`` (with the git directory a ``.git`` file names, and its common directory),
  its ``.tether`` (made, empty, when missing), tether's own installation, the directories
  tether imports from (``sys.path``) and its own configuration and data directories. A command
  that could write them would reach outside the sandbox later: a git hook or
  ``core.fsmonitor`` runs at the user's next ``git status``, a memory file enters every later
  prompt, and a rewritten or planted module runs in tether, unconfined. Where the kernel allows
  namespaces, they are read-only bind mounts in a mount namespace of the command's own, and the
  directories on the way to them are pinned (bind-mounted on themselves) so that no rename
  moves them away; elsewhere Landlock rules carve them out
  (:func:`tether.tools.landlock.carve`), at a price the result states. A symbolic link on the
  way to one, or one that is missing, is kept by carving the directory that holds it, in both
  mechanisms. A file among them with a second hard link could be written through it:
  :func:`hard_links_refusal` says why such a command is not run.
- **No network** unless allowed: a seccomp filter (:mod:`tether.tools.seccomp`) refuses every
  socket but netlink's (TCP and UDP, unix sockets reached by a path, raw sockets) and io_uring;
  Landlock (ABI 4) refuses TCP ``connect`` and ``bind`` too, and alone where seccomp is
  missing.
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

from tether.tools.guarded import guarded, hard_linked
from tether.tools.linux import within

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
WRAPPED = sys.platform.startswith("linux")  # commands go through the wrapper (Linux system calls)
NAMESPACES_VARIABLE = "TETHER_SANDBOX_NAMESPACES"  # "0": Landlock alone (a diagnostic switch)
WRAPPER_MODULES = ("processes", "linux", "landlock", "seccomp", "namespaces", "wrapper")
PROBE_TIMEOUT = 30.0
PROTECTED = ".git, .tether and tether's installation read-only"


@dataclass(frozen=True, kw_only=True)
class SandboxPolicy:
    """How commands are confined (``tools.sandbox`` and the keys beside it)."""

    mode: SandboxMode = "workspace-write"
    network: bool = False  # network connections and listening sockets allowed
    readable: tuple[str, ...] = ()  # more paths commands may read (``~`` expanded)
    writable: tuple[str, ...] = ()  # more paths commands may write
    # tether's own directories (user configuration, data): read-only where a writable path
    # holds them, and made first when missing
    state: tuple[str, ...] = ()

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
        from tether.tools.landlock import FIRST_NETWORK_ABI

        if self.network:
            return "network allowed"
        if found.seccomp:
            return "no network"
        if abi >= FIRST_NETWORK_ABI:
            return (
                "only TCP connect and bind refused (no seccomp filter here: other sockets, "
                "listening and TCP Fast Open are not)"
            )
        return f"network not restricted (Landlock ABI {abi})"


@dataclass(frozen=True, kw_only=True)
class Isolation:
    """What this system lets the wrapper do (see :func:`isolation`)."""

    namespaces: bool  # mount and pid namespaces
    user: bool = False  # inside a user namespace (tether is not privileged)
    seccomp: bool = False  # the network filter

    def describe(self) -> str:
        if self.namespaces:
            return (
                f"{PROTECTED} (mount namespace; where one is a symbolic link, nothing can be "
                "created, removed or renamed beside it)"
            )
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
    """Start the wrapper on a probe instead of a command; None when it worked, else why not.
    The protected directory lies one level down, so that the probe also checks that the
    directory on the way cannot be renamed."""
    with tempfile.TemporaryDirectory(prefix="tether-probe-") as directory:
        protected = os.path.join(directory, "pinned", "protected")
        os.makedirs(protected)
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
    kept = protection(
        Path(root), writable, state=policy.state, make=policy.mode == "workspace-write"
    )
    args = ["--sandbox"]
    args += ["--namespaces"] * found.namespaces + ["--user"] * found.user
    if policy.network:
        args.append("--network")
    elif found.seccomp:
        args.append("--seccomp")
    args += _repeat("--list", system.listable)
    args += _repeat("--read", read)
    args += _repeat("--write", write)
    args += _repeat("--protect", kept.read_only)
    args += _repeat("--carve", kept.carved)
    return args


def _repeat(option: str, paths: Sequence[str]) -> list[str]:
    return [item for path in dict.fromkeys(paths) for item in (option, path)]


@dataclass(frozen=True)
class Protection:
    """What a command that may write some paths must leave as it is (real paths, or paths whose
    directory is real): ``read_only``, files and directories it may not change (``--protect``);
    ``carved``, symbolic links and missing paths it may not replace, remove or make, by
    carving the directory that holds each of them (``--carve``)."""

    read_only: list[str]
    carved: list[str]


def protection(
    workspace: Path, writable: Sequence[str], *, state: Sequence[str] = (), make: bool = False
) -> Protection:
    """What to protect from a command that may write ``writable`` (real paths): what steers git
    and tether in the (real) ``workspace`` (:func:`tether.tools.guarded.guarded`), tether's
    installation, the directories tether imports from (``sys.path``) and tether's own
    ``state`` directories, where they lie in a writable path (and, but for ``sys.path``, where
    they hold one). A path is resolved link by link: each symbolic link on the way that lies in
    a writable path is carved (the command could replace it: ``rm .git && mkdir .git``), and so
    is the path itself when it is missing (the command could make it: a ``sys.path`` entry, a
    git directory that a ``.git`` file names). A missing ``state`` directory that a writable
    path holds is made first (private to the user), and with ``make`` an empty ``.tether`` where
    there is none, so that they can be kept read-only."""
    if make:
        _make_directory(workspace / ".tether")
    for directory in state:
        if any(within(directory, root) for root in writable):
            _make_directory(Path(directory), parents=True)
    outer = [*guarded(workspace), *_installation(), *state]
    candidates = [(path, True) for path in outer] + [(path, False) for path in _import_path()]
    read_only: dict[str, None] = {}
    carved: dict[str, None] = {}
    for path, even_holding in candidates:
        real, links = resolve(path)
        carved.update(dict.fromkeys(link for link in links if _inside(link, writable)))
        if not os.path.lexists(real):
            if _inside(real, writable):
                carved[real] = None
        elif _inside(real, writable) or (
            even_holding and any(within(root, real) for root in writable)
        ):
            read_only[real] = None
    # What lies in a read-only path cannot be replaced anyway, and carving it would cost the
    # directories on the way (the workspace's root, say) their new entries.
    kept = [path for path in carved if not _inside(path, list(read_only))]
    return Protection(list(read_only), kept)


def _inside(path: str, writable: Sequence[str]) -> bool:
    return any(within(path, root) for root in writable)


def _make_directory(path: Path, *, parents: bool = False) -> None:
    """An empty directory at ``path``, so that it can be kept read-only: ``.tether`` (git does
    not show an empty directory; tether reads the workspace's configuration and memory files
    there), or one of tether's own."""
    try:
        path.mkdir(mode=0o700 if parents else 0o777, parents=parents)
    except FileExistsError:
        pass
    except OSError as exc:
        logger.debug("cannot make %s: %s", path, exc)


MAX_LINKS = 40  # symbolic links followed in one path, as the kernel does


def resolve(path: str) -> tuple[str, list[str]]:
    """The real path of the absolute ``path`` (as :func:`os.path.realpath` finds it, missing
    components taken as they are) and the symbolic links met on the way, each named by its
    directory's real path and its own name."""
    links: list[str] = []
    parts = path.split("/")[::-1]  # a stack: the next component last
    current = "/"
    while parts:
        part = parts.pop()
        if part in ("", "."):
            continue
        if part == "..":
            current = os.path.dirname(current)
            continue
        candidate = os.path.join(current, part)
        try:
            target = os.readlink(candidate)
        except OSError:  # not a link, or missing: taken as it is
            current = candidate
            continue
        links.append(candidate)
        if len(links) > MAX_LINKS:  # a loop
            return os.path.realpath(path), links
        if target.startswith("/"):
            current = "/"
        parts.extend(target.split("/")[::-1])
    return current, links


@cache
def _installation() -> tuple[str, ...]:
    """The paths of tether's installation: the Python prefixes, tether's package and the
    interpreter."""
    import tether

    paths = [sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix, sys.executable]
    paths.append(os.path.dirname(tether.__file__))
    return tuple(dict.fromkeys(os.path.abspath(path) for path in paths))


def _import_path() -> list[str]:
    """The entries of tether's ``sys.path`` (the directories, zip files and the like it may
    still import modules from), to be kept only where they lie in a writable path: a module
    planted there (``src/pathspec.py`` with ``PYTHONPATH=src``) would run in tether, unconfined,
    on its next import of that name. One that holds a writable path is no threat to it (the
    workspace's own name is never imported), so it is not protected for that."""
    return [os.path.abspath(entry or os.curdir) for entry in sys.path]


def hard_links_refusal(policy: SandboxPolicy, workspace: Path) -> str | None:
    """Why a command must not run under ``policy`` in ``workspace``, or None: a file that runs
    code or steers tether (:func:`tether.tools.guarded.steering_files`: ``.git/config``, a
    hook, a file under ``.tether``) has a second name (a hard link, ``cp -al``), which neither
    a read-only mount nor Landlock can see: a command could rewrite the file through it. Only
    a command that may write somewhere besides its own ``TMPDIR`` is refused."""
    if not policy.confines or (policy.mode != "workspace-write" and not policy.writable):
        return None
    linked = hard_linked(workspace)
    if not linked:
        return None
    root = os.path.realpath(workspace)
    names = [os.path.relpath(path, root) if within(path, root) else path for path in linked]
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    first = names[0]
    return (
        f"refused: {shown} {'has' if len(names) == 1 else 'have'} another hard link (a second "
        "name elsewhere, as a `cp -al` copy makes), through which a command could rewrite what "
        "git or tether runs or reads, out of the sandbox's sight; no command runs until the "
        "user breaks the link outside the sandbox, by copying the file over itself: "
        f"`cp -p {first} {first}.new && mv {first}.new {first}`"
    )


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
        if directory == "/" or (home and within(home, directory)):
            continue
        yield directory


def _home_files(environ: Mapping[str, str]) -> list[str]:
    home = environ.get("HOME")
    return [os.path.join(home, name) for name in HOME_READABLE] if home else []


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
