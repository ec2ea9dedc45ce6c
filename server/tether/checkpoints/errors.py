"""The errors of the checkpoint store.

CheckpointError          the store could not record or restore (git missing, disk full...)
RewindConflict           files changed outside tether since it last recorded them
"""

from __future__ import annotations


class CheckpointError(Exception):
    """The checkpoint store failed; the message says why."""


class RewindConflict(CheckpointError):
    """Files changed outside tether since it last recorded them: a rewind would lose those
    changes, so nothing was changed."""

    def __init__(self, paths: list[str]) -> None:
        super().__init__(f"changed outside tether since it last recorded them: {', '.join(paths)}")
        self.paths = paths
