"""Finding a command's processes from outside, for tests that check nothing of it survives.

A command runs in a pid namespace of its own where the kernel allows it, so the pids it prints
(``$!``, ``$$``) are not those of the processes outside. Tests tag the processes instead: the
command exports ``TETHER_TEST_TAG=<tag>`` (inherited by everything it starts), or runs a program
with an argument found nowhere else (:func:`unique_seconds`), and the tests look for them in
``/proc``. Waits poll with a bound, never a bare sleep.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import time
from collections.abc import Callable
from pathlib import Path

from tether.tools.processes import is_alive

TAG_VARIABLE = "TETHER_TEST_TAG"
_PROC = Path("/proc")


def new_tag() -> str:
    return secrets.token_hex(8)


def unique_seconds() -> str:
    """A duration for ``sleep`` no other process on the machine has on its command line."""
    return f"300.{secrets.randbelow(10**9):09d}"


def tagged(tag: str) -> set[int]:
    """The live processes whose environment holds ``TETHER_TEST_TAG=tag``."""
    entry = f"{TAG_VARIABLE}={tag}".encode()
    return {pid for pid in _pids() if entry in _read(pid, "environ").split(b"\0") and is_alive(pid)}


def with_argument(argument: str) -> set[int]:
    """The live processes with ``argument`` on their command line."""
    word = argument.encode()
    return {pid for pid in _pids() if word in _read(pid, "cmdline").split(b"\0") and is_alive(pid)}


def detaching(tag: str, seconds: str, hidden: str) -> str:
    """A shell script that starts six processes which try every way to outlive it: one holding
    the output, one that closed it, one in a session of its own, one under ``nohup``, the
    orphan of a double fork, and one in a new session with an empty environment (found by its
    argument ``hidden``, not by the tag)."""
    return (
        f"export {TAG_VARIABLE}={tag}\n"
        f"sleep {seconds} &\n"
        f"sleep {seconds} >/dev/null 2>&1 &\n"
        f"setsid sleep {seconds} >/dev/null 2>&1 &\n"
        f"nohup sleep {seconds} >/dev/null 2>&1 &\n"
        f"(sleep {seconds} >/dev/null 2>&1 &)\n"
        f"setsid env -i sleep {hidden} >/dev/null 2>&1 &\n"
    )


async def appear(find: Callable[[], set[int]], count: int, within: float = 20.0) -> set[int]:
    """The processes ``find()`` returns, once there are ``count`` of them (bounded poll)."""
    deadline = time.monotonic() + within
    while len(found := find()) < count:
        assert time.monotonic() < deadline, f"{count} processes did not appear"
        await asyncio.sleep(0.02)
    return found


async def gone(pids: set[int] | list[int], within: float = 20.0) -> bool:
    """Whether every pid stops running within ``within`` seconds (a bounded poll)."""
    deadline = time.monotonic() + within
    while any(is_alive(pid) for pid in pids):
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


def kill_all(pids: set[int] | list[int]) -> None:
    """Clean up after a failed test: kill what is still there."""
    for pid in pids:
        try:
            os.kill(pid, 9)
        except (ProcessLookupError, PermissionError):
            pass


def _pids() -> list[int]:
    return [int(entry.name) for entry in _PROC.iterdir() if entry.name.isdigit()]


def _read(pid: int, name: str) -> bytes:
    try:
        return (_PROC / str(pid) / name).read_bytes()
    except OSError:
        return b""
