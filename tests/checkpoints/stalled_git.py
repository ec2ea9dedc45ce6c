"""A ``git`` that stalls: put first on ``PATH``, it runs the real git for every command but
``update-index`` (the one a snapshot spends its time in, hashing the workspace's files), which
takes git's lock on the index and then sleeps: a first snapshot still under way, for as long as
a test needs it. Whatever ends it (``SIGTERM``, ``SIGKILL``) leaves the lock behind, as a git
killed midway does.

Its processes carry the test's tag (:mod:`tests.processes`), so a test finds any that is left.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from tests.processes import (
    TAG_VARIABLE,
    appear,
    kill_all,
    new_tag,
    tagged,
    unique_seconds,
    with_argument,
)


@dataclass(frozen=True)
class StalledGit:
    path: str  # the PATH that finds it first
    started: Path  # made as the first stall starts
    tag: str
    seconds: str  # the sleep's argument, found on no other command line

    def env(self) -> dict[str, str]:
        """The environment of a tether process whose snapshots stall."""
        return {"PATH": self.path, TAG_VARIABLE: self.tag}

    def sweep(self) -> set[int]:
        """What is still running of it, or of the process it ran under, killed (nothing
        outlives the test); their pids, found before they were killed."""
        found = tagged(self.tag) | with_argument(self.seconds)
        kill_all(found)
        return found

    async def stalling(self) -> int:
        """The pid of the git that stalls, once one does (a bounded wait)."""
        [pid] = await appear(lambda: with_argument(self.seconds), 1)
        return pid


def stalled_git(folder: Path, path: str) -> StalledGit:
    """Install the stalling git in ``folder`` (``path``: the PATH to put it in front of)."""
    real = shutil.which("git")
    assert real is not None
    folder.mkdir(parents=True, exist_ok=True)
    seconds = unique_seconds()
    started = folder / "started"
    script = folder / "git"
    script.write_text(
        "#!/bin/sh\n"
        'for arg in "$@"; do\n'
        '  if [ "$arg" = update-index ]; then\n'
        '    : > "$GIT_INDEX_FILE.lock"\n'
        f"    : > {started}\n"
        f"    exec sleep {seconds}\n"
        "  fi\n"
        "done\n"
        f'exec {real} "$@"\n'
    )
    script.chmod(0o755)
    return StalledGit(f"{folder}:{path}", started, new_tag(), seconds)
