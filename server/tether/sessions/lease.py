"""Run leases: which run owns a session, kept in the store so that every process sharing it agrees.

A run claims its session's lease (:meth:`SessionStore.claim_run`) before it records anything,
renews it while it lives (every third of the lease), and releases it when it ends, whatever way.
The lease names its run and its *holder*, the process that runs it (:func:`process_holder`), and
lasts until ``until``; a lease past ``until`` is expired and protects nothing, so a process that
dies (SIGKILL) leaves a lease that another process may claim at most one lease later.

While a lease is live, only its run writes to the session's history: an append without the run's
id, a clear, a delete, a fork at a message of the run, and another claim are refused
(``SessionBusy``), and a sweep skips the session. A run whose lease is no longer live (renewal
came too late, or found another holder) has its appends refused too (``RunLeaseLost``).

Time is the store's clock in the process that checks (hosts sharing a database need their clocks
in step: a skew of S seconds shortens or lengthens leases by S).
"""

from __future__ import annotations

import os
import secrets
import socket
from dataclasses import dataclass
from datetime import datetime, timedelta

from tether.protocol import SessionBusy

DEFAULT_LEASE = timedelta(seconds=10)
"""How long a lease lasts without renewal (``sessions.lease``); renewed every third of it."""

_holder: tuple[int, str] | None = None


def process_holder() -> str:
    """This process's identity as a lease holder: host, pid and a random token (pids are reused,
    and a forked child is another process)."""
    global _holder
    pid = os.getpid()
    if _holder is None or _holder[0] != pid:
        _holder = (pid, f"{socket.gethostname()}:{pid}:{secrets.token_hex(6)}")
    return _holder[1]


@dataclass(frozen=True, slots=True)
class Lease:
    """A run's hold on a session until ``until``."""

    run_id: str
    holder: str
    until: datetime

    def live(self, now: datetime) -> bool:
        return now <= self.until

    def busy(self, session_id: str, me: str) -> SessionBusy:
        """The refusal of a write (or a claim) that this lease blocks, as ``me`` reports it."""
        if self.holder == me:
            return SessionBusy(session_id, self.run_id, "this-process")
        return SessionBusy(session_id, self.run_id, "another-process")
