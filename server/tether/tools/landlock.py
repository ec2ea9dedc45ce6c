"""Linux Landlock through ``ctypes``, and the exec wrapper that confines one command with it.

Run as a script, this file restricts its own process and then ``exec``\\ s the command::

    python -I -S landlock.py [--read PATH]... [--write PATH]... [--network] -- PROGRAM [ARG]...

``--read`` paths may be read and executed, ``--write`` paths also written (files created,
removed, renamed, truncated); nothing else of the filesystem can be opened. Without
``--network``, binding and connecting TCP sockets is refused (Landlock ABI 4). Abstract unix
sockets and signals are scoped to the command's own processes (ABI 6), and Landlock forbids
``ptrace`` of any process outside the domain, which also makes ``/proc/PID/environ``, ``mem``
and ``fd`` of those processes unreadable. The restriction is inherited across ``fork`` and
``exec`` and cannot be lifted.

Why a wrapper process and not ``preexec_fn``: ``landlock_restrict_self`` confines the calling
thread, so it must run in the child between ``fork`` and ``exec``. ``preexec_fn`` runs Python
there, in a copy of a multi-threaded server whose other threads' locks (the allocator's, the
import lock, logging's) may be held forever: Python documents it as unsafe with threads. A
fresh interpreter that confines itself and then ``exec``\\ s has no such hazard; it costs about
20 ms of CPU per command here (``bench/sandbox_bench.py``: ``true`` takes 1 ms unconfined, 21 ms
through the wrapper, 5 ms with a ``preexec_fn``). To keep that start short, this module imports
the standard library only (``-I -S``: no site-packages, nothing of tether) and parses its
arguments by hand.

The wrapper never runs a command unconfined: if the ruleset cannot be built or enforced, it
exits with status 126 and says why on stderr. Availability is probed beforehand by tether
(:func:`abi_version`, :func:`probe`), which falls back to unconfined commands and says so.

Only the three Landlock system calls and ``prctl(PR_SET_NO_NEW_PRIVS)`` are used; their
numbers (444 to 446) are the same on every architecture that has them.
"""

from __future__ import annotations

import ctypes
import os
import stat
import sys

TYPE_CHECKING = False  # not imported from typing: the wrapper imports nothing it need not
if TYPE_CHECKING:
    from collections.abc import Sequence

SYS_LANDLOCK_CREATE_RULESET = 444
SYS_LANDLOCK_ADD_RULE = 445
SYS_LANDLOCK_RESTRICT_SELF = 446
PR_SET_NO_NEW_PRIVS = 38
PR_CAPBSET_DROP = 24
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
LINUX_CAPABILITY_VERSION_3 = 0x20080522
CREATE_RULESET_VERSION = 1 << 0
RULE_PATH_BENEATH = 1

# Filesystem rights (include/uapi/linux/landlock.h), by the ABI that introduced them.
FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
FS_REMOVE_DIR = 1 << 4
FS_REMOVE_FILE = 1 << 5
FS_MAKE_CHAR = 1 << 6
FS_MAKE_DIR = 1 << 7
FS_MAKE_REG = 1 << 8
FS_MAKE_SOCK = 1 << 9
FS_MAKE_FIFO = 1 << 10
FS_MAKE_BLOCK = 1 << 11
FS_MAKE_SYM = 1 << 12
FS_REFER = 1 << 13  # ABI 2
FS_TRUNCATE = 1 << 14  # ABI 3
FS_IOCTL_DEV = 1 << 15  # ABI 5
NET_BIND_TCP = 1 << 0  # ABI 4
NET_CONNECT_TCP = 1 << 1  # ABI 4
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1  # ABI 6

FS_READ = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR | FS_IOCTL_DEV
FS_WRITE = (
    FS_READ
    | FS_WRITE_FILE
    | FS_REMOVE_DIR
    | FS_REMOVE_FILE
    | FS_MAKE_CHAR
    | FS_MAKE_DIR
    | FS_MAKE_REG
    | FS_MAKE_SOCK
    | FS_MAKE_FIFO
    | FS_MAKE_BLOCK
    | FS_MAKE_SYM
    | FS_REFER
    | FS_TRUNCATE
)
# The rights that apply to a file (a rule on a file may hold no others).
FS_FILE = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV

