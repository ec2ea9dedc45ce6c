"""The checkpoint store on its own: what a snapshot tracks, the size caps, exact restores."""

from __future__ import annotations

import asyncio
import os
import subprocess
import threading
from pathlib import Path

import pytest

from tests.checkpoints.stalled_git import stalled_git
from tether.checkpoints import Checkpoint, CheckpointError, CheckpointStore, RewindConflict
from tether.tools.processes import is_alive

pytestmark = pytest.mark.skipif(
    subprocess.run(["git", "--version"], capture_output=True).returncode != 0,
    reason="checkpoints need git",
)


EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


def checkpoint(store: CheckpointStore, workspace: Path, change: object) -> Checkpoint:
    """Snapshot, apply ``change`` (a callable), snapshot again: the checkpoint between."""
    before = store.snapshot(workspace, modes=True)
    assert callable(change)
    change()
    after = store.snapshot(workspace)
    files = store.changed(workspace, before.tree, after.tree)
    return Checkpoint(
        checkpoint_id="c",
        session_id="s",
        run_id="r",
        message_id="m",
        workspace=str(workspace),
        before=before.tree,
        after=after.tree,
        files=files,
        skipped=after.skipped_since(before),
        modes={p: m for p, m in before.modes.items() if p in files},
        created_at="2026-01-01T00:00:00+00:00",
    )


def test_ignored_files_the_git_directory_and_nested_repositories_are_not_tracked(
    tmp_path: Path, workspace: Path
) -> None:
    (workspace / ".gitignore").write_text("*.log\n")
    (workspace / ".ignore").write_text("cache/\n")
    (workspace / "nested").mkdir()
    subprocess.run(["git", "init", "-q"], cwd=workspace / "nested", check=True)
    store = CheckpointStore(tmp_path / "store")

    def change() -> None:
        (workspace / "a.log").write_text("log")
        (workspace / "cache").mkdir()
        (workspace / "cache" / "x").write_text("x")
        (workspace / "nested" / "inner.txt").write_text("inner")
        (workspace / "kept.txt").write_text("kept")

    assert checkpoint(store, workspace, change).files == ["kept.txt"]


def test_files_over_the_caps_are_reported_and_left_alone_by_a_rewind(
    tmp_path: Path, workspace: Path
) -> None:
    store = CheckpointStore(tmp_path / "store", max_file_bytes=10, max_checkpoint_bytes=12)

    def change() -> None:
        (workspace / "big.bin").write_bytes(b"x" * 11)
        (workspace / "small1").write_bytes(b"123456")
        (workspace / "small2").write_bytes(b"1234567")

    (workspace / "always.bin").write_bytes(b"y" * 11)  # over the cap, the run leaves it be
    made = checkpoint(store, workspace, change)
    assert made.skipped == ["big.bin", "small2"]  # over the file cap; over the total
    assert made.files == ["small1"]
    rewound = store.rewind(workspace, [made])
    assert (rewound.restored, rewound.removed) == ([], ["small1"])
    assert sorted(os.listdir(workspace)) == ["always.bin", "big.bin", "small2"]


def test_symlinks_and_permission_bits_come_back_as_they_were(
    tmp_path: Path, workspace: Path
) -> None:
    (workspace / "target").write_text("t")
    (workspace / "link").symlink_to("target")
    (workspace / "locked").write_text("secret")
    (workspace / "locked").chmod(0o400)
    store = CheckpointStore(tmp_path / "store")

    def change() -> None:
        (workspace / "link").unlink()
        (workspace / "link").write_text("now a file")
        (workspace / "locked").chmod(0o600)
        (workspace / "locked").write_text("changed")

    made = checkpoint(store, workspace, change)
    assert made.files == ["link", "locked"]
    store.rewind(workspace, [made])
    assert os.readlink(workspace / "link") == "target"
    assert (workspace / "locked").read_text() == "secret"
    assert (workspace / "locked").stat().st_mode & 0o777 == 0o400


def test_a_second_store_on_the_same_directory_sees_the_checkpoints_and_the_conflicts(
    tmp_path: Path, workspace: Path
) -> None:
    (workspace / "a").write_text("1")
    one = CheckpointStore(tmp_path / "store")
    made = checkpoint(one, workspace, lambda: (workspace / "a").write_text("2"))
    one.save(made)
    (workspace / "a").write_text("by hand")

    other = CheckpointStore(tmp_path / "store")
    [found] = other.of_messages(["m"])
    with pytest.raises(RewindConflict) as conflict:
        other.rewind(workspace, [found])
    assert conflict.value.paths == ["a"]
    assert other.rewind(workspace, [found], force=True).restored == ["a"]
    assert (workspace / "a").read_text() == "1"
    assert one.rewind(workspace, [found]).restored == ["a"]  # its own rewind is no conflict


def test_a_rewind_never_writes_through_a_symlink_out_of_the_workspace(
    tmp_path: Path, workspace: Path
) -> None:
    (workspace / "d").mkdir()
    (workspace / "kept").write_text("1")
    outside = tmp_path / "outside"
    outside.mkdir()
    store = CheckpointStore(tmp_path / "store")

    def change() -> None:
        (workspace / "kept").write_text("2")
        (workspace / "d" / "f").write_text("f")

    made = checkpoint(store, workspace, change)
    assert made.files == ["d/f", "kept"]
    (workspace / "d" / "f").unlink()
    (workspace / "d").rmdir()
    (workspace / "d").symlink_to(outside)  # by hand, since: d/f would now be outside/f
    (outside / "f").write_text("not tether's")
    with pytest.raises(CheckpointError):
        store.rewind(workspace, [made], force=True)
    assert (outside / "f").read_text() == "not tether's"
    assert (workspace / "kept").read_text() == "2"  # nothing changed


