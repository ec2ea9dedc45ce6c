"""Linux Landlock through ``ctypes``: the rules that confine one command.

The command wrapper (:mod:`tether.tools.wrapper`) calls :func:`restrict` in the process that
becomes the command, after its namespaces are set up and just before it ``exec``\\ s: ``read``
paths may be read and executed, ``write`` paths also written (files created, removed, renamed,
truncated), ``listable`` directories only listed; nothing else of the filesystem can be opened.
Without ``network``, ``bind`` and ``connect`` of TCP sockets are refused (Landlock ABI 4); that
alone is no "no network" (a TCP Fast Open ``sendto`` connects, a ``listen`` binds a port, other
sockets are not seen): the seccomp filter of :mod:`tether.tools.seccomp` refuses them. Abstract
unix sockets and signals are scoped to the command's own processes (ABI 6), and Landlock forbids
``ptrace`` of any process outside the domain, which also makes ``/proc/PID/environ``, ``mem``
and ``fd`` of those processes unreadable. The restriction is inherited across ``fork`` and
``exec`` and cannot be lifted.

Where no mount namespace can make a path read-only, :func:`carve` expresses "writable, except
these paths" with Landlock's allow-list alone (see its docstring for what that costs).

tether itself uses :func:`abi_version` and :func:`probe` to learn whether Landlock is there.
Only the three Landlock system calls (numbers 444 to 446, the same on every architecture that has
them), ``prctl`` and ``capset`` are used, through :mod:`tether.tools.linux`. Part of the wrapper:
standard library only.
"""

from __future__ import annotations

import ctypes
import os
import stat
import sys

from tether.tools.linux import check, libc, prctl, syscall, within

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
FIRST_NETWORK_ABI = 4  # TCP bind and connect rules
# The rights that apply to a file (a rule on a file may hold no others).
FS_FILE = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV


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


def _syscall(number: int, *args: object, what: str = "landlock") -> int:
    return check(syscall(number, *args), what, LandlockError)


def abi_version() -> int:
    """The kernel's Landlock ABI version; 0 where there is none (not Linux, a kernel without
    Landlock, or Landlock not enabled at boot)."""
    if not sys.platform.startswith("linux"):
        return 0
    try:
        return _syscall(SYS_LANDLOCK_CREATE_RULESET, None, 0, CREATE_RULESET_VERSION)
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
    net = 0 if network or abi < FIRST_NETWORK_ABI else NET_BIND_TCP | NET_CONNECT_TCP
    scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0
    return RulesetAttr(handled_access_fs=fs, handled_access_net=net, scoped=scoped)


def probe(abi: int) -> None:
    """Create (and close) the ruleset a command would get: raises :class:`LandlockError` when
    the kernel refuses it."""
    attr = handled(abi, network=False)
    fd = _syscall(SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.sizeof(attr), 0)
    os.close(fd)


def restrict(
    read: Sequence[str],
    write: Sequence[str],
    *,
    network: bool,
    listable: Sequence[str] = (),
) -> None:
    """Confine this process (one thread: call it before any other starts) and whatever it
    runs next. Paths that cannot be opened (missing, or not this user's to reach) are skipped;
    a rule on a file gets its file rights."""
    abi = abi_version()
    if abi < 1:
        raise LandlockError(0, "Landlock is not available on this system")
    attr = handled(abi, network=network)
    ruleset = _syscall(SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.sizeof(attr), 0)
    try:
        for paths, access in ((listable, FS_READ_DIR), (read, FS_READ), (write, FS_WRITE)):
            for path in paths:
                _allow(ruleset, path, access & attr.handled_access_fs)
        drop_capabilities()
        prctl(PR_SET_NO_NEW_PRIVS, 1, "PR_SET_NO_NEW_PRIVS", LandlockError)
        _syscall(SYS_LANDLOCK_RESTRICT_SELF, ruleset, 0, what="landlock_restrict_self")
    finally:
        os.close(ruleset)


def carve(write: Sequence[str], protect: Sequence[str]) -> tuple[list[str], list[str]]:
    """Rules that make ``write`` writable except the ``protect`` paths inside them, as
    (read, write) path lists for :func:`restrict`. The paths of ``write`` are real, and so are
    the directories holding those of ``protect``: a protected path is a file or directory kept
    read-only, or a symbolic link or a missing path kept as it is (its directory is carved, so
    nothing can be made in its place, and it is granted nothing).

    Landlock only grants, and a right granted on a directory holds for everything beneath it, so
    a writable directory that holds a protected path is granted reading only, and each of its
    entries is granted writing on its own, except the protected path and a directory on the way
    to one, which is carved the same way. The price: in such a directory (the workspace root,
    when it holds ``.git``) nothing can be created, removed or renamed, though its files can
    still be written in place. Symbolic links get no rule (what they lead to is checked on its
    own); nor do sockets, FIFOs or devices. A writable path inside a protected one is read-only.
    """
    read: list[str] = []
    granted: list[str] = []
    for root in write:
        if any(within(root, path) for path in protect):
            read.append(root)
        else:
            _carve(root, [path for path in protect if within(path, root)], read, granted)
    return read, granted


def _carve(directory: str, inner: list[str], read: list[str], granted: list[str]) -> None:
    if not inner:
        granted.append(directory)
        return
    read.append(directory)
    if directory in inner:
        return
    try:
        entries = list(os.scandir(directory))
    except OSError:  # not a directory, or not ours to list: nothing in it is granted
        return
    for entry in entries:
        below = [path for path in inner if within(path, entry.path)]
        if entry.is_dir(follow_symlinks=False):
            _carve(entry.path, below, read, granted)
        elif not below and entry.is_file(follow_symlinks=False):
            granted.append(entry.path)


def drop_capabilities() -> None:
    """Empty the capability bounding, ambient, inheritable, permitted and effective sets, so
    that what runs next holds no capability even as root. Landlock alone does not do for a
    privileged process: holding ``CAP_SYS_ADMIN`` (or some other capability), a confined root
    process could still read ``/proc/PID/environ`` of processes outside its domain (measured
    on Linux 6.18), while one without capabilities cannot. Without ``CAP_SETPCAP`` the bounding
    set cannot be emptied: that is refused for root, and harmless for anyone else
    (``no_new_privs`` keeps ``exec`` from granting capabilities)."""
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, "PR_CAP_AMBIENT", LandlockError)
    try:
        with open("/proc/sys/kernel/cap_last_cap") as file:
            last = int(file.read())
    except (OSError, ValueError):
        last = 63
    for capability in range(last + 1):
        try:
            prctl(PR_CAPBSET_DROP, capability, "PR_CAPBSET_DROP", LandlockError)
        except LandlockError:
            if os.geteuid() == 0:
                raise
            break
    header = CapHeader(version=LINUX_CAPABILITY_VERSION_3, pid=0)
    data = (CapData * 2)()
    check(libc().capset(ctypes.byref(header), ctypes.byref(data)), "capset", LandlockError)


def _allow(ruleset: int, path: str, access: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:  # missing, or out of this user's reach anyway
        return
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            access &= FS_FILE
        rule = PathBeneathAttr(allowed_access=access, parent_fd=fd)
        _syscall(
            SYS_LANDLOCK_ADD_RULE, ruleset, RULE_PATH_BENEATH, ctypes.byref(rule), 0, what=path
        )
    finally:
        os.close(fd)
