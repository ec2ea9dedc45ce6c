"""Checkpoints through real ``tether serve`` processes on a shared store (a SQLite file, a
PostgreSQL database) and a shared checkpoint store: a turn's edits, new files and a command's
changes are rewound exactly (bytes and modes), by the server that ran it or by another one; an
older turn's rewind undoes the later ones; ``history`` removes the turn; a file changed outside
tether is a conflict unless forced; the workspace's own ``.git`` never changes.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import stat
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

import pytest

from tests.checkpoints.stalled_git import stalled_git
from tether.client import Connection, RpcError
from tether.protocol import ErrorCode
from tether.testing import tool_call

from .conftest import SERVER, initialized, script_options
from .test_leases import BLOCKING_TURNS, open_gate, start_blocked_run

WAIT = 60.0

pytestmark = pytest.mark.skipif(
    subprocess.run(["git", "--version"], capture_output=True).returncode != 0,
    reason="checkpoints need git",
)

FIRST_TURN = [
    {
        "toolCalls": [
            tool_call("edit_file", "e1", path="app.py", old_string="1", new_string="2"),
            tool_call("write_file", "w1", path="notes/new.md", content="# new\n"),
        ]
    },
    {
        "toolCalls": [
            tool_call(
                "run_command",
                "c1",
                command="mkdir -p build && echo out > build/out.txt && rm old.txt "
                "&& chmod 600 run.sh && mv data.bin moved.bin",
            )
        ]
    },
    {"text": "done"},
]
SECOND_TURN = [
    {"toolCalls": [tool_call("write_file", "w2", path="app.py", content="version = 3\n")]},
    {"text": "again"},
]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A workspace that is a git repository of its own, with a commit, a stash and an index."""
    root = tmp_path / "project"
    root.mkdir()
    (root / "app.py").write_text("version = 1\n")
    (root / "old.txt").write_bytes(b"old\r\nbytes\x00\xff")
    (root / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (root / "run.sh").chmod(0o750)
    (root / "data.bin").write_bytes(bytes(range(256)))
    (root / "private.txt").write_text("mine\n")
    (root / "private.txt").chmod(0o600)
    (root / ".gitignore").write_text("ignored/\n")
    (root / "ignored").mkdir()
    (root / "ignored" / "cache").write_text("not tracked\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
    for args in (
        ["init", "-q"],
        ["add", "-A"],
        ["commit", "-qm", "first"],
    ):
        subprocess.run([*git, *args], cwd=root, check=True)
    (root / "app.py").write_text("version = 1  # stashed\n")
    subprocess.run([*git, "stash", "-q"], cwd=root, check=True)
    (root / "private.txt").write_text("mine\n")
    subprocess.run([*git, "add", "private.txt"], cwd=root, check=True)
    return root


@pytest.fixture(params=["sqlite", "postgres"])
def store_env(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    if request.param == "sqlite":
        return {"TETHER_SESSIONS_STORE": "sqlite", "TETHER_SESSIONS_PATH": str(tmp_path / "s.db")}
    return {"TETHER_SESSIONS_STORE": request.getfixturevalue("postgres_url")}


class Spawn(Protocol):
    def __call__(
        self, name: str, turns: list[dict[str, Any]], **checkpoints: Any
    ) -> Awaitable[Connection]: ...


@pytest.fixture
async def spawn(project: Path, store_env: dict[str, str], tmp_path: Path) -> AsyncIterator[Spawn]:
    """Servers on the shared session store and the shared checkpoint store (``checkpoints``:
    more of that section's settings)."""
    started: list[Connection] = []

    async def start(name: str, turns: list[dict[str, Any]], **checkpoints: Any) -> Connection:
        connection = await Connection.spawn(SERVER, env=store_env)
        started.append(connection)
        options = script_options(
            project,
            turns,
            name=name,
            tools={"approval": "auto", "sandbox": "off"},
            checkpoints={"path": str(tmp_path / "checkpoints"), **checkpoints},
        )
        await initialized(connection, project, options)
        return connection

    yield start
    for connection in started:
        await connection.close()


def files_of(root: Path) -> dict[str, tuple[bytes, int]]:
    """Every file outside ``.git`` with its bytes and permission bits."""
    found: dict[str, tuple[bytes, int]] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if rel == ".git" or rel.startswith(".git/") or not path.is_file():
            continue
        found[rel] = (path.read_bytes(), stat.S_IMODE(path.stat().st_mode))
    return found


def git_state(root: Path) -> dict[str, bytes]:
    """The user's repository as bytes: HEAD, index, refs, stash, reflogs, config."""
    git = root / ".git"
    return {
        path.relative_to(git).as_posix(): path.read_bytes()
        for path in sorted(git.rglob("*"))
        if path.is_file() and not path.relative_to(git).as_posix().startswith("objects/")
    } | {"objects": "\n".join(sorted(p.name for p in (git / "objects").rglob("*"))).encode()}


async def run_turn(server: Connection, sid: str, prompt: str) -> tuple[str, list[dict[str, Any]]]:
    """Run a turn; its prompt's message id and its progress events."""
    result = await asyncio.wait_for(
        server.request("kernel/run", {"sessionId": sid, "prompt": prompt}), WAIT
    )
    events = []
    while not server.notifications.empty():
        method, params = server.notifications.get_nowait()
        if method == "kernel/progress" and params["runId"] == result["runId"]:
            events.append(params["event"])
    [started] = [e for e in events if e["kind"] == "run_started"]
    return started["userMessageId"], events


async def test_a_turn_is_rewound_exactly_by_its_server_and_by_another_one(
    spawn: Spawn, project: Path
) -> None:
    pristine, repository = files_of(project), git_state(project)
    a = await spawn("a", FIRST_TURN)
    sid = (await a.request("session/create", {}))["sessionId"]
    prompt, events = await run_turn(a, sid, "change things")

    [*_, recorded] = [e for e in events if e["kind"] == "checkpoint"]
    changed = [
        "app.py",
        "build/out.txt",
        "data.bin",
        "moved.bin",
        "notes/new.md",
        "old.txt",
        "run.sh",
    ]
    assert recorded["files"] == changed
    [checkpoint] = (await a.request("session/checkpoints", {"sessionId": sid}))["checkpoints"]
    assert checkpoint["checkpointId"] == recorded["checkpointId"]
    assert (checkpoint["messageId"], checkpoint["files"]) == (prompt, changed)
    assert files_of(project) != pristine
    assert git_state(project) == repository

    b = await spawn("b", [])
    rewound = await b.request("session/rewind", {"sessionId": sid, "messageId": prompt})
    assert rewound == {
        "restored": ["app.py", "data.bin", "old.txt", "run.sh"],
        "removed": ["build/out.txt", "moved.bin", "notes/new.md"],
        "messagesRemoved": 0,
    }
    assert files_of(project) == pristine  # run.sh is 750 again
    assert not (project / "build").exists() and not (project / "notes").exists()
    assert (project / "ignored" / "cache").read_text() == "not tracked\n"
    assert git_state(project) == repository
    history = (await a.request("session/messages", {"sessionId": sid}))["messages"]
    assert history[0]["id"] == prompt  # files only: the history stays


async def test_rewinding_an_older_turn_undoes_the_later_ones_and_history_removes_them(
    spawn: Spawn, project: Path
) -> None:
    pristine, repository = files_of(project), git_state(project)
    a = await spawn("a", FIRST_TURN + SECOND_TURN)
    sid = (await a.request("session/create", {}))["sessionId"]
    first, _ = await run_turn(a, sid, "change things")
    after_first = files_of(project)
    second, _ = await run_turn(a, sid, "change again")
    assert (project / "app.py").read_text() == "version = 3\n"
    checkpoints = (await a.request("session/checkpoints", {"sessionId": sid}))["checkpoints"]
    assert [c["messageId"] for c in checkpoints] == [first, second]

    undone = await a.request("session/rewind", {"sessionId": sid, "messageId": second})
    assert (undone["restored"], undone["removed"]) == (["app.py"], [])
    assert files_of(project) == after_first

    rewound = await a.request(
        "session/rewind", {"sessionId": sid, "messageId": first, "history": True}
    )
    assert rewound["messagesRemoved"] == 7 + 4  # both turns
    assert files_of(project) == pristine
    session = await a.request("session/get", {"sessionId": sid})
    assert session["messageCount"] == 0
    assert (await a.request("session/checkpoints", {"sessionId": sid}))["checkpoints"] == []
    assert git_state(project) == repository


async def test_a_file_changed_outside_tether_is_a_conflict_unless_forced(
    spawn: Spawn, project: Path
) -> None:
    a = await spawn("a", FIRST_TURN)
    sid = (await a.request("session/create", {}))["sessionId"]
    prompt, _ = await run_turn(a, sid, "change things")
    (project / "app.py").write_text("edited by hand\n")
    before = files_of(project)

    with pytest.raises(RpcError) as refused:
        await a.request("session/rewind", {"sessionId": sid, "messageId": prompt})
    assert refused.value.code == ErrorCode.INVALID_PARAMS
    assert refused.value.data["paths"] == ["app.py"]
    assert files_of(project) == before  # nothing changed

    forced = {"sessionId": sid, "messageId": prompt, "force": True}
    assert "app.py" in (await a.request("session/rewind", forced))["restored"]
    assert (project / "app.py").read_text() == "version = 1\n"


async def test_rewind_errors_name_the_session_and_the_message(spawn: Spawn, project: Path) -> None:
    a = await spawn("a", [{"text": "hello"}])
    sid = (await a.request("session/create", {}))["sessionId"]
    await run_turn(a, sid, "hi")
    [_, answer] = (await a.request("session/messages", {"sessionId": sid}))["messages"]

    with pytest.raises(RpcError) as unknown:
        await a.request("session/rewind", {"sessionId": "nope", "messageId": answer["id"]})
    assert unknown.value.code == ErrorCode.SESSION_NOT_FOUND
    with pytest.raises(RpcError) as not_a_prompt:
        await a.request("session/rewind", {"sessionId": sid, "messageId": answer["id"]})
    assert not_a_prompt.value.code == ErrorCode.INVALID_PARAMS
    assert not_a_prompt.value.data["fields"][0]["field"] == "messageId"


async def test_a_fork_restoring_files_goes_back_to_its_fork_point(
    spawn: Spawn, project: Path
) -> None:
    a = await spawn("a", FIRST_TURN + SECOND_TURN)
    sid = (await a.request("session/create", {}))["sessionId"]
    await run_turn(a, sid, "change things")
    after_first = files_of(project)
    second, _ = await run_turn(a, sid, "change again")
    history = (await a.request("session/messages", {"sessionId": sid}))["messages"]
    end_of_first = history[[m["id"] for m in history].index(second) - 1]

    fork = await a.request(
        "session/fork",
        {"sessionId": sid, "atMessageId": end_of_first["id"], "restoreFiles": True},
    )
    assert fork["messageCount"] == len(history) - 4  # the second turn left out
    assert files_of(project) == after_first


async def test_a_rewind_is_refused_while_a_run_of_another_server_holds_the_session(
    spawn: Spawn, project: Path
) -> None:
    os.mkfifo(project / "gate")
    a = await spawn("a", FIRST_TURN + BLOCKING_TURNS)
    b = await spawn("b", [])
    sid = (await a.request("session/create", {}))["sessionId"]
    prompt, _ = await run_turn(a, sid, "change things")
    run, _ = await start_blocked_run(a, sid)
    try:
        with pytest.raises(RpcError) as busy:
            await b.request("session/rewind", {"sessionId": sid, "messageId": prompt})
        assert busy.value.code == ErrorCode.SESSION_BUSY
        assert (project / "app.py").read_text() == "version = 2\n"  # nothing changed
    finally:
        await open_gate(project)
    await asyncio.wait_for(run, WAIT)
    rewound = await b.request("session/rewind", {"sessionId": sid, "messageId": prompt})
    assert "app.py" in rewound["restored"]


def store_git(tmp_path: Path) -> list[str]:
    """A git command over the one workspace repository of the shared checkpoint store."""
    [git_dir] = (tmp_path / "checkpoints" / "workspaces").glob("*/git")
    return ["git", "--git-dir", str(git_dir)]


def has_object(tmp_path: Path, data: bytes) -> bool:
    """Whether the checkpoint store holds a blob of these bytes."""
    blob = hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()
    check = [*store_git(tmp_path), "cat-file", "-e", blob]
    return subprocess.run(check, capture_output=True).returncode == 0


async def until(condition: Callable[[], bool]) -> None:
    """Wait for what a server does in the background (within WAIT seconds)."""
    async with asyncio.timeout(WAIT):
        while not condition():  # noqa: ASYNC110 - nothing to wait on but the other process
            await asyncio.sleep(0.05)


async def test_a_new_session_prepares_the_store_before_any_run(
    spawn: Spawn, project: Path, tmp_path: Path
) -> None:
    a = await spawn("a", [])
    await a.request("session/create", {})
    home = tmp_path / "checkpoints" / "workspaces"
    await until(lambda: any(home.glob("*/index")))  # the first snapshot, in the background
    await until(lambda: has_object(tmp_path, (project / "data.bin").read_bytes()))


async def test_each_session_of_a_workspace_lists_only_what_its_own_turns_changed(
    spawn: Spawn, project: Path
) -> None:
    """A turn of another session (another process) writes a file between two steps of a
    turn of this one: that file is the other turn's, not this one's."""
    slow = [
        {"toolCalls": [tool_call("write_file", "a1", path="a.txt", content="a\n")]},
        # B's turn runs during this model call (or during the step it asks for)
        {"toolCalls": [tool_call("write_file", "a2", path="a2.txt", content="a2\n")], "delay": 3},
        {"text": "done"},
    ]
    a = await spawn("a", slow)
    b = await spawn(
        "b",
        [
            {"toolCalls": [tool_call("write_file", "b1", path="b.txt", content="b\n")]},
            {"text": "b"},
        ],
    )
    first = (await a.request("session/create", {}))["sessionId"]
    second = (await b.request("session/create", {}))["sessionId"]
    run = a.start_request("kernel/run", {"sessionId": first, "prompt": "write a"})[1]
    while True:  # A's first step is recorded
        method, params = await asyncio.wait_for(a.notifications.get(), WAIT)
        if method == "kernel/progress" and params["event"]["kind"] == "checkpoint":
            break
    await run_turn(b, second, "write b")
    await asyncio.wait_for(run, WAIT)

    [of_a] = (await a.request("session/checkpoints", {"sessionId": first}))["checkpoints"]
    [of_b] = (await b.request("session/checkpoints", {"sessionId": second}))["checkpoints"]
    assert of_a["files"] == ["a.txt", "a2.txt"]
    assert of_b["files"] == ["b.txt"]
    rewound = await a.request(
        "session/rewind", {"sessionId": first, "messageId": of_a["messageId"]}
    )
    assert rewound["removed"] == ["a.txt", "a2.txt"]
    assert (project / "b.txt").read_text() == "b\n"


async def test_undo_and_rewind_are_commands_of_the_session(spawn: Spawn, project: Path) -> None:
    pristine = files_of(project)
    a = await spawn("a", FIRST_TURN + SECOND_TURN)
    sid = (await a.request("session/create", {}))["sessionId"]

    async def command(text: str) -> str:
        result = await a.request("kernel/run", {"sessionId": sid, "prompt": text})
        answer: str = result["response"]
        return answer

    assert await command("/undo") == "Nothing to undo: no turn of this session changed files."
    await run_turn(a, sid, "change things")
    after_first = files_of(project)
    await run_turn(a, sid, "change again")

    listing = await command("/rewind")
    assert listing.splitlines()[0] == "Turns that changed files (/rewind N undoes the last N):"
    assert listing.splitlines()[1].endswith(": app.py")  # the last turn is 1
    assert "notes/new.md" in listing.splitlines()[2]
    assert (
        await command("/undo")
        == "Undid the changes of the last turn to the files:\n- restored app.py"
    )
    assert files_of(project) == after_first

    (project / "moved.bin").write_bytes(b"by hand")
    refused = await command("/rewind 2")
    assert refused == (
        "Nothing was changed: these files changed outside tether since it recorded them: "
        "moved.bin. session/rewind with force: true overwrites them."
    )
    (project / "moved.bin").write_bytes(bytes(range(256)))  # as the turn left it
    undone = await command("/rewind 2")
    assert undone.splitlines()[0] == "Undid the changes of the last 2 turns to the files:"
    assert "- removed notes/new.md" in undone.splitlines()
    assert files_of(project) == pristine
    messages = (await a.request("session/messages", {"sessionId": sid}))["messages"]
    assert len(messages) == 7 + 4  # the conversation stays; the commands' answers are not kept
    with pytest.raises(RpcError) as out_of_range:
        await command("/rewind 3")
    assert out_of_range.value.code == ErrorCode.INVALID_PARAMS


async def test_a_deleted_sessions_checkpoints_are_dropped_and_its_objects_pruned(
    spawn: Spawn, project: Path, tmp_path: Path
) -> None:
    edit = [
        {"toolCalls": [tool_call("write_file", "w", path="private.txt", content="theirs\n")]},
        {"text": "done"},
    ]
    a = await spawn("a", FIRST_TURN + edit, gc_interval=0)
    kept = (await a.request("session/create", {}))["sessionId"]
    first, _ = await run_turn(a, kept, "change things")
    fork = (await a.request("session/fork", {"sessionId": kept}))["sessionId"]
    await a.request("session/delete", {"sessionId": kept})  # the fork has its turn

    gone = (await a.request("session/create", {}))["sessionId"]
    await run_turn(a, gone, "edit private.txt")
    (project / "private.txt").write_text("mine again\n")
    c = await spawn("c", [], gc_interval=0)
    await c.request("session/create", {})  # its first snapshot records "mine again"
    await until(lambda: has_object(tmp_path, b"mine again\n"))
    assert has_object(tmp_path, b"theirs\n")  # only the turn of `gone` refers to it now
    await c.request("session/delete", {"sessionId": gone})
    await until(lambda: not has_object(tmp_path, b"theirs\n"))

    [inherited] = (await a.request("session/checkpoints", {"sessionId": fork}))["checkpoints"]
    assert inherited["messageId"] == first
    assert has_object(tmp_path, b"version = 1\n")  # what a rewind of the fork's turn needs


# `tether serve` with SIGTERM's default disposition set in the child: a test run in the background
# may have inherited it ignored, and tether leaves an ignored SIGTERM ignored.
SERVER_TERMINABLE = [
    sys.executable,
    "-c",
    "import signal, sys; signal.signal(signal.SIGTERM, signal.SIG_DFL); "
    "from tether.cli import main; sys.exit(main(['serve']))",
]


async def end_server(server: Connection, how: str) -> int:
    """End the server ``how``; its exit code."""
    process = server.process
    assert process is not None and process.stdin is not None
    if how == "shutdown and exit":
        await server.request("shutdown")
        server.notify("exit")
    elif how == "SIGTERM":
        process.send_signal(signal.SIGTERM)
    else:
        process.stdin.close()
    return await asyncio.wait_for(process.wait(), WAIT)


@pytest.mark.parametrize(
    ("how", "code"), [("end of input", 1), ("shutdown and exit", 0), ("SIGTERM", 143)]
)
async def test_a_server_that_exits_during_the_first_snapshot_leaves_no_git_behind(
    project: Path, tmp_path: Path, how: str, code: int
) -> None:
    stalled = stalled_git(tmp_path / "bin", os.environ["PATH"])
    env = {"TETHER_SESSIONS_STORE": "sqlite", "TETHER_SESSIONS_PATH": str(tmp_path / "s.db")}
    options = script_options(
        project,
        [
            {"toolCalls": [tool_call("write_file", "w", path="new.txt", content="new\n")]},
            {"text": "done"},
        ],
        tools={"approval": "auto", "sandbox": "off"},
        checkpoints={"path": str(tmp_path / "checkpoints")},
    )
    first = await Connection.spawn(SERVER_TERMINABLE, env={**env, **stalled.env()})
    try:
        await initialized(first, project, options)
        await first.request("session/create", {})
        await stalled.stalling()  # the first snapshot is under way, and stays so

        assert await end_server(first, how) == code
    finally:
        await first.close()
        left = stalled.sweep()
    assert not left  # nothing the server started is left
    assert not list((tmp_path / "checkpoints").glob("workspaces/*/index.lock"))
    second = await Connection.spawn(SERVER, env=env)
    try:
        await initialized(second, project, options)
        sid = (await second.request("session/create", {}))["sessionId"]
        await run_turn(second, sid, "write")
        checkpoints = await second.request("session/checkpoints", {"sessionId": sid})
        assert [c["files"] for c in checkpoints["checkpoints"]] == [["new.txt"]]
    finally:
        await second.close()


async def test_tether_run_leaves_no_git_of_its_server_behind(project: Path, tmp_path: Path) -> None:
    stalled = stalled_git(tmp_path / "bin", os.environ["PATH"])
    script = tmp_path / "answer.json"
    script.write_text(json.dumps([{"text": "Done."}]))
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "TETHER_"))}
    env = {
        **environ,
        **stalled.env(),
        "TETHER_SESSIONS_STORE": "sqlite",
        "TETHER_SESSIONS_PATH": str(tmp_path / "s.db"),
        "TETHER_CHECKPOINTS_PATH": str(tmp_path / "checkpoints"),
    }
    run = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tether", "run", "hi", "--script", str(script),
        cwd=project,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        out, err = await asyncio.wait_for(run.communicate(), WAIT)
    finally:
        left = stalled.sweep()
    assert run.returncode == 0, err.decode()
    assert b"Done." in out
    assert stalled.started.exists()  # the server's first snapshot was under way as it ended
    assert not left  # nothing the server started is left
    assert not list((tmp_path / "checkpoints").glob("workspaces/*/index.lock"))
