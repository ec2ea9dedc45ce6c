"""``session/checkpoints`` and ``session/rewind``: the files each turn changed, and going back to
the state before a turn (files, history, or both)."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from tether.protocol.base import WireModel
from tether.protocol.sessions import SessionRef


class CheckpointsParams(SessionRef):
    pass


class CheckpointInfo(WireModel):
    """What one turn changed in the workspace's tracked files."""

    checkpoint_id: str
    message_id: str = Field(description="the turn's prompt (`run_started.userMessageId`)")
    run_id: str
    created_at: datetime
    files: list[str] = Field(description="the paths it changed, relative to the workspace")
    skipped: list[str] | None = Field(
        default=None, description="paths it changed that a size cap left untracked"
    )


class CheckpointsResult(WireModel):
    checkpoints: list[CheckpointInfo] = Field(description="oldest first")


class RewindParams(SessionRef):
    message_id: str = Field(min_length=1, description="the prompt of a turn of this session")
    files: bool = Field(
        default=True, description="restore the files to their state before that turn began"
    )
    history: bool = Field(
        default=False, description="remove that prompt and every later message of the session"
    )
    force: bool = Field(
        default=False, description="overwrite files changed outside tether since it recorded them"
    )


class RewindResult(WireModel):
    restored: list[str] = Field(description="files written back as they were")
    removed: list[str] = Field(description="files the later turns created, deleted")
    messages_removed: int = 0


class UndoParams(SessionRef):
    """The files of the session's last turn that changed any put back (the faces' ``/undo``)."""

    force: bool = Field(
        default=False, description="overwrite files changed outside tether since it recorded them"
    )
