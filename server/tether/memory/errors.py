"""Problems of loading memory entries.

Hierarchy::

    tether.protocol.ConfigError   -32013  a configured memory path that is missing, not a file
    │                                     or directory, or (workspace-relative) resolves outside
    ├── MemoryLoadError                   a memory file that cannot be used: unreadable, not a
    │                                     regular file, not UTF-8, linking outside (a symlink, or
    │                                     hard links not all inside), memory over the size cap,
    │                                     or a memory directory too large to walk whole
    └── InstructionsLoadError             an instruction file (AGENTS.md) that cannot be used, for
                                          the same reasons (``key``: ``instructions.files``)

Both carry ``data = {"key": "memory.paths", "path": <the configured path or file>, "reason"}``
(``reason``: :class:`tether.repofiles.Refusal`'s values, ``missing``, ``not_utf8``, or
``truncated`` for a directory too large to walk whole). They are
not raised out of :func:`tether.memory.load_memory`: each is a problem it reports, and a run
reports each as a warning and goes on with the memory that could be read.
"""

from __future__ import annotations

from tether.protocol import ConfigError


def bad_path(message: str, path: str, reason: str) -> ConfigError:
    """A ConfigError about one configured memory path."""
    return ConfigError(message, {"key": "memory.paths", "path": path, "reason": reason})


class MemoryLoadError(ConfigError):
    """A memory file that cannot be read or used: it is left out of the prompt."""

    def __init__(self, message: str, path: str, reason: str) -> None:
        super().__init__(message, {"key": "memory.paths", "path": path, "reason": reason})
        self.path = path
        self.reason = reason


class InstructionsLoadError(ConfigError):
    """An instruction file (``AGENTS.md``...) that cannot be used: it is left out of the prompt.
    ``data = {"key": "instructions.files", "path", "reason"}`` (``reason`` as
    :class:`MemoryLoadError`'s)."""

    def __init__(self, message: str, path: str, reason: str) -> None:
        super().__init__(message, {"key": "instructions.files", "path": path, "reason": reason})
        self.path = path
        self.reason = reason