EXIT_NOT_CONFINED = 126
EXIT_CANNOT_RUN = 126
EXIT_NOT_FOUND = 127


class RulesetAttr(ctypes.Structure):
    """``struct landlock_ruleset_attr`` as of ABI 6; older kernels accept it while the fields
    they do not know are zero."""

    _fields_ = (
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    )


class PathBeneathAttr(ctypes.Structure):
    """``struct landlock_path_beneath_attr``: packed, 12 bytes."""

    _pack_ = 1
    _fields_ = (("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32))


class CapHeader(ctypes.Structure):
    """``struct __user_cap_header_struct``."""

    _fields_ = (("version", ctypes.c_uint32), ("pid", ctypes.c_int))


class CapData(ctypes.Structure):
    """``struct __user_cap_data_struct`` (two of them for version 3: 64 capabilities)."""

    _fields_ = (
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    )


class LandlockError(OSError):
    """A Landlock call failed (``errno`` says how)."""


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    libc.prctl.restype = ctypes.c_int
    libc.prctl.argtypes = (ctypes.c_int, *[ctypes.c_ulong] * 4)
    return libc


def _syscall(libc: ctypes.CDLL, number: int, *args: object) -> int:
    # Every argument is passed as a full machine word (a C ``long`` or a pointer).
    words = [ctypes.c_long(arg) if isinstance(arg, int) else arg for arg in args]
    result = int(libc.syscall(ctypes.c_long(number), *words))
    if result < 0:
        error = ctypes.get_errno()
        raise LandlockError(error, os.strerror(error))
    return result


def abi_version() -> int:
    """The kernel's Landlock ABI version; 0 where there is none (not Linux, a kernel without
    Landlock, or Landlock not enabled at boot)."""
    if not sys.platform.startswith("linux"):
        return 0
    try:
        return _syscall(_libc(), SYS_LANDLOCK_CREATE_RULESET, None, 0, CREATE_RULESET_VERSION)
    except (OSError, AttributeError):
        return 0


def handled(abi: int, *, network: bool) -> RulesetAttr:
    """What a ruleset restricts on a kernel of ABI ``abi``: every filesystem right it knows,
    TCP bind and connect unless ``network``, abstract unix sockets and signals."""
    fs = FS_WRITE
    if abi < 2:
        fs &= ~FS_REFER
    if abi < 3:
        fs &= ~FS_TRUNCATE
    if abi < 5:
        fs &= ~FS_IOCTL_DEV
    net = 0 if network or abi < 4 else NET_BIND_TCP | NET_CONNECT_TCP
    scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0
    return RulesetAttr(handled_access_fs=fs, handled_access_net=net, scoped=scoped)


def probe(abi: int) -> None:
    """Create (and close) the ruleset a command would get: raises :class:`LandlockError` when
    the kernel refuses it."""
    libc = _libc()
    attr = handled(abi, network=False)
    fd = _syscall(libc, SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.sizeof(attr), 0)
    os.close(fd)


def restrict(read: Sequence[str], write: Sequence[str], *, network: bool) -> None:
    """Confine this process (one thread: call it before any other starts) and whatever it
    runs next. Paths that cannot be opened (missing, or not this user's to reach) are skipped;
    a rule on a file gets its file rights."""
    abi = abi_version()
    if abi < 1:
        raise LandlockError(0, "Landlock is not available on this system")
    libc = _libc()
    attr = handled(abi, network=network)
    ruleset = _syscall(
        libc, SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.sizeof(attr), 0
    )
    try:
        for paths, access in ((read, FS_READ), (write, FS_WRITE)):
            for path in paths:
                _allow(libc, ruleset, path, access & attr.handled_access_fs)
        drop_capabilities(libc)
        _prctl(libc, PR_SET_NO_NEW_PRIVS, 1, "PR_SET_NO_NEW_PRIVS")
        _syscall(libc, SYS_LANDLOCK_RESTRICT_SELF, ruleset, 0)
    finally:
        os.close(ruleset)


def drop_capabilities(libc: ctypes.CDLL) -> None:
    """Empty the capability bounding, ambient, inheritable, permitted and effective sets, so
    that what runs next holds no capability even as root. Landlock alone does not do for a
    privileged process: holding ``CAP_SYS_ADMIN`` (or some other capability), a confined root
    process could still read ``/proc/PID/environ`` of processes outside its domain (measured
    on Linux 6.18), while one without capabilities cannot. Without ``CAP_SETPCAP`` the bounding
    set cannot be emptied: that is refused for root, and harmless for anyone else
    (``no_new_privs`` keeps ``exec`` from granting capabilities)."""
    _prctl(libc, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, "PR_CAP_AMBIENT")
    try:
        with open("/proc/sys/kernel/cap_last_cap") as file:
            last = int(file.read())
    except (OSError, ValueError):
        last = 63
    for capability in range(last + 1):
        try:
            _prctl(libc, PR_CAPBSET_DROP, capability, "PR_CAPBSET_DROP")
        except LandlockError:
            if os.geteuid() == 0:
                raise
            break
    header = CapHeader(version=LINUX_CAPABILITY_VERSION_3, pid=0)
    if libc.capset(ctypes.byref(header), ctypes.byref((CapData * 2)())) != 0:
        error = ctypes.get_errno()
        raise LandlockError(error, f"capset: {os.strerror(error)}")


def _prctl(libc: ctypes.CDLL, option: int, argument: int, name: str) -> None:
    if libc.prctl(option, argument, 0, 0, 0) != 0:
        error = ctypes.get_errno()
        raise LandlockError(error, f"prctl({name}): {os.strerror(error)}")


def _allow(libc: ctypes.CDLL, ruleset: int, path: str, access: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:  # missing, or out of this user's reach anyway
        return
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            access &= FS_FILE
        rule = PathBeneathAttr(allowed_access=access, parent_fd=fd)
        try:
            _syscall(libc, SYS_LANDLOCK_ADD_RULE, ruleset, RULE_PATH_BENEATH, ctypes.byref(rule), 0)
        except LandlockError as exc:
            raise LandlockError(exc.errno, f"{path}: {exc.strerror}") from None
    finally:
        os.close(fd)


def _restore_signals() -> None:
    """Give ``SIGPIPE`` and ``SIGXFSZ`` back their default action, which Python ignores and an
    ignored signal stays ignored across ``exec`` (``subprocess`` does the same for its children:
    ``restore_signals``). ``_signal`` is the builtin under ``signal``, which would import
    ``enum`` for nothing."""
    import _signal  # type: ignore[import-not-found]  # no stub: a builtin module

    for name in ("SIGPIPE", "SIGXFSZ"):
        number = getattr(_signal, name, None)
        if number is not None:
            _signal.signal(number, _signal.SIG_DFL)


def parse(args: Sequence[str]) -> tuple[list[str], list[str], bool, list[str]]:
    """The wrapper's arguments: (read paths, write paths, network, command)."""
    read: list[str] = []
    write: list[str] = []
    network = False
    index = 0
    while index < len(args):
        arg = args[index]
        if arg == "--":
            return read, write, network, list(args[index + 1 :])
        if arg == "--network":
            network = True
        elif arg in ("--read", "--write") and index + 1 < len(args):
            (read if arg == "--read" else write).append(args[index + 1])
            index += 1
        else:
            raise ValueError(f"unexpected argument {arg!r}")
        index += 1
    raise ValueError("no command given (expected -- PROGRAM [ARG]...)")


def main(args: Sequence[str]) -> int:
    """Confine this process, then become the command; returns only when that fails."""
    try:
        read, write, network, command = parse(args)
        if not command:
            raise ValueError("no command given")
        restrict(read, write, network=network)
    except (OSError, ValueError) as exc:
        print(f"tether: the command was not run: cannot confine it: {exc}", file=sys.stderr)
        return EXIT_NOT_CONFINED
    _restore_signals()
    try:
        os.execvp(command[0], command)
    except FileNotFoundError:
        print(f"tether: command not found: {command[0]}", file=sys.stderr)
        return EXIT_NOT_FOUND
    except OSError as exc:
        print(f"tether: cannot run {command[0]}: {exc.strerror}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    return EXIT_CANNOT_RUN  # not reached: execvp returns only by raising


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
