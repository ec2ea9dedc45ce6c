"""Killing a whole process tree: the process group, and on Linux the descendants that left it.

A command started in its own session (``start_new_session=True``) leads a process group that its
children join unless they start their own (``setsid``, a shell's job control). To leave nothing
running, :func:`kill_tree` first stops (``SIGSTOP``) the group and every process of the tree it
finds, walking again until no new one appears (a stopped process cannot fork), then kills them all
with ``SIGKILL``. Where there is no ``/proc``, the group is all it reaches.

On Linux it finds the tree two ways: the descendants of the leader, by the parent links in
``/proc/*/stat``; and the processes whose environment carries the command's mark
(:data:`MARK_VARIABLE`, set to a random :func:`new_mark` when it is started, and inherited). The
mark finds what the parent links lose: a process whose parent exited is re-parented away from the
tree (to init or the nearest subreaper), and one that called ``setsid`` is out of the group. A
process that detaches *and* drops the variable (``env -i``) cannot be found.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
from pathlib import Path

_PROC = Path("/proc")
_MAX_ROUNDS = 16
MARK_VARIABLE = "TETHER_COMMAND_ID"


def new_mark() -> str:
    """A value for :data:`MARK_VARIABLE` that tells one command's processes from all others."""
    return secrets.token_hex(16)


def kill_tree(leader: int, mark: str | None = None, *, leader_exited: bool = False) -> None:
    """``SIGKILL`` the process group ``leader`` leads, every descendant of ``leader`` and every
    process marked with ``mark``. Once the leader has exited (and was reaped: its pid may be
    reused), its descendants are not looked for: it has none left."""
    _signal_group(leader, signal.SIGSTOP)
    found: set[int] = set()
    for _ in range(_MAX_ROUNDS):
        new = (set() if leader_exited else descendants(leader)) | marked(mark)
        new -= found
        if not new:
            break
        for pid in new:
            _signal(pid, signal.SIGSTOP)
        found |= new
    _signal_group(leader, signal.SIGKILL)
    for pid in found:
        _signal(pid, signal.SIGKILL)


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` in the parent tree (``/proc``; empty elsewhere)."""
    children: dict[int, list[int]] = {}
    for entry in _processes():
        parent = _parent_of(entry)
        if parent is not None:
            children.setdefault(parent, []).append(int(entry.name))
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
            environ = (process / "environ").read_bytes()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if entry in environ.split(b"\0"):
            found.add(int(process.name))
    return found


def is_alive(pid: int) -> bool:
    """Whether ``pid`` names a process that is running (a zombie counts as gone)."""
    try:
        text = (_PROC / str(pid) / "stat").read_text()
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


def _processes() -> list[Path]:
    try:
        return [entry for entry in _PROC.iterdir() if entry.name.isdigit()]
    except OSError:
        return []


def _parent_of(entry: Path) -> int | None:
    try:
        text = (entry / "stat").read_text()
    except OSError:  # gone meanwhile, or not ours to read
        return None
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after the last
    fields = text.rpartition(")")[2].split()
    try:
        return int(fields[1])
    except (IndexError, ValueError):
        return None


def _signal_group(leader: int, signum: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(leader, signum)


def _signal(pid: int, signum: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signum)
