"""The OS sandbox of commands: the policy, what it lets a command reach, and how it is applied.

A confined command is started through :mod:`tether.tools.landlock`, run as a script by the
Python that runs tether (``python -I -S landlock.py --read … --write … -- argv``): it restricts
itself with Landlock, drops every capability, and ``exec``\\ s the command, so the restriction
covers the command and everything it starts, and nothing of tether.

What a command may reach (Landlock is an allow-list; anything not listed cannot be opened):

- read and execute: the system directories of :data:`SYSTEM_READABLE` that exist, ``/proc``
  and ``/sys`` (Landlock keeps ``/proc/PID`` of processes outside the sandbox unreadable, once
  the command holds no capability), a few devices, the directories on ``PATH`` (not ``/`` nor
  ``$HOME`` or a directory above it), the Python installation running tether, git's
  configuration files in ``$HOME`` (so that git knows the user; its credential store
  ``~/.git-credentials`` is not among them), the workspace, and ``tools.sandbox_readable``;
- write: the workspace (``workspace-write`` only), a private temporary directory made for the
  command (``TMPDIR``, removed when it ends), ``/dev/null``, and ``tools.sandbox_writable``.

So the rest of ``$HOME`` (``~/.ssh``, ``~/.aws``, ``~/.config/tether``, tether's data directory
with the session database) and ``/tmp`` are out of reach. TCP ``bind`` and ``connect`` are
refused unless the network is allowed; signals and abstract unix sockets reach only the
command's own processes.

Where Landlock is missing (not Linux, an old kernel, Landlock not enabled), commands run as they
did without a sandbox: :func:`landlock_abi` logs a warning once and the tool says so.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Literal

logger = logging.getLogger(__name__)

SandboxMode = Literal["workspace-write", "read-only", "off"]
WRAPPER = str(Path(__file__).with_name("landlock.py"))

SYSTEM_READABLE = (
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc",
    "/opt",
    "/nix/store",
    "/proc",
    "/sys",
    "/dev/random",
    "/dev/urandom",
)
LINKED_FROM_ETC = ("/etc/resolv.conf", "/etc/hosts", "/etc/localtime")
DEVICES_WRITABLE = ("/dev/null", "/dev/zero", "/dev/full")
HOME_READABLE = (".gitconfig", ".config/git/config", ".config/git/ignore", ".config/git/attributes")
FIRST_NETWORK_ABI = 4  # TCP bind and connect rules


@dataclass(frozen=True, kw_only=True)
class SandboxPolicy:
    """How commands are confined (``tools.sandbox`` and the keys beside it)."""

    mode: SandboxMode = "workspace-write"
    network: bool = False  # TCP connections and listening sockets allowed
    readable: tuple[str, ...] = ()  # more paths commands may read (``~`` expanded)
    writable: tuple[str, ...] = ()  # more paths commands may write

    @property
    def confines(self) -> bool:
        """Whether commands are to be confined (and Landlock is there to do it)."""
        return self.mode != "off" and landlock_abi() > 0

    def describe(self) -> str:
        """The policy in effect, in a few words (shown with every command)."""
        if self.mode == "off":
            return "sandbox: off"
        abi = landlock_abi()
        if abi == 0:
            return "sandbox: none (Landlock is not available)"
        if self.network:
            network = "network allowed"
        elif abi < FIRST_NETWORK_ABI:
            network = f"network not restricted (Landlock ABI {abi})"
        else:
            network = "no network"
        return f"sandbox: {self.mode}, {network}"


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


def wrap(
    policy: SandboxPolicy,
    argv: Sequence[str],
    *,
    workspace: Path,
    tmpdir: Path,
    environ: Mapping[str, str],
) -> list[str]:
    """``argv`` started through the Landlock wrapper under ``policy``; ``environ`` is the
    command's environment (its ``PATH`` and ``HOME``)."""
    read = [*SYSTEM_READABLE, *_linked_from_etc(), *_python_prefixes()]
    read += _path_directories(environ)
    read += _home_files(environ)
    read += [_expand(path, environ, workspace) for path in policy.readable]
    write = [*DEVICES_WRITABLE, str(tmpdir)]
    write += [_expand(path, environ, workspace) for path in policy.writable]
    (write if policy.mode == "workspace-write" else read).append(str(workspace))
    args = [sys.executable, "-I", "-S", WRAPPER]
    args += [item for path in dict.fromkeys(read) for item in ("--read", path)]
    args += [item for path in dict.fromkeys(write) for item in ("--write", path)]
    if policy.network:
        args.append("--network")
    return [*args, "--", *argv]


@dataclass(frozen=True)
class McpSandbox:
    """The sandbox of a stdio MCP server: its policy, and the workspace it serves."""

    policy: SandboxPolicy
    workspace: Path


def _linked_from_etc() -> list[str]:
    """Where the files of ``/etc`` that often point elsewhere lead (``/etc/resolv.conf`` to
    ``/run/systemd/resolve/…`` or ``/run/resolvconf/…``): that one file is readable too."""
    return [os.path.realpath(path) for path in LINKED_FROM_ETC]


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
    r"permission denied|operation not permitted|read-only file system|\bEACCES\b|\bEPERM\b",
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
        f"may write only in {writes}, read only the system, the workspace and PATH, reach no "
        f"process outside the sandbox{network}. The user can allow more in their "
        f"configuration: {', '.join(loosen)}.]"
    )
