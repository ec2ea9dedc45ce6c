"""Running ``rg`` for the search tools: finding it, starting and stopping it, and the walk.

``rg`` comes from the ``ripgrep`` wheel, a dependency installed beside tether's interpreter; a
system ``rg`` on ``PATH`` is used instead when it is newer (:func:`ripgrep`). The engine of
``search_text`` and ``list_files`` is chosen by ``tools.search`` (:data:`SearchEngine`): "auto"
runs ``rg`` where it can and the Python walk elsewhere, "ripgrep" insists on ``rg``, "python"
never runs it.

What ``rg`` does here, and what tether still does itself so the answer is the one the Python
walk (:mod:`tether.tools.walk`) gives:

- the walk is ``rg --files`` from the start directory, with every ignore file of its own kind
  turned off but ``.gitignore``, ``.ignore`` and ``.git/info/exclude`` (``--no-ignore-global``,
  ``--no-ignore-parent``, ``--no-require-git``), hidden files in, :data:`IGNORED_DIRS` out,
  symlinks never followed (``rg`` lists none). The rules of the directories above the start
  (up to the workspace root, never above it) and the glob are applied here, as the Python walk
  applies them; so are the sort and the entry cap.
- ``rg`` is started in a session of its own, marked as commands are
  (:data:`tether.tools.processes.MARK_VARIABLE`), and its tree is killed
  (:func:`tether.tools.processes.kill_tree`) when the call is cancelled, at the deadline, or
  once enough is read; it reads nothing from tether (stdin is ``/dev/null``).
"""

from __future__ import annotations

import functools
import io
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from tether.tools.base import SearchEngine, ToolError
from tether.tools.ignores import IGNORE_FILES, ignores_above
from tether.tools.processes import MARK_VARIABLE, kill_tree, new_mark
from tether.tools.walk import IGNORED_DIRS, Glob, Walk, WalkedFile

RG_FLAGS = ("--no-config", "--hidden", "--no-ignore-global")
"""What every ``rg`` run starts with: no ``RIPGREP_CONFIG_PATH``, hidden files in, no user-wide
excludes."""

_VERSION = re.compile(rb"ripgrep (\d+)\.(\d+)\.(\d+)")


@dataclass(frozen=True)
class Ripgrep:
    """An ``rg`` that runs here: its path and version."""

    path: str
    version: tuple[int, int, int]


