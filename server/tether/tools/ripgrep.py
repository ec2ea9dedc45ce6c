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
- an ignore file the Python walk leaves out (:mod:`tether.tools.ignores`: a FIFO, a device, a
  symlink, over :data:`MAX_IGNORE_FILE_BYTES`) ``rg`` would read as it is: block on a FIFO for
  good, read ``/dev/zero`` until memory runs out, apply a linked or huge file's rules. So the
  walk's ``rg`` is watched (:func:`reads_what_no_walk_may`: it waits to open a FIFO, or holds a
  FIFO, a device or a file too large open) and killed at once, and the ignore files it opened
  (``--debug`` names each: :class:`RgLog`) are checked when it is done; either way the call
  walks with Python, which leaves the file out and says so.
- ``rg`` is started in a process group of its own, marked as commands are
  (:data:`tether.tools.processes.MARK_VARIABLE`), and its tree is killed
  (:func:`tether.tools.processes.kill_tree`) when the call is cancelled, at the deadline, or
  once enough is read; it reads nothing from tether (stdin is ``/dev/null``). Not a session
  of its own: where the kernel groups scheduling by session (autogroup), each new session is
  a group of its own, and on a loaded machine an ``rg`` in one took 1.5-1.9 times as long.
"""

from __future__ import annotations

import fcntl
import functools
import io
import os
import re
import shutil
import stat as stats
import subprocess
import sys
import sysconfig
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from tether.tools.base import SearchEngine, ToolError
from tether.tools.ignores import IGNORE_FILES, MAX_IGNORE_FILE_BYTES, ignores_above
from tether.tools.processes import MARK_VARIABLE, kill_tree, new_mark
from tether.tools.walk import IGNORED_DIRS, Glob, Walk, WalkedFile, walk_files

RG_FLAGS = ("--no-config", "--hidden", "--no-ignore-global")
"""What every ``rg`` run starts with: no ``RIPGREP_CONFIG_PATH``, hidden files in, no user-wide
excludes."""

_VERSION = re.compile(rb"ripgrep (\d+)\.(\d+)\.(\d+)")
GUARD_INTERVAL = 0.02  # seconds between two looks at what a walk's rg has open
EXIT_GRACE = 0.2  # seconds an rg whose output is closed has to exit before its tree is killed
# where the kernel holds a thread opening a FIFO no one writes to (older kernels than 5.5 show
# "pipe_wait", as for any pipe: such an rg is left to the deadline)
_FIFO_WAITS = frozenset({"wait_for_partner", "fifo_open"})
Killed = Literal["stop", "time", "unsafe"]
Stopped = Literal[Killed, "refused"]  # refused: rg refused the pattern


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
    ``stop`` is set or ``deadline`` passes, and by :meth:`close`; with ``guard``, also as soon
    as it reads what no walk may (:func:`reads_what_no_walk_may`; ``searching``: it also reads
    the files it searches). With ``on_stderr``, ``rg`` writes its stderr to a pipe that the
    watching thread empties at each look (:data:`GUARD_INTERVAL`), not a reader woken at each
    of the many small writes of ``rg --debug``; each line is handed to ``on_stderr`` by
    :meth:`close`. A pipe costs ``rg`` less per write than a file in memory (``rg``'s stderr
    is unbuffered: some 50 writes per line of ``--debug``)."""

    def __init__(
        self,
        rg: Ripgrep,
        args: Sequence[str],
        *,
        cwd: Path,
        stop: threading.Event,
        deadline: float,
        guard: bool = False,
        searching: bool = False,
        on_stderr: Callable[[bytes], None] | None = None,
    ) -> None:
        self._mark = new_mark()
        environ = {**os.environ, MARK_VARIABLE: self._mark}
        self._on_stderr = on_stderr
        self._stderr = _StderrPipe() if on_stderr is not None else None
        try:
            self.process = subprocess.Popen(
                [rg.path, *args],
                cwd=cwd,
                env=environ,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE if self._stderr is None else self._stderr.write_end,
                process_group=0,
            )
        except BaseException:
            if self._stderr is not None:
                self._stderr.close()
            raise
        finally:
            if self._stderr is not None:
                self._stderr.close_write_end()  # rg holds it: EOF once rg is gone
        _widen(self.stdout.fileno())  # rg writes on while the reader waits its turn
        if self.process.stderr is not None:  # read once rg is done: room for its messages
            _widen(self.process.stderr.fileno())
        self.killed: Killed | None = None
        self._lock = threading.Lock()
        self._searching = searching
        watcher = threading.Thread(
            target=self._watch, args=(stop, deadline, guard), daemon=True, name="rg-watch"
        )
        watcher.start()

    @property
    def stdout(self) -> io.BufferedReader:
        assert isinstance(self.process.stdout, io.BufferedReader)
        return self.process.stdout

    def _watch(self, stop: threading.Event, deadline: float, guard: bool) -> None:
        """Kill ``rg`` once the call is cancelled or over time, or (``guard``) once it reads
        what no walk may; empty its stderr pipe at each look (set ``stop`` ends this thread:
        the caller sets it when the call ends, however it ends)."""
        ticking = guard or self._stderr is not None
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill("time")
                return
            if stop.wait(min(left, GUARD_INTERVAL) if ticking else left):
                self.kill("stop")
                return
            if self._stderr is not None:
                self._stderr.drain()
            if self.process.poll() is not None:
                return
            if guard and reads_what_no_walk_may(self.process.pid, searching=self._searching):
                self.kill("unsafe")
                return

    def kill(self, why: Killed | None = None) -> None:
        with self._lock:
            if self.process.poll() is not None:
                return
            if self.killed is None:
                self.killed = why
            kill_tree(self.process.pid, self._mark)

    def close(self) -> tuple[int, str]:
        """Reap ``rg`` (killing what still runs); its exit status and what it wrote on stderr.
        Its output is closed first: an ``rg`` read to the end is exiting, one still writing
        ends at its next write; either is waited for a moment before its tree is killed
        (which looks through every process of ``/proc``: several milliseconds)."""
        self.stdout.close()
        if self.killed is None:
            try:
                self._wait(EXIT_GRACE)
            except subprocess.TimeoutExpired:
                pass
        self.kill()
        status = self._wait(None)
        if self._stderr is None:
            assert self.process.stderr is not None
            error = self.process.stderr.read().decode(errors="replace")
            self.process.stderr.close()
            return status, error
        assert self._on_stderr is not None
        lines = self._stderr.rest().split(b"\n")  # at line ends only: a path may hold a \r
        for line in lines[:-1] if lines[-1] == b"" else lines:
            self._on_stderr(line)
        return status, ""

    def _wait(self, timeout: float | None) -> int:
        """Wait for ``rg`` to exit, emptying its stderr pipe meanwhile (else an ``rg`` that
        fills it would wait for it to be emptied)."""
        if self._stderr is None:
            return self.process.wait(timeout)
        limit = None if timeout is None else time.monotonic() + timeout
        while True:
            self._stderr.drain()
            left = GUARD_INTERVAL
            if limit is not None:
                left = min(left, limit - time.monotonic())
            try:
                return self.process.wait(max(0.0, left))
            except subprocess.TimeoutExpired:
                if limit is not None and time.monotonic() >= limit:
                    raise


