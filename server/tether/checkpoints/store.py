"""The checkpoint store: snapshots of a workspace's files in a git repository of tether's own, and
the restoring of files to the state before a turn.

One repository per workspace under ``<root>/workspaces/<key>/`` (its git directory, its private
index, its lock file), one index of checkpoints for all (:mod:`tether.checkpoints.index`). Every
tether process of the user shares them: a lock file serializes the writes of each workspace.
Everything here is synchronous (git subprocesses, file I/O): the kernel calls it on a thread;
the first snapshot of a workspace (:meth:`CheckpointStore.prewarm`) and the pruning of objects
no checkpoint refers to any more (:meth:`CheckpointStore.collect`) run on threads of their own.
Git objects are referenced by the trees in the index of checkpoints, not by refs: a collection
points temporary refs at those trees for the time of its ``git gc``.

A process that exits closes its store (:meth:`CheckpointStore.close`): what is under way (a
first snapshot, most often) is waited for a few seconds, then its git commands are ended. What a
git ended midway leaves (its lock files, a half-written pack) is removed under the workspace's
lock, by the closing process or by the next one to take it; git writes its index through a lock
file it renames, so the index is the old one or the new one, never half of each; the index of
checkpoints is SQLite (one transaction per change).
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import shutil
import sqlite3
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tether.checkpoints.errors import CheckpointError, RewindConflict
from tether.checkpoints.git import EXECUTABLE, GITLINK, REGULAR, SYMLINK, Children, Entry, Git
from tether.checkpoints.index import Checkpoint, Index

logger = logging.getLogger(__name__)

DEFAULT_MAX_FILE_BYTES = 10 * 1024 * 1024
DEFAULT_MAX_CHECKPOINT_BYTES = 200 * 1024 * 1024
CLOSE_WAIT = 3.0
"""How long a closing store waits for what is under way before it ends its git commands (below
the 5 s a client such as ``tether run`` gives its server to exit)."""
END_GRACE = 0.5  # from SIGTERM to SIGKILL of a git command


Stat = tuple[int, int]  # a file's size and modification time (ns)


@dataclass(frozen=True)
class Snapshot:
    """A workspace's tracked files as a git tree; ``skipped``: files left out for a size cap,
    with their stat; ``modes``: permission bits git does not keep (anything but 644 and 755),
    by path."""

    tree: str
    skipped: dict[str, Stat] = field(default_factory=dict)
    modes: dict[str, int] = field(default_factory=dict)

    def skipped_since(self, before: Snapshot) -> list[str]:
        """The files left out of either snapshot that changed between them (made, changed or
        removed): what a rewind cannot put back."""
        paths = self.skipped.keys() | before.skipped.keys()
        return sorted(p for p in paths if self.skipped.get(p) != before.skipped.get(p))


@dataclass(frozen=True)
class Rewound:
    restored: list[str]  # written back (edited or deleted since)
    removed: list[str]  # created since: deleted


class CheckpointStore:
    def __init__(
        self,
        root: Path,
        *,
        max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
        max_checkpoint_bytes: int = DEFAULT_MAX_CHECKPOINT_BYTES,
    ) -> None:
        self.root = root
        self.max_file_bytes = max_file_bytes
        self.max_checkpoint_bytes = max_checkpoint_bytes
        self._index: Index | None = None
        self._prewarmed: set[Path] = set()
        self._trees: dict[Path, tuple[tuple[int, ...] | None, str]] = {}  # by git directory
        self._prewarm_lock = threading.Lock()
        self._children = Children()
        self._idle = threading.Condition()
        self._busy = 0  # operations under way
        self._closing = False
        self._homes: set[Path] = set()  # the workspaces' stores this one used

    @property
    def index(self) -> Index:
        if self._index is None:
            self.root.mkdir(parents=True, exist_ok=True)
            self._index = Index(self.root / "index.db")
        return self._index

    def _git(self, workspace: Path) -> tuple[Git, Path]:
        key = hashlib.sha256(os.fsencode(workspace)).hexdigest()[:24]
        home = self.root / "workspaces" / key
        home.mkdir(parents=True, exist_ok=True)
        self._homes.add(home)
        return Git(home / "git", workspace, home / "index", self._children), home / "lock"

    @contextmanager
    def _locked(self, workspace: Path) -> Iterator[Git]:
        """The workspace's repository (made on first use), its lock held: the other processes
        wait for it. What a git ended midway left in it is removed first."""
        git, lock = self._git(workspace)
        with open(lock, "a+b") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            with self._active(release=lambda: fcntl.flock(handle, fcntl.LOCK_UN)):
                _clear_stale(git)
                git.ensure()
                yield git

    @contextmanager
    def _active(self, release: Callable[[], object] = lambda: None) -> Iterator[None]:
        """An operation under way (:meth:`close` waits for it); CheckpointError once the store
        is closing. ``release``: what it holds, let go of before it counts as over (the lock of
        the workspace's store, which a closing store then takes to clear it)."""
        with self._idle:
            if self._closing:
                release()
                raise CheckpointError("the checkpoint store is closed")
            self._busy += 1
        try:
            yield
        finally:
            release()
            with self._idle:
                self._busy -= 1
                self._idle.notify_all()

    def close(self, wait: float = CLOSE_WAIT) -> None:
        """The process is exiting: no operation starts any more; those under way get ``wait``
        seconds, then their git commands are ended and what those left is removed."""
        with self._idle:
            self._closing = True
            idle = self._idle.wait_for(lambda: self._busy == 0, wait)
        ended = self._children.end(END_GRACE)  # also a read that runs outside any operation
        if idle and not ended:
            return
        logger.info("ended %d checkpoint command(s) still running at exit", ended)
        with self._idle:
            self._idle.wait_for(lambda: self._busy == 0, 1.0)  # they fail, and let go
        for home in sorted(self._homes):
            _clear_stale_under_lock(home)

    # -- recording -------------------------------------------------------------------------

    def snapshot(
        self, workspace: Path, *, modes: bool = False, paths: Collection[str] | None = None
    ) -> Snapshot:
        """Record the workspace's files now. Only what changed since the last snapshot is read
        (git's index keeps each file's stat). ``paths``: only these files are looked at (what a
        file tool is about to write, or wrote): the rest of the tree stays as last recorded,
        and nothing else is scanned. ``modes``: also note unusual permission bits (of ``paths``
        only, when given)."""
        with self._locked(workspace) as git:
            skipped = self._add_changes(git, workspace, paths)
            tree = self._tree(git)
            self.index.set_last_tree(str(workspace), tree)
            unusual = {}
            if modes:
                unusual = _unusual_modes(workspace, git.tracked() if paths is None else paths)
        return Snapshot(tree, skipped, unusual)

    def _tree(self, git: Git) -> str:
        """The index as a tree: the one this process last wrote while the index file is the
        same file (git replaces it on every write), else written now."""
        index_file = git.git_dir.parent / "index"
        known = self._trees.get(git.git_dir)
        if known is not None and _identity(index_file) == known[0]:
            return known[1]
        tree = git.write_tree()  # may rewrite the index (its cached trees)
        self._trees[git.git_dir] = (_identity(index_file), tree)
        return tree

    def prewarm(self, workspace: Path) -> None:
        """Take the workspace's first snapshot (every file read and hashed: seconds on a large
        tree) on a thread of its own, once per workspace in this process, so that a run's first
        edit finds the store warm, or waits on the store's lock for what is left of it. Other
        processes wait on the same lock and then find the store warm. Never raises: a failure
        is logged (the run's own snapshot reports it). The filesystem's root and the user's
        home (an editor opened there) are never prepared ahead: far more than any project to
        read for a session that may edit nothing; a run that edits there records it then."""
        if self._closing:
            return
        with self._prewarm_lock:
            if workspace in self._prewarmed:
                return
            self._prewarmed.add(workspace)  # a root or home too: looked at once per process
        if _too_wide(workspace):
            return
        threading.Thread(
            target=self._prewarm, args=(workspace,), name="tether-checkpoints", daemon=True
        ).start()

    def _prewarm(self, workspace: Path) -> None:
        try:
            if workspace.is_dir():
                self.snapshot(workspace)
        except (CheckpointError, OSError) as exc:
            logger.info("checkpoints of %s not prepared: %s", workspace, exc)

    def _add_changes(
        self, git: Git, workspace: Path, paths: Collection[str] | None
    ) -> dict[str, Stat]:
        """Update the index with the changed files within the caps; the paths left out."""
        sizes: dict[str, int] = {}
        stats: dict[str, Stat] = {}
        for path in git.changed_candidates(paths):
            try:
                info = (workspace / path).lstat()
            except FileNotFoundError:
                sizes[path] = 0  # gone: dropped from the index
                continue
            if stat.S_ISREG(info.st_mode):
                sizes[path] = info.st_size
                stats[path] = (info.st_size, info.st_mtime_ns)
            elif stat.S_ISLNK(info.st_mode):
                sizes[path] = 0
            # anything else (a FIFO, a socket) is no file git can keep: left as it was
        skipped = sorted(p for p, size in sizes.items() if size > self.max_file_bytes)
        kept = {p: size for p, size in sizes.items() if size <= self.max_file_bytes}
        total = 0
        for path in sorted(kept, key=lambda p: kept[p]):  # the smallest first
            total += kept[path]
            if total > self.max_checkpoint_bytes:
                skipped.append(path)
        git.update_index(p for p in kept if p not in skipped)
        return {path: stats[path] for path in sorted(skipped)}

    def changed(self, workspace: Path, before: str, after: str) -> list[str]:
        git, _ = self._git(workspace)
        with self._active():
            return git.changed_paths(before, after)

    def entries(self, workspace: Path, tree: str, paths: Iterable[str]) -> dict[str, Entry]:
        """The entries of ``tree`` among ``paths`` (a path not in the tree is absent)."""
        git, _ = self._git(workspace)
        with self._active():
            return git.entries(tree, paths)

    def patched(self, workspace: Path, tree: str, entries: Mapping[str, Entry | None]) -> str:
        """``tree`` with these entries in place of its own (None: left out), written through a
        scratch index: the workspace's index is not touched."""
        git, _ = self._git(workspace)
        with self._active(), tempfile.TemporaryDirectory(dir=git.git_dir.parent) as scratch:
            other = git.with_index(Path(scratch) / "index")
            other.read_tree(tree)
            other.set_entries(entries)
            return other.write_tree()

    def save(self, checkpoint: Checkpoint) -> None:
        self.index.save(checkpoint)

    def of_messages(self, message_ids: Sequence[str]) -> list[Checkpoint]:
        return self.index.of_messages(message_ids)

    # -- collecting ------------------------------------------------------------------------

    def of_session(self, session_id: str) -> list[Checkpoint]:
        """The checkpoints of a session's runs (none without a store: none is made)."""
        if self._index is None and not (self.root / "index.db").exists():
            return []
        return self.index.of_session(session_id)

    def forget(self, checkpoints: Collection[Checkpoint], *, interval: float) -> None:
        """Drop these checkpoints from the index; then, in the background, collect the stores
        of their workspaces when they are due (see :meth:`collect`)."""
        self.index.drop([c.checkpoint_id for c in checkpoints])
        for workspace in sorted({c.workspace for c in checkpoints}):
            threading.Thread(
                target=self._collect_quietly,
                args=(Path(workspace), interval),
                name="tether-checkpoints-gc",
                daemon=True,
            ).start()

    def _collect_quietly(self, workspace: Path, interval: float) -> None:
        try:
            self.collect(workspace, interval=interval)
        except (CheckpointError, OSError, sqlite3.Error) as exc:
            logger.warning("checkpoint store of %s not collected: %s", workspace, exc)

    def collect(self, workspace: Path, *, interval: float) -> bool:
        """Prune the objects of the workspace's store that no checkpoint refers to any more,
        at most once every ``interval`` seconds (every process of the user agrees, through the
        index); whether it ran. Objects younger than ``interval`` (an hour at most) are kept:
        a run of another process may be about to refer to them."""
        if not self.index.start_collection(str(workspace), time.time(), interval):
            return False
        with self._locked(workspace) as git:
            trees = sorted(self.index.trees(str(workspace)))
            keep = [f"refs/tether/keep/{i}" for i in range(len(trees))]
            git.update_refs(dict(zip(keep, trees, strict=True)))
            grace = int(min(interval, 3600))
            try:
                git.run(
                    ["gc", "--quiet", f"--prune={grace}.seconds.ago" if grace else "--prune=now"]
                )
            finally:
                git.update_refs(dict.fromkeys(keep))
        return True

    # -- restoring -------------------------------------------------------------------------

    def rewind(
        self, workspace: Path, checkpoints: Sequence[Checkpoint], *, force: bool = False
    ) -> Rewound:
        """Put back every file ``checkpoints`` changed as it was before the first of them that
        changed it. A file that differs from what tether last recorded of it is a conflict:
        ``RewindConflict`` (nothing changed) unless ``force``."""
        with self._locked(workspace) as git:
            targets, modes = self._targets(git, checkpoints)
            _refuse_outside(workspace, targets)
            last = self.index.last_tree(str(workspace))
            expected = git.entries(last, targets) if last is not None else {}
            conflicts = [p for p in targets if _on_disk(workspace / p) != expected.get(p)]
            if conflicts and not force:
                raise RewindConflict(sorted(conflicts))
            contents = git.blobs(e.blob for e in targets.values() if e is not None)
            restored, removed = _apply(workspace, targets, contents, modes)
            if last is not None:
                git.read_tree(last)
                git.set_entries(targets)
                self.index.set_last_tree(str(workspace), git.write_tree())
        return Rewound(restored, removed)

    @staticmethod
    def _targets(
        git: Git, checkpoints: Sequence[Checkpoint]
    ) -> tuple[dict[str, Entry | None], dict[str, int]]:
        """Each path to put back, with its entry before the first checkpoint that changed it
        (None: it did not exist), and the unusual modes noted then."""
        targets: dict[str, Entry | None] = {}
        modes: dict[str, int] = {}
        left_out = {p for c in checkpoints for p in c.skipped}
        for checkpoint in checkpoints:
            fresh = [p for p in checkpoint.files if p not in targets and p not in left_out]
            entries = git.entries(checkpoint.before, fresh)
            for path in fresh:
                entry = entries.get(path)
                targets[path] = None if entry is not None and entry.mode == GITLINK else entry
                if path in checkpoint.modes:
                    modes[path] = checkpoint.modes[path]
        return targets, modes


def _clear_stale(git: Git, *, packs: bool = False) -> None:
    for path in git.clear_stale_locks(packs=packs):
        logger.info("removed %s, left by a git command ended midway", path)


def _clear_stale_under_lock(home: Path) -> None:
    """Clear a workspace's store if its lock is free now (else its holder does as it takes it)."""
    try:
        with open(home / "lock", "a+b") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return
            try:
                _clear_stale(Git(home / "git", home, home / "index"), packs=True)
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
    except OSError as exc:
        logger.info("checkpoint store %s not cleared: %s", home, exc)


def _identity(path: Path) -> tuple[int, ...] | None:
    try:
        info = path.stat()
    except FileNotFoundError:
        return None
    return (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def _refuse_outside(workspace: Path, paths: Iterable[str]) -> None:
    """A path whose directory leads out of the workspace (through a symlink made since) is
    never written: the rewind is refused whole."""
    root = workspace.resolve()
    outside = sorted(p for p in paths if not (workspace / p).parent.resolve().is_relative_to(root))
    if outside:
        raise CheckpointError(f"these paths lead outside the workspace: {', '.join(outside)}")


def _on_disk(path: Path) -> Entry | None:
    """The file at ``path`` as a tree entry (its blob id computed as git does); None when there
    is none. A directory is an entry no tree has."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(info.st_mode):
        return Entry(SYMLINK, _blob_id(os.fsencode(os.readlink(path))))
    if not stat.S_ISREG(info.st_mode):
        return Entry("040000", "")
    mode = EXECUTABLE if info.st_mode & stat.S_IXUSR else REGULAR
    return Entry(mode, _blob_id(path.read_bytes()))


def _blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def _unusual_modes(workspace: Path, paths: Iterable[str]) -> dict[str, int]:
    """Permission bits of regular files that git would not give back (it keeps 644 or 755)."""
    found: dict[str, int] = {}
    for path in paths:
        try:
            info = (workspace / path).lstat()
        except OSError:
            continue
        bits = stat.S_IMODE(info.st_mode)
        if stat.S_ISREG(info.st_mode) and bits not in (0o644, 0o755):
            found[path] = bits
    return found


def _apply(
    workspace: Path,
    targets: Mapping[str, Entry | None],
    contents: Mapping[str, bytes],
    modes: Mapping[str, int],
) -> tuple[list[str], list[str]]:
    restored: list[str] = []
    removed: list[str] = []
    for path, entry in sorted(targets.items()):
        target = workspace / path
        if entry is None:
            if _remove(target):
                removed.append(path)
            continue
        _write(target, entry, contents[entry.blob], modes.get(path))
        restored.append(path)
    for path in removed:
        _prune_empty_parents(workspace, (workspace / path).parent)
    return restored, removed


def _remove(target: Path) -> bool:
    if target.is_dir() and not target.is_symlink():
        shutil.rmtree(target)
        return True
    try:
        target.unlink()
    except FileNotFoundError:
        return False
    return True


def _write(target: Path, entry: Entry, data: bytes, mode: int | None) -> None:
    if target.is_dir() and not target.is_symlink():
        shutil.rmtree(target)
    else:  # a new file, whatever was there (a read-only file, a symlink)
        target.unlink(missing_ok=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    if entry.mode == SYMLINK:
        os.symlink(os.fsdecode(data), target)
        return
    target.write_bytes(data)
    if mode is None:
        mode = 0o755 if entry.mode == EXECUTABLE else 0o644
    os.chmod(target, mode)


def _prune_empty_parents(workspace: Path, directory: Path) -> None:
    """Remove the directories a removed file leaves empty, up to the workspace."""
    while directory != workspace and workspace in directory.parents:
        try:
            directory.rmdir()
        except OSError:
            return
        directory = directory.parent


__all__ = ["Checkpoint", "CheckpointError", "CheckpointStore", "Rewound", "Snapshot"]


def _too_wide(folder: Path) -> bool:
    """Whether ``folder`` is the filesystem's root or the user's home."""
    try:
        return folder == Path(folder.anchor) or folder.samefile(Path.home())
    except (OSError, RuntimeError):  # gone, or no home directory known
        return False
