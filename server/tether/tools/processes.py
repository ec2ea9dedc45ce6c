"""Finding and killing a whole process tree on Linux (``/proc``), and a process group elsewhere.

Two users: the command wrapper (:mod:`tether.tools.wrapper`), which kills what a command leaves
running from inside its own tree (as the pid 1 of the command's pid namespace, or as a
subreaper), and ``run_command`` itself, as the last resort when the wrapper could not do it
(another OS, or a wrapper that did not end when asked).

:func:`kill_found` freezes before it kills: it stops (``SIGSTOP``) every process it finds,
looking again until no new one appears (a stopped process cannot fork), then kills them all with
``SIGKILL``. :func:`kill_tree` finds the tree two ways: the descendants of the leader, by the
parent links in ``/proc/PID/stat``; and the processes whose environment carries the command's
mark (:data:`MARK_VARIABLE`, set to a random :func:`new_mark` when it is started, and
inherited). The mark finds what the parent links lose when no wrapper keeps the tree together: a
process whose parent exited is re-parented away from the tree, and one that called ``setsid``
is out of the group.

The module is part of the wrapper, which runs in a fresh interpreter before every command: it
imports nothing but ``os`` and the builtin ``_signal`` (``signal`` would import ``enum``).
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # no stub: the builtin under ``signal``
import os

TYPE_CHECKING = False  # not imported from typing: the wrapper imports nothing it need not
if TYPE_CHECKING:
    from collections.abc import Callable

SIGKILL: int = getattr(_signal, "SIGKILL", 9)  # Windows has neither; nothing here runs there
SIGSTOP: int = getattr(_signal, "SIGSTOP", SIGKILL)
MARK_VARIABLE = "TETHER_COMMAND_ID"
_PROC = "/proc"
_MAX_ROUNDS = 16


def new_mark() -> str:
    """A value for :data:`MARK_VARIABLE` that tells one command's processes from all others."""
    import secrets

    return secrets.token_hex(16)


def kill_tree(leader: int, mark: str | None = None, *, leader_exited: bool = False) -> None:
    """``SIGKILL`` the process group ``leader`` leads, every descendant of ``leader`` and every
    process marked with ``mark``. Once the leader has exited (and was reaped: its pid may be
    reused), its descendants are not looked for: it has none left."""
    _signal_group(leader, SIGSTOP)

    def find() -> set[int]:
        return (set() if leader_exited else descendants(leader)) | marked(mark)

    kill_found(find)
    _signal_group(leader, SIGKILL)


def kill_found(find: Callable[[], set[int]]) -> set[int]:
    """Stop every process ``find`` returns, asking again until it finds no new one, then kill
    them all; returns those found alive."""
    found: set[int] = set()
    for _ in range(_MAX_ROUNDS):
        new = {pid for pid in find() - found if is_alive(pid)}
        if not new:
            break
        for pid in new:
            _send(pid, SIGSTOP)
        found |= new
    for pid in found:
        _send(pid, SIGKILL)
    return found


def descendants(pid: int) -> set[int]:
    """Every process below ``pid`` in the parent tree (``/proc``; empty elsewhere)."""
    children: dict[int, list[int]] = {}
    for process in _processes():
        parent = _parent_of(process)
        if parent is not None:
            children.setdefault(parent, []).append(process)
    found: set[int] = set()
    pending = [pid]
    while pending:
        for child in children.get(pending.pop(), []):
            if child not in found:
                found.add(child)
                pending.append(child)
    return found


def marked(mark: str | None) -> set[int]:
    """Every live process whose environment has ``MARK_VARIABLE=mark`` (``/proc``; empty
    elsewhere, and for processes this user may not inspect)."""
    if not mark:
        return set()
    entry = f"{MARK_VARIABLE}={mark}".encode()
    found: set[int] = set()
    for process in _processes():
        try:
            with open(f"{_PROC}/{process}/environ", "rb") as file:
                environ = file.read()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if entry in environ.split(b"\0"):
            found.add(process)
    return found


def is_alive(pid: int) -> bool:
    """Whether ``pid`` names a process that is running (a zombie counts as gone)."""
    try:
        with open(f"{_PROC}/{pid}/stat") as file:
            text = file.read()
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return text.rpartition(")")[2].split()[0] not in ("Z", "X")


def _processes() -> list[int]:
    try:
        return [int(name) for name in os.listdir(_PROC) if name.isdigit()]
    except OSError:
        return []


def _parent_of(pid: int) -> int | None:
    try:
        with open(f"{_PROC}/{pid}/stat") as file:
            text = file.read()
    except OSError:  # gone meanwhile, or not ours to read
        return None
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after the last
    fields = text.rpartition(")")[2].split()
    try:
        return int(fields[1])
    except (IndexError, ValueError):
        return None


def _signal_group(leader: int, signum: int) -> None:
    try:
        os.killpg(leader, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _send(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass
