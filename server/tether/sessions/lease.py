"""Run leases: which run owns a session, kept in the store so that every process sharing it agrees.

A run claims its session's lease (:meth:`SessionStore.claim_run`) before it records anything,
renews it while it lives (every third of the lease), and releases it when it ends, whatever way.
The lease names its run and its *holder*, the process that runs it (:func:`process_holder`), and
lasts until ``until``; a lease past ``until`` is expired and protects nothing, so a process that
dies (SIGKILL) on another host leaves a lease that another process may claim at most one lease
later.

A holder that was a process of *this* host, and no longer runs, holds nothing either
(:meth:`Lease.holder_gone`): its lease is taken over at once, so a server restarted after a crash
carries on with the sessions the dead one was running. The holder names its host (boot id,
hostname and pid namespace) and its process (pid and start time: a pid that was reused by another
process is not mistaken for the holder). A holder in another form (written by an older tether),
or of another host, is never judged: its lease expires by time.

While a lease is live, only its run writes to the session's history: an append without the run's
id, a clear, a delete, a fork at a message of the run, and another claim are refused
(``SessionBusy``), and a sweep skips the session. A run whose lease is no longer live (renewal
came too late, or found another holder) has its appends refused too (``RunLeaseLost``).

Time is the store's clock in the process that checks (hosts sharing a database need their clocks
in step: a skew of S seconds shortens or lengthens leases by S).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache
from pathlib import Path

import orjson

from tether.protocol import SessionBusy

DEFAULT_LEASE = timedelta(seconds=10)
"""How long a lease lasts without renewal (``sessions.lease``); renewed every third of it."""

_holder: tuple[int, str] | None = None


def process_holder() -> str:
    """This process's identity as a lease holder (see :class:`Holder`); a forked child is
    another process, with a holder of its own."""
    global _holder
    pid = os.getpid()
    if _holder is None or _holder[0] != pid:
        _holder = (pid, Holder.of(pid).encode())
    return _holder[1]


@dataclass(frozen=True, slots=True)
class Holder:
    """A process as a lease names it: its host, its pid and start time, and a random token (two
    processes of different hosts may share a pid and a start time)."""

    host: str
    pid: int
    start: int
    token: str

    @classmethod
    def of(cls, pid: int) -> Holder:
        """The running process ``pid`` of this host (its start time read now)."""
        start = None
        with contextlib.suppress(OSError, ValueError, IndexError):
            start = _start_time(pid)
        return cls(this_host() or "", pid, -1 if start is None else start, secrets.token_hex(6))

    def encode(self) -> str:
        return orjson.dumps(
            {"host": self.host, "pid": self.pid, "start": self.start, "token": self.token}
        ).decode()

    @classmethod
    def decode(cls, text: str) -> Holder | None:
        """The holder ``text`` names; None for one in another form (an older tether's
        ``host:pid:token``), which is never judged gone."""
        try:
            fields = orjson.loads(text)
            holder = cls(fields["host"], fields["pid"], fields["start"], fields["token"])
        except (orjson.JSONDecodeError, TypeError, KeyError):
            return None
        if not isinstance(holder.host, str) or type(holder.pid) is not int or holder.pid <= 0:
            return None
        return holder if type(holder.start) is int else None

    def gone(self) -> bool:
        """Whether this is known to be a process of this host that no longer runs. False
        whenever that cannot be told (another host, a host or process that could not be read)."""
        host = this_host()
        if not host or self.host != host or self.start < 0:
            return False
        return not _runs(self.pid, self.start)


@cache
def this_host() -> str | None:
    """This host as holders name it: boot id, hostname and pid namespace (processes of
    containers on one machine share its boot id, not their pid namespace); None where any of
    them cannot be read (then no holder is ever judged gone)."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        return None
    return f"{boot} {namespace} {socket.gethostname()}"


def _start_time(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks after boot (field 22 of ``/proc/PID/stat``); None
    when it is a zombie (dead, not yet waited for). ``OSError`` when it cannot be read."""
    stat = Path(f"/proc/{pid}/stat").read_bytes()
    fields = stat[stat.rindex(b")") + 2 :].split()  # the name, in parentheses, may hold spaces
    if fields[0] in (b"Z", b"X"):
        return None
    return int(fields[19])


def _runs(pid: int, start: int) -> bool:
    """Whether the process ``pid`` that started at ``start`` still runs; True when that cannot
    be told (``/proc`` mounted with ``hidepid`` hides the processes of other users)."""
    try:
        os.kill(pid, 0)
        mine = True
    except ProcessLookupError:
        return False
    except PermissionError:
        mine = False  # it runs, as another user
    try:
        return _start_time(pid) == start
    except FileNotFoundError:
        return not mine  # one of mine ended just now; another user's may be hidden
    except (OSError, ValueError, IndexError):
        return True


@dataclass(frozen=True, slots=True)
class Lease:
    """A run's hold on a session until ``until``."""

    run_id: str
    holder: str
    until: datetime

    def live(self, now: datetime) -> bool:
        return now <= self.until

    def holder_gone(self) -> bool:
        """Whether the holder was a process of this host that no longer runs (see
        :meth:`Holder.gone`): its lease, live or not, protects nothing."""
        holder = Holder.decode(self.holder)
        return holder is not None and holder.gone()

    def blocks(self, now: datetime) -> bool:
        """Whether the lease protects its session at ``now``: live, and its holder not gone."""
        return self.live(now) and not self.holder_gone()

    def busy(self, session_id: str, me: str) -> SessionBusy:
        """The refusal of a write (or a claim) that this lease blocks, as ``me`` reports it."""
        if self.holder == me:
            return SessionBusy(session_id, self.run_id, "this-process")
        return SessionBusy(session_id, self.run_id, "another-process")
