"""Workspace identifiers: local paths and ``file://`` URIs become one canonical ``file://`` URI.

Editors name a workspace either way (VS Code by URI, Neovim by path), and a session made with one
spelling must be found with the other. URIs of other schemes (remote workspaces) are kept verbatim.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote, urlparse

from tether.protocol import WorkspaceError

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def canonical_workspace(value: str) -> str:
    """The canonical form of a workspace URI or absolute path (which need not exist)."""
    if value.startswith("file://"):
        path = Path(unquote(urlparse(value).path))
    elif _SCHEME.match(value):
        return value.rstrip("/")
    else:
        path = Path(value).expanduser()
    if not path.is_absolute():
        raise WorkspaceError(f"workspace must be an absolute path or a URI: {value!r}")
    return path.resolve().as_uri()


def existing_workspace(value: str) -> str:
    """Like :func:`canonical_workspace`, and a local workspace must be an existing directory."""
    canonical = canonical_workspace(value)
    if canonical.startswith("file://") and not local_path(canonical).is_dir():
        raise WorkspaceError(
            f"workspace is not an existing directory: {value!r}", {"workspace": value}
        )
    return canonical


def local_path(canonical: str) -> Path:
    """The filesystem path of a canonical ``file://`` workspace."""
    return Path(unquote(urlparse(canonical).path))