PIPE_BYTES = 1 << 20  # asked of the kernel for rg's stderr pipe (its default is 64 KiB)


def _widen(pipe: int) -> None:
    """Ask for :data:`PIPE_BYTES` of buffer for ``pipe``: ``rg`` then writes a walk's list or
    its log without waiting for tether to read each 64 KiB, which on a loaded machine may
    wait for a turn on a core. Where the user's pipe quota is spent, the default size stays
    (the reader empties it as often)."""
    if hasattr(fcntl, "F_SETPIPE_SZ"):
        try:
            fcntl.fcntl(pipe, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
        except OSError:
            pass


class _StderrPipe:
    """The pipe ``rg`` writes its stderr to, read without blocking into memory."""

    def __init__(self) -> None:
        self._read, self.write_end = os.pipe()
        os.set_blocking(self._read, False)
        _widen(self.write_end)
        self._chunks: list[bytes] = []
        self._lock = threading.Lock()
        self._write_open = True

    def close_write_end(self) -> None:
        if self._write_open:
            os.close(self.write_end)
            self._write_open = False

    def drain(self) -> bool:
        """Read what the pipe holds; False at its end (every writer gone)."""
        with self._lock:
            while True:
                try:
                    chunk = os.read(self._read, PIPE_BYTES)
                except BlockingIOError:
                    return True
                except OSError:  # closed by rest()
                    return False
                if not chunk:
                    return False
                self._chunks.append(chunk)

    def rest(self) -> bytes:
        """Everything written, once ``rg`` has exited (what it started is killed: the pipe
        ends); the pipe is closed."""
        until = time.monotonic() + EXIT_GRACE
        while self.drain() and time.monotonic() < until:
            time.sleep(0.001)  # a writer that outlived rg, being killed: not waited for long
        self.close()
        return b"".join(self._chunks)

    def close(self) -> None:
        with self._lock:
            if self._read >= 0:
                os.close(self._read)
                self._read = -1
        self.close_write_end()


_OPENED = b"opened gitignore file: "
_IGNORING = b": ignoring "
_BINARY = "found binary data at offset "
_DEBUG = (b"rg: DEBUG|", b"rg: TRACE|")
_OS_ERROR = "(os error "


@dataclass
class RgLog:
    """What ``rg --debug`` says on stderr that tether uses, by path relative to where it ran:
    the ignore files it opened (``opened gitignore file``), the files it left out as binary
    with the offset of their first NUL (``found binary data at offset``), those over
    ``--max-filesize`` (``ignoring PATH: N bytes``), and those it could not read (its error
    lines, ``(os error N)``)."""

    ignore_files: list[str] = field(default_factory=list)
    binary: dict[str, int] = field(default_factory=dict)
    large: set[str] = field(default_factory=set)
    unreadable: set[str] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)  # the other lines (the pattern's error...)

    def on_line(self, line: bytes) -> None:
        """One line of rg's stderr, with or without its line end."""
        if line.startswith(_DEBUG):
            self._debug(line)
            return
        text = os.fsdecode(line.rstrip(b"\n"))
        path, _, why = text.removeprefix("rg: ").rpartition(": ")
        if text.startswith("rg: ") and path and _OS_ERROR in why:
            self.unreadable.add(path.removeprefix("./"))
        elif len(self.errors) < 100:
            self.errors.append(text)

    def _debug(self, line: bytes) -> None:
        opened = line.find(_OPENED)
        if opened >= 0:
            self.ignore_files.append(os.fsdecode(line[opened + len(_OPENED) :].rstrip(b"\n")))
            return
        if line.rstrip(b"\n").endswith(b")"):
            return  # "ignoring PATH: Ignore(...)" and the like, most of the log: not used
        ignoring = line.find(_IGNORING)
        if ignoring < 0:
            return
        text = os.fsdecode(line[ignoring + len(_IGNORING) :].rstrip(b"\n"))
        path, _, why = text.rpartition(": ")
        path = path.removeprefix("./")
        if why.startswith(_BINARY) and why[len(_BINARY) :].isdigit():
            self.binary[path] = int(why[len(_BINARY) :])
        elif why.endswith(" bytes") and why[:-6].isdigit() and b"ignore::walk" in line:
            self.large.add(path)

    def ignore_files_clean(self, start: Path) -> bool:
        """Whether every ignore file ``rg`` (run from ``start``) opened is one a walk reads."""
        return all(readable_ignore_file(os.path.join(start, name)) for name in self.ignore_files)


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
    With ``stat``, each file's size and links are read (``lstat``) for the search; without,
    only the paths are kept (:attr:`Walk.names`: no object per file)."""
    deadline = time.monotonic() + budget
    walk = Walk()
    prefix = "" if start == root else start.relative_to(root).as_posix() + "/"
    if not include_ignored and start_ignored(root, start, walk):
        return walk  # as the Python walk sees nothing below an ignored directory
    args = [*walk_args(include_ignored, parents=start != root), "--files", "--null"]
    log = RgLog()
    if not include_ignored:  # else rg reads no ignore file: nothing to check
        args.append("--debug")
    run = RgProcess(
        rg,
        args,
        cwd=start,
        stop=stop,
        deadline=deadline,
        guard=not include_ignored,
        on_stderr=None if include_ignored else log.on_line,
    )
    try:
        names = _read_names(run, max_entries, walk)
    finally:
        run.close()
    if run.killed == "unsafe" or not (run.killed or log.ignore_files_clean(start)):
        # an ignore file rg read as no walk may: the Python walk leaves it out and says so
        return walk_files(
            root,
            start,
            glob=glob,
            max_entries=max_entries,
            stop=stop,
            include_ignored=include_ignored,
            budget=max(0.0, deadline - time.monotonic()),
        )
    if run.killed == "time":
        walk.stopped = "time"
    walk.scanned = len(names)
    # rg names every file as it names the first (from "./" when run on ".")
    rels = [name[2:] for name in names] if names and names[0].startswith("./") else names
    if glob is not None:
        rels = _matching(glob, rels, deadline, walk)
    rels.sort()
    directory = os.fspath(start)
    if stat:
        walked = (_walked(prefix + rel, f"{directory}/{rel}") for rel in rels)
        walk.files = [file for file in walked if file.size >= 0]
    else:
        walk.names = [prefix + rel for rel in rels] if prefix else rels
    return walk


def _matching(glob: Glob, rels: list[str], deadline: float, walk: Walk) -> list[str]:
    """The paths of ``rels`` that ``glob`` matches (those before the deadline, if it passes)."""
    kept: list[str] = []
    for rel in rels:
        try:
            if glob.matches(rel, deadline):
                kept.append(rel)
        except TimeoutError:
            walk.stopped = "time"
            break
    return kept


def _read_names(run: RgProcess, max_entries: int, walk: Walk) -> list[str]:
    names: list[str] = []
    pending = b""
    while chunk := run.stdout.read1(PIPE_BYTES):
        data = pending + chunk
        end = data.rfind(b"\0") + 1
        pending = data[end:]
        if end:  # one decoding per chunk (surrogateescape is per byte: the same as per name)
            names += os.fsdecode(data[: end - 1]).split("\0")
        if len(names) > max_entries:
            walk.stopped = "entries"
            run.kill()
            return names[:max_entries]
    return names


def start_ignored(root: Path, start: Path, walk: Walk) -> bool:
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


def _walked(rel: str, path: str) -> WalkedFile:
    """The file as the walk lists it, with its size and links; size -1 when it vanished or is
    no longer a regular file (left out, as the Python walk leaves out what vanishes under it)."""
    try:
        info = os.lstat(path)
    except OSError:
        return WalkedFile(rel, path, -1)
    if not (info.st_mode & 0o170000 == 0o100000):  # S_ISREG
        return WalkedFile(rel, path, -1)
    return WalkedFile.of(rel, path, info)


def reads_what_no_walk_may(pid: int, *, searching: bool = False) -> bool:
    """Whether the walk's ``rg`` (process ``pid``) waits to open a FIFO, or holds a FIFO, a
    device or a file larger than an ignore file may be open: ``rg --files`` opens nothing but
    directories and ignore files, and past its standard streams, so such a file is an ignore
    file no walk may read. An ``rg`` that is ``searching`` also opens the regular files it
    searches (never a FIFO or a device: a walk searches regular files only), so a large regular
    file counts only when it is named as an ignore file. False when ``/proc`` does not tell."""
    proc = f"/proc/{pid}"
    try:
        for task in os.listdir(f"{proc}/task"):
            with open(f"{proc}/task/{task}/wchan") as wchan:
                if wchan.read().strip() in _FIFO_WAITS:
                    return True
        for fd in os.listdir(f"{proc}/fd"):
            if int(fd) < 3:
                continue
            info = os.stat(f"{proc}/fd/{fd}")  # of what is open: nothing is opened here
            if stats.S_ISDIR(info.st_mode):
                continue
            if not stats.S_ISREG(info.st_mode):
                return True
            if info.st_size > MAX_IGNORE_FILE_BYTES and (
                not searching or _names_an_ignore_file(os.readlink(f"{proc}/fd/{fd}"))
            ):
                return True
    except (OSError, ValueError):
        return False
    return False


def _names_an_ignore_file(path: str) -> bool:
    return os.path.basename(path) in IGNORE_FILES or path.endswith("/.git/info/exclude")


def readable_ignore_file(path: str) -> bool:
    """Whether ``path`` is missing or an ignore file a walk reads."""
    try:
        info = os.lstat(path)
    except OSError:
        return True
    return stats.S_ISREG(info.st_mode) and info.st_size <= MAX_IGNORE_FILE_BYTES
