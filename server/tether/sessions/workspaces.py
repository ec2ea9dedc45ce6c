"""Workspace identifiers: local paths and ``file://`` URIs become one canonical ``file://`` URI.

Editors name a workspace either way (VS Code by URI, Neovim by path), and a session made with one
spelling must be found with the other. URIs of other schemes (remote workspaces) are kept verbatim.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from urllib.parse import unquote, urlparse

from tether.protocol import WorkspaceError

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def canonical_workspace(value: str) -> str:
    """The canonical form of a workspace URI or absolute path (which need not exist)."""
    if _SCHEME.match(value) and not value.startswith("file://"):
        return value.rstrip("/")
    try:
        path = Path(unquote(urlparse(value).path) if value.startswith("file://") else value)
        path = path.expanduser()
        if "\x00" in str(path):
            raise ValueError("NUL byte in path")
        if not path.is_absolute():
            raise ValueError("not an absolute path or a URI")
        return path.resolve().as_uri()
    except (RuntimeError, ValueError, OSError) as exc:  # unknown ~user, NUL, too long, loops
        raise WorkspaceError(f"invalid workspace {value!r}: {exc}", {"workspace": value}) from None


def existing_workspace(value: str) -> str:
    """Like :func:`canonical_workspace`, and a local workspace must be an existing directory."""
    canonical = canonical_workspace(value)
    if canonical.startswith("file://") and not _is_dir(local_path(canonical)):
        raise WorkspaceError(
            f"workspace is not an existing directory: {value!r}", {"workspace": value}
        )
    return canonical


@functools.lru_cache(maxsize=256)
def local_path(canonical: str) -> Path:
    """The filesystem path of a canonical ``file://`` workspace (a pure function of the URI:
    kept, as every run asks it several times)."""
    return Path(unquote(urlparse(canonical).path))


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError:  # a name too long, say
        return False
