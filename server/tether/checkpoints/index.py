"""The index of checkpoints: which session, run and prompt each belongs to, the trees before and
after it, the files it changed; and, per workspace, the tree tether last recorded (what a file on
disk is compared with to tell a change made outside tether). A small SQLite file beside the
repositories, shared by every tether process of the user (SQLite locks it)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Collection, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

_SCHEMA = """
CREATE TABLE IF NOT EXISTS checkpoints (
    id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    message_id TEXT NOT NULL,
    workspace TEXT NOT NULL,
    before_tree TEXT NOT NULL,
    after_tree TEXT NOT NULL,
    files TEXT NOT NULL,
    skipped TEXT NOT NULL,
    modes TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS checkpoints_by_message ON checkpoints (message_id);
CREATE INDEX IF NOT EXISTS checkpoints_by_session ON checkpoints (session_id);
CREATE TABLE IF NOT EXISTS workspaces (
    workspace TEXT PRIMARY KEY,
    last_tree TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS collections (
    workspace TEXT PRIMARY KEY,
    collected_at REAL NOT NULL
);
"""
_COLUMNS = (
    "id, session_id, run_id, message_id, workspace, before_tree, after_tree, files, skipped, "
    "modes, created_at"
)


@dataclass(kw_only=True)
class Checkpoint:
    """What one run changed in its workspace: the tree before its first edit or command, the
    tree after its last step, and the paths that differ (relative, ``/``-separated)."""

    checkpoint_id: str
    session_id: str
    run_id: str
    message_id: str  # the run's prompt
    workspace: str
    before: str
    after: str
    files: list[str]
    skipped: list[str] = field(default_factory=list)  # over a size cap: not tracked
    modes: dict[str, int] = field(default_factory=dict)  # permission bits git does not keep
    created_at: str


class Index:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._ready = False

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        with closing(sqlite3.connect(self.path, timeout=30.0, isolation_level=None)) as db:
            if not self._ready:
                db.execute("PRAGMA journal_mode=WAL")
                db.executescript(_SCHEMA)
                self._ready = True
            yield db

    def save(self, checkpoint: Checkpoint) -> None:
        """Add the checkpoint, or replace it (a run's later steps widen its files)."""
        c = checkpoint
        row = (
            c.checkpoint_id,
            c.session_id,
            c.run_id,
            c.message_id,
            c.workspace,
            c.before,
            c.after,
            json.dumps(c.files),
            json.dumps(c.skipped),
            json.dumps(c.modes),
            c.created_at,
        )
        with self._connect() as db:
            db.execute(
                f"INSERT OR REPLACE INTO checkpoints ({_COLUMNS}) VALUES ({'?,' * 10}?)", row
            )

    def of_messages(self, message_ids: Collection[str]) -> list[Checkpoint]:
        """The checkpoints whose prompt is one of ``message_ids``, oldest first."""
        ids = list(message_ids)
        found: list[Checkpoint] = []
        with self._connect() as db:
            for start in range(0, len(ids), 500):
                chunk = ids[start : start + 500]
                marks = ",".join("?" * len(chunk))
                query = f"SELECT {_COLUMNS} FROM checkpoints WHERE message_id IN ({marks})"
                found.extend(_checkpoint(row) for row in db.execute(query, chunk))
        return sorted(found, key=lambda c: (c.created_at, c.checkpoint_id))

    def of_session(self, session_id: str) -> list[Checkpoint]:
        """The checkpoints the runs of this session recorded."""
        query = f"SELECT {_COLUMNS} FROM checkpoints WHERE session_id = ?"
        with self._connect() as db:
            return [_checkpoint(row) for row in db.execute(query, (session_id,))]

    def drop(self, checkpoint_ids: Collection[str]) -> None:
        ids = list(checkpoint_ids)
        with self._connect() as db:
            for start in range(0, len(ids), 500):
                chunk = ids[start : start + 500]
                marks = ",".join("?" * len(chunk))
                db.execute(f"DELETE FROM checkpoints WHERE id IN ({marks})", chunk)

    def trees(self, workspace: str) -> set[str]:
        """Every tree the workspace's checkpoints, and its last recorded state, refer to."""
        with self._connect() as db:
            rows = db.execute(
                "SELECT before_tree, after_tree FROM checkpoints WHERE workspace = ? "
                "UNION SELECT last_tree, last_tree FROM workspaces WHERE workspace = ?",
                (workspace, workspace),
            ).fetchall()
        return {tree for row in rows for tree in row}

    def start_collection(self, workspace: str, now: float, interval: float) -> bool:
        """Whether the workspace's store is due for a collection (none for ``interval``
        seconds); if so, it is noted as collected ``now``."""
        with self._connect() as db:
            db.execute("BEGIN IMMEDIATE")
            row = db.execute(
                "SELECT collected_at FROM collections WHERE workspace = ?", (workspace,)
            ).fetchone()
            # the first deletion starts the clock: a store is not repacked for nothing
            due = interval <= 0 if row is None else now - float(row[0]) >= interval
            if due or row is None:
                db.execute(
                    "INSERT OR REPLACE INTO collections (workspace, collected_at) VALUES (?, ?)",
                    (workspace, now),
                )
            db.execute("COMMIT")
        return due

    def last_tree(self, workspace: str) -> str | None:
        with self._connect() as db:
            row = db.execute(
                "SELECT last_tree FROM workspaces WHERE workspace = ?", (workspace,)
            ).fetchone()
        return None if row is None else str(row[0])

    def set_last_tree(self, workspace: str, tree: str) -> None:
        with self._connect() as db:
            db.execute(
                "INSERT OR REPLACE INTO workspaces (workspace, last_tree) VALUES (?, ?)",
                (workspace, tree),
            )


def _checkpoint(row: tuple[str, ...]) -> Checkpoint:
    return Checkpoint(
        checkpoint_id=row[0],
        session_id=row[1],
        run_id=row[2],
        message_id=row[3],
        workspace=row[4],
        before=row[5],
        after=row[6],
        files=json.loads(row[7]),
        skipped=json.loads(row[8]),
        modes=json.loads(row[9]),
        created_at=row[10],
    )
