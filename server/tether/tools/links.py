"""Hard links: whether every link of a file lies inside the workspace.

A hard link is a second name for the same file, so a file inside the workspace may be the very
file of ``~/.ssh/id_rsa`` elsewhere; resolving symlinks cannot see that. The file tools therefore
read or write a regular file with more than one link (``st_nlink > 1``) only when all of its links
are found inside the workspace: :class:`LinkCensus` walks the workspace, counts the directory
entries that name the same file (``st_dev``, ``st_ino``) and compares the count with ``st_nlink``.

The walk enters every directory below the root (hidden and ignored ones too: a link in
``.git`` or ``node_modules`` is still inside), follows no symlink, enters each directory once
(so a bind mount seen twice does not count its files twice), and scans at most ``max_entries``
entries: past that, whatever is not proven yet stays unproven. It stops as soon as every file
asked about is proven. It uses only the entries' inode numbers, so a file is ``lstat``-ed only
when its inode number matches.

This module uses nothing of tether, so the memory loader uses it as the tools do.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Iterable
from pathlib import Path

MAX_CENSUS_ENTRIES = 1_000_000

FileKey = tuple[int, int]  # (st_dev, st_ino)


def file_key(info: os.stat_result) -> FileKey:
    return (info.st_dev, info.st_ino)


class LinkCensus:
    """Counts of the links found inside one root, for the files asked about.

    Results are kept for the life of the object (one tool call): the links of a file may change
    afterwards, and a later call counts again.
    """

    def __init__(self, root: Path, *, max_entries: int = MAX_CENSUS_ENTRIES) -> None:
        self.root = root
        self.max_entries = max_entries
        self.stop: threading.Event | None = None  # set: a walk ends early (nothing is proven)
        self._found: dict[FileKey, int] = {}

    def inside(self, info: os.stat_result) -> int:
        """How many links of the file ``info`` describes were found inside the root (at least
        ``st_nlink`` when all were); 1 for a file with a single link, without a walk."""
        if info.st_nlink <= 1:
            return info.st_nlink
        key = file_key(info)
        if key not in self._found:
            self.count({key: info.st_nlink})
        return self._found[key]

    def found(self, key: FileKey, links: int) -> int:
        """:meth:`inside` for a file known by its key and link count."""
        if links <= 1:
            return links
        if key not in self._found:
            self.count({key: links})
        return self._found[key]

    def all_inside(self, info: os.stat_result) -> bool:
        """Whether every link of the file ``info`` describes is inside the root."""
        return info.st_nlink <= 1 or self.inside(info) >= info.st_nlink

    def count(self, wanted: dict[FileKey, int] | Iterable[os.stat_result]) -> None:
        """Count the links of several files in one walk (``wanted``: each file's link count)."""
        if not isinstance(wanted, dict):
            wanted = {file_key(info): info.st_nlink for info in wanted if info.st_nlink > 1}
        todo = {key: links for key, links in wanted.items() if key not in self._found}
        if not todo:
            return
        found = dict.fromkeys(todo, 0)
        _walk(self.root, todo, found, self.max_entries, self.stop)
        self._found.update(found)


def _walk(
    root: Path,
    todo: dict[FileKey, int],
    found: dict[FileKey, int],
    limit: int,
    stop: threading.Event | None,
) -> None:
    """Count into ``found`` the entries below ``root`` naming the files of ``todo``; stops when
    each has its count, after ``limit`` entries, or when ``stop`` is set."""
    inodes = {ino for _, ino in todo}
    missing = len(todo)
    try:
        top = os.lstat(root)
    except OSError:
        return
    seen = {file_key(top)}
    stack = [str(root)]
    scanned = 0
    while stack and missing and not (stop is not None and stop.is_set()):
        try:
            with os.scandir(stack.pop()) as entries:
                for entry in entries:
                    scanned += 1
                    if scanned > limit:
                        return
                    if entry.is_dir(follow_symlinks=False):
                        _enter(entry, seen, stack)
                    elif entry.inode() in inodes:
                        missing -= _tally(entry, todo, found)
                        if not missing:
                            return
        except OSError:  # an unreadable or vanished directory: its links stay uncounted
            continue


def _enter(entry: os.DirEntry[str], seen: set[FileKey], stack: list[str]) -> None:
    try:
        key = file_key(entry.stat(follow_symlinks=False))
    except OSError:
        return
    if key not in seen:
        seen.add(key)
        stack.append(entry.path)


def _tally(entry: os.DirEntry[str], todo: dict[FileKey, int], found: dict[FileKey, int]) -> int:
    """Count ``entry`` if it names a file of ``todo``; 1 when that file is now complete."""
    try:
        info = entry.stat(follow_symlinks=False)
    except OSError:
        return 0
    key = file_key(info)
    if key not in todo or not stat.S_ISREG(info.st_mode):
        return 0
    found[key] += 1
    return 1 if found[key] == todo[key] else 0
