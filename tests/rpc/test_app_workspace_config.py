"""A repository's workspace file in the app: refused keys do no harm, a broken file is left out
and reported, and a fixed one applies from the next use on."""

from __future__ import annotations

import asyncio
import os
from datetime import timedelta
from pathlib import Path
from typing import Any

from tether.protocol import ErrorCode, InitializeParams
from tether.protocol.sessions import CreateSessionParams, GetSessionParams
from tether.rpc.app import App, ClientChannel
from tether.sessions.ids import utcnow


def init(workspace: Path) -> InitializeParams:
    return InitializeParams.model_validate({"workspaceFolders": [{"uri": workspace.as_uri()}]})


def repository(tmp_path: Path, config: str) -> Path:
    folder = tmp_path / "repo"
    (folder / ".tether").mkdir(parents=True)
    (folder / ".tether" / "config.toml").write_text(config, encoding="utf-8")
    return folder


async def refuse(method: str, params: Any) -> Any:
    raise AssertionError(f"no request expected: {method}")


async def test_a_repository_with_a_short_ttl_deletes_no_session_of_the_durable_store(
    tmp_path: Path,
) -> None:
    environ = {"TETHER_SESSIONS_STORE": "sqlite", "TETHER_SESSIONS_PATH": str(tmp_path / "s.db")}
    own = tmp_path / "own"
    own.mkdir()
    first = App(environ=environ)
    first.initialize(init(own))
    ids = [(await first.sessions.create(CreateSessionParams())).session_id for _ in range(5)]
    await first.aclose()

    repo = repository(tmp_path, '[sessions]\nttl = "1s"\n')
    later = App(environ=environ, clock=lambda: utcnow() + timedelta(days=1))
    later.initialize(init(repo))
    await asyncio.sleep(0)  # lets the post-handshake start run (it would begin the sweep)
    try:
        assert later.config().sessions.ttl is None
        assert await later.sweep() == []
        for session_id in ids:
            await later.sessions.get(GetSessionParams(session_id=session_id))
        assert later.workspace_error is not None
        assert later.workspace_error.data["key"] == "sessions.ttl"
    finally:
        await later.aclose()


async def test_a_broken_workspace_file_is_reported_until_it_is_fixed(tmp_path: Path) -> None:
    repo = repository(tmp_path, "[kernel]\nmax_iterations = 0\n")
    notes: list[tuple[str, Any]] = []
    app = App(environ={"HOME": str(tmp_path)})
    app.attach_client(ClientChannel(lambda method, params: notes.append((method, params)), refuse))
    app.initialize(init(repo))
    await asyncio.sleep(0)  # lets the post-handshake start run
    try:
        assert app.config().kernel.max_iterations == 10
        [warning] = app.run_warnings()
        assert warning.code == ErrorCode.CONFIG_ERROR
        assert warning.data == {
            "key": "kernel.max_iterations",
            "source": str(repo / ".tether" / "config.toml"),
        }
        [(method, params)] = notes
        assert (method, params["type"]) == ("window/showMessage", 2)
        assert "kernel.max_iterations" in params["message"]
        assert app.run_warnings() == [warning]  # still there at the next run

        (repo / ".tether" / "config.toml").write_text("[kernel]\nmax_iterations = 17\n")
        assert app.config().kernel.max_iterations == 17
        assert app.run_warnings() == []
        assert app.workspace_error is None
    finally:
        await app.aclose()


async def test_a_broken_workspace_file_is_read_again_only_once_it_changes(tmp_path: Path) -> None:
    """Its device, inode, size and modification time say so: the same bytes count written over
    it with its old modification time put back is not seen (a file that is no change is not
    read and parsed again at each run)."""
    repo = repository(tmp_path, "[kernel]\nmax_iterations = 0\n")
    path = repo / ".tether" / "config.toml"
    app = App(environ={"HOME": str(tmp_path)})
    app.initialize(init(repo))
    try:
        assert app.config().kernel.max_iterations == 10 and app.workspace_error is not None
        before = path.stat()
        with path.open("r+") as file:  # same inode, same size
            file.write("[kernel]\nmax_iterations = 7\n")
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
        assert app.config().kernel.max_iterations == 10 and app.workspace_error is not None
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000))
        assert app.config().kernel.max_iterations == 7 and app.workspace_error is None
    finally:
        await app.aclose()


async def test_a_folder_broken_then_fixed_through_a_replaced_symlink_is_read_again(
    tmp_path: Path,
) -> None:
    repo = repository(tmp_path, "[kernel]\nmax_iterations = 0\n")
    path = repo / ".tether" / "config.toml"
    (repo / ".tether" / "good.toml").write_text("[kernel]\nmax_iterations = 3\n")
    (repo / ".tether" / "bad.toml").write_text("[kernel]\nmax_iterations = 0\n")
    path.unlink()
    path.symlink_to("bad.toml")
    app = App(environ={"HOME": str(tmp_path)})
    app.initialize(init(repo))
    try:
        assert app.workspace_error is not None
        path.unlink()
        path.symlink_to("good.toml")
        assert app.config().kernel.max_iterations == 3 and app.workspace_error is None
    finally:
        await app.aclose()


async def test_a_workspace_file_that_breaks_the_users_own_layers_keeps_what_was_loaded(
    tmp_path: Path,
) -> None:
    repo = repository(tmp_path, "[kernel]\nmax_iterations = 0\n")
    user = tmp_path / "home" / ".config" / "tether" / "config.toml"
    user.parent.mkdir(parents=True)
    user.write_text("[kernel]\nmax_iterations = 20\n")
    app = App(environ={"HOME": str(tmp_path / "home")})
    app.initialize(init(repo))
    try:
        user.write_text("[kernel]\nmax_iterations = oops\n")  # the user's file breaks meanwhile
        assert app.config().kernel.max_iterations == 20
        assert app.workspace_error is not None
    finally:
        await app.aclose()


async def test_each_workspace_folder_follows_its_own_file_read_and_trusted_alike(
    tmp_path: Path,
) -> None:
    first = repository(tmp_path / "a", '[tools]\nenabled = ["read_file", "list_files"]\n')
    second = repository(tmp_path / "b", '[tools]\nenabled = ["list_files"]\n')
    broken = repository(tmp_path / "c", '[tools]\napproval = "auto"\n')  # looser: refused
    notes: list[tuple[str, Any]] = []
    app = App(environ={"HOME": str(tmp_path)})
    app.attach_client(ClientChannel(lambda method, params: notes.append((method, params)), refuse))
    app.initialize(init(first))
    await asyncio.sleep(0)  # lets the post-handshake start run
    try:
        assert app.config().tools.enabled == ["read_file", "list_files"]
        assert app.config(second).tools.enabled == ["list_files"]
        assert app.config(first).tools.enabled == ["read_file", "list_files"]
        assert app.run_warnings(second) == []
        assert notes == []

        assert app.config(broken).tools.approval == "ask"
        [warning] = app.run_warnings(broken)
        assert warning.data == {
            "key": "tools.approval",
            "source": str(broken / ".tether" / "config.toml"),
        }
        assert app.config(broken) is not None  # asked again: read again, told once
        [(method, params)] = notes
        assert (method, params["type"]) == ("window/showMessage", 2)
        assert app.run_warnings() == [] and app.workspace_error is None
    finally:
        await app.aclose()
