"""Where a workspace keeps what steers git and tether, found one way for both of tether's guards.

- ``.tether``: tether's configuration and memory for the workspace;
- ``.git``: the git directory, or a file (a worktree's, a submodule's) whose ``gitdir: PATH``
  names the git directory;
- the common directory that a git directory's ``commondir`` file names (a worktree's git
  directory lies in the main repository's, which holds its configuration and hooks).

The command sandbox keeps them read-only (:mod:`tether.tools.confinement`) and the writing tools
ask before writing in them (:mod:`tether.tools.protected`), both from :func:`guarded`.

A symbolic link among the files that steer git or tether (``.git/hooks`` linked to a directory
of the working tree) is guarded too, and so is what it leads to. Neither guard can see a hard
link: a second name of ``.git/config`` elsewhere in the workspace (a ``cp -al`` backup) is an
ordinary writable file. :func:`hard_linked` finds the files that run code or steer tether and
have more than one name, so that commands are not run while one does. This module uses nothing
of tether.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

TETHER = ".tether"
GIT = ".git"
GIT_FILES = ("config", "config.worktree", "commondir")  # in a git directory
GIT_DIRECTORIES = ("hooks", "info")  # in a git directory: hooks run, info steers
MAX_NAMED_BYTES = 4096


def guarded(workspace: Path) -> dict[str, str]:
    """The paths of the workspace's ``.tether`` and ``.git`` that exist, of the git directory
    and common directory they lead to, and of every symbolic link among the files that steer
    git or tether (:func:`steering_files`: ``.git/hooks`` linked to a directory of the
    working tree, a ``.tether/config.toml`` linked to a file beside it), each as named (joined,
    not resolved: whoever uses it resolves it, and protects where it leads too), with what it
    is, ``.tether`` or ``.git``."""
    found = {
        path: name
        for name in (TETHER, GIT)
        if os.path.lexists(path := os.path.join(workspace, name))
    }
    for directory in git_directories(workspace):
        found.setdefault(directory, GIT)
    for path, name in steering_files(workspace):
        if os.path.islink(path):
            found.setdefault(path, name)
    return found


def git_directories(workspace: Path) -> list[str]:
    """The workspace's git directory (``.git``, or the one a ``.git`` file names) and the
    common directory its ``commondir`` names, as named; a named one may be missing."""
    dot_git = os.path.join(workspace, GIT)
    if os.path.isdir(dot_git):
        first: str | None = dot_git
    else:
        first = _named(dot_git, prefix="gitdir:")
    if first is None:
        return []
    common = _named(os.path.join(os.path.realpath(first), "commondir"), prefix="")
    return [first] if common is None else [first, common]


def _named(path: str, *, prefix: str) -> str | None:
    """The path a git file names: ``.git`` (``gitdir: PATH``) or a git directory's
    ``commondir`` (``PATH``), relative to the file's directory; None when there is no such
    file or it says something else."""
    try:
        if not os.path.isfile(path):
            return None
        with open(path, "rb") as file:
            text = file.read(MAX_NAMED_BYTES).decode(errors="replace").strip()
    except OSError:
        return None
    if not text.startswith(prefix) or "\n" in text:
        return None
    named = text[len(prefix) :].strip()
    return os.path.join(os.path.dirname(path), named) if named else None


def hard_linked(workspace: Path) -> list[str]:
    """The real paths of the regular files that run code or steer tether (:func:`steering_files`,
    and the files a symbolic link among them leads to) with more than one hard link."""
    linked = []
    for path, _ in steering_files(workspace):
        for file in _entries_under(os.path.realpath(path)) if os.path.islink(path) else (path,):
            try:
                info = os.lstat(file)
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode) and info.st_nlink > 1:
                linked.append(os.path.realpath(file))
    return list(dict.fromkeys(linked))


def steering_files(workspace: Path) -> Iterator[tuple[str, str]]:
    """The files that run code or steer tether, each with what it belongs to (``.tether`` or
    ``.git``): every entry under ``.tether`` but directories; a ``.git`` file; in the git
    directory and the common directory, ``config``, ``config.worktree``, ``commondir`` and every
    entry under ``hooks`` and ``info``. Their directories are real paths; a symbolic link is
    yielded itself, never followed."""
    tether = os.path.join(workspace, TETHER)
    if os.path.isdir(tether):
        yield from ((path, TETHER) for path in _entries_under(os.path.realpath(tether)))
    dot_git = os.path.join(workspace, GIT)
    if os.path.isfile(dot_git):
        yield os.path.realpath(dot_git), GIT
    for directory in dict.fromkeys(map(os.path.realpath, git_directories(workspace))):
        yield from ((os.path.join(directory, name), GIT) for name in GIT_FILES)
        for name in GIT_DIRECTORIES:
            path = os.path.join(directory, name)
            entries = [path] if os.path.islink(path) else _entries_under(path)
            yield from ((entry, GIT) for entry in entries)


def _entries_under(directory: str) -> Iterator[str]:
    """Every entry below ``directory`` (which may be a symbolic link to a directory, or a file:
    then that file) but directories, without following a symbolic link below it."""
    if not os.path.isdir(directory):
        yield directory
        return
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            yield from _entries_under(entry.path)
        else:
            yield entry.path
