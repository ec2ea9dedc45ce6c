"""Protected paths: where a write changes what tether or git will do later, not just a file.

A file under ``.tether/`` (tether's configuration and memory for the workspace) or ``.git/``
(git's configuration and hooks, which run commands) outlives the run: a model that writes there
rewrites tether's own settings or the prompt of every later session. The built-in writing tools
therefore ask before writing there whatever ``tools.approval`` says (:meth:`Tool.protected`,
checked by the kernel's approval gate), and check again as they write.

A path is protected when, once resolved (``..`` and symlinks followed, as the tools resolve it),

- one of its components is ``.tether`` or ``.git`` at any depth, compared case-insensitively and
  ignoring the zero-width characters HFS+ ignores (case-insensitive file systems open ``.GIT``
  as ``.git``); or
- it is, or lies inside, what a path of :func:`tether.tools.guarded.guarded` leads to: the
  directory the workspace's own ``.tether`` or ``.git`` really is (either may be a symlink to
  another directory of the workspace), the git directory a ``.git`` file names (``gitdir:
  sub/gd``, as in a worktree or a submodule) and that directory's common directory, and where a
  symbolic link among their hooks and settings leads; the command sandbox protects the same.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Final

from tether.tools.base import ToolError
from tether.tools.guarded import guarded
from tether.tools.sandbox import Sandbox

REASONS: Final = {
    ".tether": "writes to .tether/ change tether's own configuration for this workspace",
    ".git": "writes to .git/ change the repository's git configuration and hooks, which run "
    "commands",
}

# Code points HFS+ ignores in names (as git's is_hfs_dotgit does): ".g\u200cit" opens ".git".
_IGNORED = re.compile("[\u200c-\u200f\u202a-\u202e\u206a-\u206f\ufeff]")


def protected_reason(root: Path, real: Path) -> str | None:
    """Why writing ``real`` (a resolved path inside the resolved ``root``) needs the user's
    explicit approval, or None when it does not."""
    for part in real.relative_to(root).parts:
        reason = REASONS.get(_IGNORED.sub("", part).casefold())
        if reason is not None:
            return reason
    return _inside_protected_directory(root, real)


def _inside_protected_directory(root: Path, real: Path) -> str | None:
    """The reason when ``real`` is (or is inside) what a path of :func:`guarded` leads to;
    compared by device and inode, so a symlinked or differently cased name matches too, and so
    does a second hard link of a guarded file."""
    directories: dict[tuple[int, int], str] = {}
    for path, name in guarded(root).items():
        identity = _identity(Path(path))
        if identity is not None:
            directories.setdefault(identity, REASONS[name])
    if not directories:
        return None
    for ancestor in (real, *real.parents):
        if ancestor == root or not ancestor.is_relative_to(root):
            break
        found = directories.get(_identity(ancestor) or (-1, -1))
        if found is not None:
            return found
    return None


def _identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of what ``path`` leads to; None when nothing is there."""
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return None
    return (info.st_dev, info.st_ino)


def check_protected(root: Path, real: Path, *, approved: bool) -> None:
    """Refuse writing ``real`` when it is protected and the user did not approve that: the
    writing tools check as they write, so a path that changed since it was asked about (a
    symlink put in its way meanwhile) is not written either."""
    reason = protected_reason(root, real)
    if reason is not None and not approved:
        raise ToolError(f"refused: {reason}, so they need your explicit approval")


def protected_write(workspace: Path, path: str) -> str | None:
    """:meth:`Tool.protected` of a tool that writes the workspace file ``path``."""
    sandbox = Sandbox(workspace)
    return protected_reason(sandbox.root, sandbox.resolve_for_write(path))
