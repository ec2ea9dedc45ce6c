"""Errors of loading memory entries.

Hierarchy::

    tether.protocol.ConfigError   -32013  a configured memory path that is missing, not a file
    │                                     or directory, or (workspace-relative) resolves outside
    └── MemoryLoadError                   a memory file that cannot be used: unreadable, not
                                          UTF-8, linking outside (a symlink, or
                                          hard links not all inside), or memory over the size cap

Both carry ``data = {"key": "memory.paths", "path": <the configured path or file>}``; catching
``ConfigError`` catches both.
"""

from __future__ import annotations

from tether.protocol import ConfigError


def bad_path(message: str, path: str) -> ConfigError:
    """A ConfigError about one configured memory path."""
    return ConfigError(message, {"key": "memory.paths", "path": path})


class MemoryLoadError(ConfigError):
    """A memory file that cannot be read or used; the run must not go on without it."""

    def __init__(self, message: str, path: str) -> None:
        super().__init__(message, {"key": "memory.paths", "path": path})
        self.path = path
