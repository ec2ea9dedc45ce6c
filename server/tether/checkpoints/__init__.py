"""Checkpoints of a workspace's files, kept apart from the user's own git repository, so that a
session can be rewound to the state before any of its turns (see :mod:`.store`)."""

from tether.checkpoints.errors import CheckpointError, RewindConflict
from tether.checkpoints.index import Checkpoint
from tether.checkpoints.store import CheckpointStore, Rewound, Snapshot

__all__ = [
    "Checkpoint",
    "CheckpointError",
    "CheckpointStore",
    "RewindConflict",
    "Rewound",
    "Snapshot",
]