def _version(path: str) -> tuple[int, int, int] | None:
    try:
        done = subprocess.run(
            [path, "--version"],
            capture_output=True,
            stdin=subprocess.DEVNULL,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    found = _VERSION.match(done.stdout)
    if done.returncode != 0 or found is None:
        return None
    major, minor, patch = (int(part) for part in found.groups())
    return (major, minor, patch)


def _candidates() -> Iterator[str]:
    """The wheel's ``rg`` (beside the interpreter's scripts), then the system's."""
    for directory in (sysconfig.get_path("scripts"), os.path.dirname(sys.executable)):
        path = os.path.join(directory, "rg")
        if os.access(path, os.X_OK):
            yield path
    system = shutil.which("rg")
    if system is not None:
        yield system


@functools.cache
def ripgrep() -> Ripgrep | None:
    """The ``rg`` to run (the newest of the wheel's and the system's), found once per process;
    None where there is none that runs."""
    best: Ripgrep | None = None
    for path in dict.fromkeys(_candidates()):
        version = _version(path)
        if version is not None and (best is None or version > best.version):
            best = Ripgrep(path, version)
    return best


def chosen(engine: SearchEngine, root: Path, start: Path) -> Ripgrep | None:
    """The ``rg`` a call from ``start`` (inside ``root``) runs under ``engine``; None: the
    Python engine. Under "ripgrep", a missing ``rg`` is an error the model reads. A walk below
    the root whose ignore files ``rg`` cannot be told to read from the root down only (some lie
    above the root: :func:`parents_clean`) runs on the Python engine."""
    if engine == "python" or (start != root and not parents_clean(root)):
        return None
    found = ripgrep()
    if found is None and engine == "ripgrep":
        raise ToolError(
            'tools.search is "ripgrep" but no rg runs here (install the ripgrep package, or '
            'set tools.search = "auto")'
        )
    return found


class RgProcess:
    """One ``rg`` run whose output is read as it comes; killed (with anything it started) when
    ``stop`` is set or ``deadline`` passes, and by :meth:`close`."""

    def __init__(
        self, rg: Ripgrep, args: Sequence[str], *, cwd: Path, stop: threading.Event, deadline: float
    ) -> None:
        self._mark = new_mark()
        environ = {**os.environ, MARK_VARIABLE: self._mark}
        self.process = subprocess.Popen(
            [rg.path, *args],
            cwd=cwd,
            env=environ,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        self.killed: Literal["stop", "time"] | None = None
        self._lock = threading.Lock()
        watcher = threading.Thread(
            target=self._watch, args=(stop, deadline), daemon=True, name="rg-watch"
        )
        watcher.start()

    @property
    def stdout(self) -> io.BufferedReader:
        assert isinstance(self.process.stdout, io.BufferedReader)
        return self.process.stdout

    def _watch(self, stop: threading.Event, deadline: float) -> None:
        """Kill ``rg`` once the call is cancelled or over time (set ``stop`` ends this thread:
        the caller sets it when the call ends, however it ends)."""
        stopped = stop.wait(max(0.0, deadline - time.monotonic()))
        self.kill("stop" if stopped else "time")

    def kill(self, why: Literal["stop", "time"] | None = None) -> None:
        with self._lock:
            if self.process.poll() is not None:
                return
            if self.killed is None:
                self.killed = why
            kill_tree(self.process.pid, self._mark)

    def close(self) -> tuple[int, str]:
        """Kill what still runs, reap it; its exit status and what it wrote on stderr."""
        self.kill()
        self.stdout.close()
        assert self.process.stderr is not None
        error = self.process.stderr.read().decode(errors="replace")
        self.process.stderr.close()
        return self.process.wait(), error


def walk_args(include_ignored: bool, *, parents: bool) -> list[str]:
    """The ``rg`` options that walk as :func:`tether.tools.walk.walk_files` does; with
    ``parents``, the ignore files of the directories above the start apply (the caller has
    made sure, with :func:`parents_clean`, that none lies above the workspace root)."""
    args = [*RG_FLAGS, "--no-require-git", "--no-messages"]
    if not parents:
        args.append("--no-ignore-parent")
    if include_ignored:
        args.append("--no-ignore")
    for name in sorted(IGNORED_DIRS):
        args += ["--glob", f"!{_glob_literal(name)}/"]
    return args


def _glob_literal(name: str) -> str:
    return "".join(f"[{char}]" if char in "*?[]{}\\!" else char for char in name)


def rg_walk(
    rg: Ripgrep,
    root: Path,
    start: Path,
    *,
    glob: Glob | None,
    max_entries: int,
    stop: threading.Event,
    include_ignored: bool,
    budget: float,
    stat: bool,
) -> Walk:
    """:func:`tether.tools.walk.walk_files` on ``rg --files``: the same files, sorted by path.
    With ``stat``, each file's size and links are read (``lstat``) for the search."""
    deadline = time.monotonic() + budget
    walk = Walk()
    prefix = "" if start == root else start.relative_to(root).as_posix() + "/"
    if not include_ignored and _start_ignored(root, start, walk):
        return walk  # as the Python walk sees nothing below an ignored directory
    args = [*walk_args(include_ignored, parents=start != root), "--files", "--null"]
    run = RgProcess(rg, args, cwd=start, stop=stop, deadline=deadline)
    try:
        names = _read_names(run, max_entries, walk)
    finally:
        run.close()
    if run.killed == "time":
        walk.stopped = "time"
    walk.scanned = len(names)
    for name in names:
        rel = name.removeprefix("./")
        try:
            if glob is not None and not glob.matches(rel, deadline):
                continue
        except TimeoutError:
            walk.stopped = "time"
            break
        path = os.path.join(start, rel)
        walk.files.append(_walked(prefix + rel, path, stat))
    walk.files = [file for file in walk.files if file.size >= 0]
    walk.files.sort(key=lambda file: file.rel)
    return walk


def _read_names(run: RgProcess, max_entries: int, walk: Walk) -> list[str]:
    names: list[str] = []
    pending = b""
    while chunk := run.stdout.read1(1 << 16):
        parts = (pending + chunk).split(b"\0")
        pending = parts.pop()
        names += map(os.fsdecode, parts)
        if len(names) > max_entries:
            walk.stopped = "entries"
            run.kill()
            return names[:max_entries]
    return names


def _start_ignored(root: Path, start: Path, walk: Walk) -> bool:
    """Whether the rules from the root down exclude ``start`` or a directory on the way to it
    (``rg`` applies no rule to the directory it starts in)."""
    if start == root:
        return False
    above = ignores_above(root, start, walk.ignore_files)
    parts = start.relative_to(root).parts
    return any(
        above.ignored("/".join(parts[: depth + 1]), is_dir=True) for depth in range(len(parts))
    )


def parents_clean(root: Path) -> bool:
    """Whether no directory above ``root`` holds an ignore file or a ``.git``: then ``rg``,
    reading the ignore files of the directories above its start, reads those from ``root``
    down only, as the Python walk does."""
    names = (*IGNORE_FILES, ".git")
    return not any(
        os.path.lexists(os.path.join(directory, name))
        for directory in root.parents
        for name in names
    )


def _walked(rel: str, path: str, stat: bool) -> WalkedFile:
    """The file as the walk lists it; size -1 when it vanished or is no longer a regular file
    (left out, as the Python walk leaves out what vanishes under it)."""
    if not stat:
        return WalkedFile(rel, path, 0)
    try:
        info = os.lstat(path)
    except OSError:
        return WalkedFile(rel, path, -1)
    if not (info.st_mode & 0o170000 == 0o100000):  # S_ISREG
        return WalkedFile(rel, path, -1)
    return WalkedFile.of(rel, path, info)
