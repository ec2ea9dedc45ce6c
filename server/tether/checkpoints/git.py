"""git plumbing over a checkpoint repository: a git directory of tether's own whose work tree is
the workspace.

Every command runs with ``GIT_DIR``, ``GIT_WORK_TREE`` and ``GIT_INDEX_FILE`` pointing at
tether's files, without the user's or the system's configuration, without hooks, and with every
``GIT_*`` variable of the environment left out: nothing of the workspace's own ``.git`` (HEAD,
index, stash, refs, hooks, config) is read or written. The workspace's ``.gitattributes`` are
overridden (no filter, no end-of-line conversion), so a blob is the file's bytes exactly.

Each command is the leader of a process group of its own, kept in :class:`Children` while it
runs: a store that closes ends the groups still running (what git started, such as the repack
of ``git gc``, with them), so that no git outlives tether.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tether.checkpoints.errors import CheckpointError

GITLINK = "160000"
SYMLINK = "120000"
EXECUTABLE = "100755"
REGULAR = "100644"

_ATTRIBUTES = b"* -text -eol -filter -ident -working-tree-encoding -export-subst\n"
_OPTIONS = (
    ("core.hooksPath", "/dev/null"),
    ("core.fsmonitor", "false"),
    ("core.autocrlf", "false"),
    ("core.safecrlf", "false"),
    ("core.symlinks", "true"),
    ("core.fileMode", "true"),
    ("core.quotePath", "false"),
    ("core.untrackedCache", "false"),
    # every blob streamed into one pack per command (git's bulk check-in), not a file per blob:
    # the first snapshot of 10,000 files costs ~5x less (bench/checkpoint_bench.py)
    ("core.bigFileThreshold", "1"),
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
)


class Children:
    """The git commands of one checkpoint store that are running, each the leader of its own
    process group. :meth:`end` ends them all; no command starts after it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: set[subprocess.Popen[bytes]] = set()
        self._ended = False

    def start(
        self, argv: Sequence[str], env: Mapping[str, str], cwd: Path
    ) -> subprocess.Popen[bytes]:
        with self._lock:
            if self._ended:
                raise CheckpointError("the checkpoint store is closed")
            process = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                cwd=cwd,
                process_group=0,
            )
            self._running.add(process)
        return process

    def done(self, process: subprocess.Popen[bytes]) -> None:
        with self._lock:
            self._running.discard(process)

    def end(self, grace: float) -> int:
        """End every group still running: ``SIGTERM`` (git removes its lock files as it dies),
        then ``SIGKILL`` for what is left after ``grace`` seconds. How many were running."""
        with self._lock:
            self._ended = True
            running = list(self._running)
        for process in running:
            _signal_group(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for process in running:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(max(0.0, deadline - time.monotonic()))
            _signal_group(process.pid, signal.SIGKILL)  # the leader's children too
        return len(running)


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


@dataclass(frozen=True)
class Entry:
    """A file in a tree: its git mode (``100644``, ``100755``, ``120000``) and blob id."""

    mode: str
    blob: str


class Git:
    """The commands of one workspace's checkpoint repository (synchronous: call on a thread)."""

    def __init__(
        self,
        git_dir: Path,
        workspace: Path,
        index_file: Path,
        children: Children | None = None,
    ) -> None:
        self.git_dir = git_dir
        self.index_file = index_file
        self.children = Children() if children is None else children
        self.workspace = workspace
        self._env = _environment(git_dir, workspace, index_file)
        options = list(_OPTIONS)
        ignore = workspace / ".ignore"
        if ignore.is_file():  # the workspace's own ignore file, beside its .gitignore files
            options.append(("core.excludesFile", str(ignore)))
        self._prefix = ["git"]
        for key, value in options:
            self._prefix += ["-c", f"{key}={value}"]

    def ensure(self) -> None:
        """Create the repository on first use (no template: no sample hooks)."""
        if (self.git_dir / "HEAD").exists():
            return
        self.git_dir.mkdir(parents=True, exist_ok=True)
        self.run(["init", "--quiet", "--template="])
        info = self.git_dir / "info"
        info.mkdir(exist_ok=True)
        (info / "attributes").write_bytes(_ATTRIBUTES)

    def clear_stale_locks(self, *, packs: bool = False) -> list[Path]:
        """Remove what a git command ended midway left behind: its lock files, and with
        ``packs`` (or when a lock was left) the packs it was writing; the paths removed. Only
        while the store's lock is held: no other command that writes them can be running then.
        The packs' directory is only listed then: it holds a pack per snapshot until a
        collection, and listing it on every snapshot cost ~10% of a snapshot's own CPU."""
        found = [self.index_file.with_name(f"{self.index_file.name}.lock")]
        found += self.git_dir.glob("*.lock")
        found += self.git_dir.glob("refs/tether/keep/*.lock")
        removed = _unlink(found)
        if packs or removed:
            removed += _unlink(self.git_dir.glob("objects/pack/tmp_*"))
        return removed

    def run(self, args: Sequence[str], stdin: bytes | None = None) -> bytes:
        """The command's stdout; CheckpointError with its stderr when it fails."""
        try:
            process = self.children.start([*self._prefix, *args], self._env, self.workspace)
        except FileNotFoundError as exc:
            raise CheckpointError("git is not installed: checkpoints need it") from exc
        try:
            out, err = process.communicate(stdin)
        except BaseException:
            process.kill()
            process.wait()
            raise
        finally:
            self.children.done(process)
        if process.returncode < 0:
            raise CheckpointError(f"git {args[0]} was ended (signal {-process.returncode})")
        if process.returncode != 0:
            reason = err.decode(errors="replace").strip()
            raise CheckpointError(f"git {args[0]} failed: {reason}")
        return out

    def changed_candidates(self, paths: Collection[str] | None = None) -> list[str]:
        """Paths that may differ from the index: untracked ones that no ignore file excludes,
        and tracked ones whose file changed or is gone (nested repositories left out). With
        ``paths``, only among them: git then reads only their directories, not the whole tree."""
        args = ["ls-files", "-z", "--others", "--modified", "--exclude-standard"]
        if paths is not None:
            if not paths:
                return []
            args = ["--literal-pathspecs", *args, "--", *sorted(paths)]
        out = self.run(args)
        return sorted({p for p in _split(out) if not p.endswith("/")})

    def update_index(self, paths: Iterable[str]) -> None:
        """Add each path's file to the index, or drop it when the file is gone."""
        listing = b"".join(os.fsencode(p) + b"\0" for p in paths)
        if listing:
            self.run(["update-index", "--add", "--remove", "--replace", "-z", "--stdin"], listing)

    def write_tree(self) -> str:
        return self.run(["write-tree"]).decode().strip()

    def read_tree(self, tree: str) -> None:
        self.run(["read-tree", tree])

    def set_entries(self, entries: Mapping[str, Entry | None]) -> None:
        """Put these entries in the index as they are (None: removed), without any file."""
        zero = "0" * 40
        lines = []
        for path, entry in entries.items():
            if entry is None:
                lines.append(f"0 {zero}\t{path}")
            else:
                lines.append(f"{entry.mode} {entry.blob}\t{path}")
        if lines:
            data = b"".join(os.fsencode(line) + b"\0" for line in lines)
            self.run(["update-index", "-z", "--index-info"], data)

    def with_index(self, index_file: Path) -> Git:
        """The same repository over another index file (a scratch one: the shared index and
        its stat cache are left alone)."""
        return Git(self.git_dir, self.workspace, index_file, self.children)

    def update_refs(self, refs: Mapping[str, str | None]) -> None:
        """Point these refs at these objects (None: delete the ref), in one command."""
        lines = [
            f"update {ref} {target}" if target is not None else f"delete {ref}"
            for ref, target in refs.items()
        ]
        if lines:
            self.run(["update-ref", "--stdin"], "".join(f"{line}\n" for line in lines).encode())

    def tracked(self) -> list[str]:
        return _split(self.run(["ls-files", "-z"]))

    def changed_paths(self, before: str, after: str) -> list[str]:
        """The paths whose content or mode differs between two trees (a rename is a removal
        and an addition)."""
        if before == after:
            return []
        out = self.run(["diff-tree", "-r", "-z", "--no-renames", "--name-only", before, after])
        return sorted(_split(out))

    def entries(self, tree: str, paths: Iterable[str]) -> dict[str, Entry]:
        """The entries of ``tree`` among ``paths`` (a path not in the tree is absent)."""
        wanted = sorted(set(paths))
        if not wanted:
            return {}
        out = self.run(
            ["--literal-pathspecs", "ls-tree", "-r", "-z", "--full-tree", tree, "--", *wanted]
        )
        found: dict[str, Entry] = {}
        for record in _split(out):
            meta, path = record.split("\t", 1)
            mode, kind, blob = meta.split(" ")
            if kind == "blob":
                found[path] = Entry(mode, blob)
        return found

    def blobs(self, ids: Iterable[str]) -> dict[str, bytes]:
        """The contents of these blobs, read in one command."""
        wanted = sorted(set(ids))
        if not wanted:
            return {}
        out = self.run(["cat-file", "--batch"], "".join(f"{b}\n" for b in wanted).encode())
        found: dict[str, bytes] = {}
        at = 0
        for blob in wanted:
            end = out.index(b"\n", at)
            header = out[at:end].decode().split(" ")
            if len(header) != 3:
                raise CheckpointError(f"blob {blob} is missing from the checkpoint store")
            size = int(header[2])
            found[blob] = out[end + 1 : end + 1 + size]
            at = end + 1 + size + 1
        return found


def _unlink(paths: Iterable[Path]) -> list[Path]:
    """Remove these files; those that were there."""
    removed = []
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
            removed.append(path)
    return removed


def _split(out: bytes) -> list[str]:
    return [os.fsdecode(p) for p in out.split(b"\0") if p]


def _environment(git_dir: Path, workspace: Path, index_file: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_DIR=str(git_dir),
        GIT_WORK_TREE=str(workspace),
        GIT_INDEX_FILE=str(index_file),
        GIT_CONFIG_GLOBAL="/dev/null",
        GIT_CONFIG_NOSYSTEM="1",
        GIT_TERMINAL_PROMPT="0",
        GIT_OPTIONAL_LOCKS="0",
        LC_ALL="C",
    )
    return env