def test_a_snapshot_of_named_paths_looks_at_them_only_and_still_ignores_what_is_ignored(
    tmp_path: Path, workspace: Path
) -> None:
    (workspace / ".gitignore").write_text("*.log\n")
    (workspace / "a").write_text("1")
    (workspace / "other").write_text("1")
    store = CheckpointStore(tmp_path / "store")
    base = store.snapshot(workspace)
    (workspace / "other").write_text("changed, not named")
    (workspace / "a").write_text("2")
    (workspace / "new").write_text("new")
    (workspace / "x.log").write_text("ignored")

    named = store.snapshot(workspace, paths={"a", "new", "x.log", "gone"}, modes=True)
    assert store.changed(workspace, base.tree, named.tree) == ["a", "new"]
    full = store.snapshot(workspace)
    assert store.changed(workspace, named.tree, full.tree) == ["other"]


def test_a_collection_prunes_what_no_checkpoint_refers_to(tmp_path: Path, workspace: Path) -> None:
    (workspace / "a").write_text("first")
    (workspace / "b").write_text("b1")
    store = CheckpointStore(tmp_path / "store")
    kept = checkpoint(store, workspace, lambda: (workspace / "a").write_text("second"))
    store.save(kept)
    dropped = checkpoint(store, workspace, lambda: (workspace / "b").write_text("b2"))
    dropped.checkpoint_id = "dropped"
    store.save(dropped)
    (workspace / "b").write_text("b3")
    store.snapshot(workspace)  # b2 is now in the dropped checkpoint only
    git = ["git", "--git-dir", str(next((tmp_path / "store").glob("workspaces/*/git")))]

    def stored(data: bytes) -> bool:
        blob = (
            subprocess.run(
                [*git, "hash-object", "--stdin"], input=data, capture_output=True, check=True
            )
            .stdout.decode()
            .strip()
        )
        return subprocess.run([*git, "cat-file", "-e", blob]).returncode == 0

    assert stored(b"b2")
    store.index.drop(["dropped"])
    assert store.collect(workspace, interval=0)
    assert not stored(b"b2")
    assert stored(b"first") and stored(b"second") and stored(b"b3")
    assert store.rewind(workspace, [kept]).restored == ["a"]
    assert (workspace / "a").read_text() == "first"
    assert not store.collect(workspace, interval=3600)  # not due again so soon


def test_the_home_folder_and_the_root_are_not_prepared_ahead_but_a_project_is(
    tmp_path: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    store = CheckpointStore(tmp_path / "store")
    snapshots: list[Path] = []
    monkeypatch.setattr(store, "snapshot", lambda folder, **_: snapshots.append(folder))

    for folder in (home, Path("/"), workspace):
        store.prewarm(folder)
    for thread in threading.enumerate():
        if thread.name == "tether-checkpoints":
            thread.join(10)

    assert snapshots == [workspace]


def test_a_closing_store_ends_a_snapshot_still_running_and_the_next_one_finds_it_clean(
    tmp_path: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (workspace / "a.txt").write_text("a\n")
    stalled = stalled_git(tmp_path / "bin", os.environ["PATH"])
    monkeypatch.setenv("PATH", stalled.path)
    store = CheckpointStore(tmp_path / "store")
    store.prewarm(workspace)
    try:
        git = asyncio.run(stalled.stalling())
        home = next((tmp_path / "store" / "workspaces").iterdir())
        assert (home / "index.lock").exists()

        store.close(wait=0.1)

        assert not is_alive(git)
    finally:
        stalled.sweep()
    assert not (home / "index.lock").exists()
    with pytest.raises(CheckpointError):
        store.snapshot(workspace)  # closed: nothing starts any more
    monkeypatch.undo()
    again = CheckpointStore(tmp_path / "store")
    snapshot = again.snapshot(workspace)
    assert again.changed(workspace, EMPTY_TREE, snapshot.tree) == ["a.txt"]


def test_a_lock_left_by_a_process_killed_midway_is_cleared_by_the_next_snapshot(
    tmp_path: Path, workspace: Path
) -> None:
    (workspace / "a.txt").write_text("a\n")
    store = CheckpointStore(tmp_path / "store")
    store.snapshot(workspace)
    home = next((tmp_path / "store" / "workspaces").iterdir())
    left = [home / "index.lock", home / "git" / "objects" / "pack" / "tmp_pack_x"]
    for path in left:
        path.write_bytes(b"half")
    (workspace / "b.txt").write_text("b\n")

    snapshot = store.snapshot(workspace)

    assert not any(path.exists() for path in left)
    assert store.changed(workspace, EMPTY_TREE, snapshot.tree) == ["a.txt", "b.txt"]


def test_a_closing_store_waits_for_nothing_when_nothing_runs(
    tmp_path: Path, workspace: Path
) -> None:
    store = CheckpointStore(tmp_path / "store")
    store.snapshot(workspace)
    store.close()
    store.prewarm(workspace / "other")  # closed: not started
    assert not [t for t in threading.enumerate() if t.name == "tether-checkpoints"]
