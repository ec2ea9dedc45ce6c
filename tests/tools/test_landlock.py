"""run_command in the OS sandbox: real commands, confined by the real kernel's Landlock."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.processes import TAG_VARIABLE, new_tag, tagged
from tether.protocol.tools import McpServerSpec
from tether.tools import ToolContext, ToolRegistry, ToolResult
from tether.tools.confinement import SandboxMode, SandboxPolicy, landlock_abi, wrapper_command
from tether.tools.mcp import McpManager
from tether.tools.run_command import RunCommand
from tether.tools.wrapper import parse

from .conftest import SECRET, Call

pytestmark = pytest.mark.usefixtures("landlock_required")

KEY = "-----BEGIN OPENSSH PRIVATE KEY----- not-a-real-key"
PYTHON = sys.executable


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home directory with a private key and a git configuration in it."""
    directory = tmp_path / "home"
    (directory / ".ssh").mkdir(parents=True)
    (directory / ".ssh" / "id_rsa").write_text(f"{KEY}\n")
    (directory / ".gitconfig").write_text("[user]\n\tname = Someone\n")
    monkeypatch.setenv("HOME", str(directory))
    return directory


def run(workspace: Path, mode: SandboxMode = "workspace-write", **policy: bool) -> Call:
    context = ToolContext(
        workspace=workspace,
        session_id="s",
        run_id="r",
        sandbox=SandboxPolicy(mode=mode, **policy),
    )
    return Call(ToolRegistry([RunCommand()]), context)


def exists(path: Path) -> bool:
    return path.exists()


async def command(call: Call, command: str | list[str]) -> ToolResult:
    return await call("run_command", {"command": command, "timeout": 30})


async def test_writing_outside_the_workspace_is_blocked_and_explained(
    workspace: Path, outside: Path
) -> None:
    result = await command(run(workspace), f"echo PWNED > {outside}/created.txt")
    assert result.is_error
    assert not (outside / "created.txt").exists()
    assert "sandbox: workspace-write, no network" in result.content.splitlines()[0]
    assert 'tools.sandbox = "workspace-write"' in result.content
    assert 'tools.sandbox = "off"' in result.content


async def test_writing_in_the_workspace_and_the_private_tmpdir_works(workspace: Path) -> None:
    result = await command(
        run(workspace), 'echo inside > made.txt && echo temp > "$TMPDIR/t" && echo "$TMPDIR"'
    )
    assert not result.is_error, result.content
    assert (workspace / "made.txt").read_text() == "inside\n"
    tmpdir = Path(result.content.splitlines()[-1])
    assert tmpdir.name.startswith("tether-command-")
    assert not exists(tmpdir)  # removed when the command ended


async def test_with_the_sandbox_off_writing_outside_works(workspace: Path, outside: Path) -> None:
    result = await command(run(workspace, "off"), f"echo done > {outside}/created.txt")
    assert not result.is_error, result.content
    assert (outside / "created.txt").read_text() == "done\n"
    assert "sandbox: off" in result.content.splitlines()[0]


async def test_read_only_blocks_writes_in_the_workspace(workspace: Path) -> None:
    (workspace / "kept.txt").write_text("kept\n")
    call = run(workspace, "read-only")
    result = await command(call, "cat kept.txt && echo changed > kept.txt")
    assert result.is_error
    assert "kept" in result.content
    assert (workspace / "kept.txt").read_text() == "kept\n"
    assert 'tools.sandbox = "workspace-write"' in result.content
    assert not (await command(call, 'echo temp > "$TMPDIR/t"')).is_error


async def test_files_outside_the_workspace_and_in_home_cannot_be_read(
    workspace: Path, outside: Path, home: Path
) -> None:
    for path in [home / ".ssh" / "id_rsa", outside / "secret.txt"]:
        result = await command(run(workspace), ["cat", str(path)])
        assert result.is_error
        assert KEY not in result.content and SECRET not in result.content
        assert "Permission denied" in result.content
        unconfined = await command(run(workspace, "off"), ["cat", str(path)])
        assert KEY in unconfined.content or SECRET in unconfined.content


async def test_the_system_and_git_configuration_stay_readable(workspace: Path, home: Path) -> None:
    result = await command(run(workspace), "head -1 /etc/passwd && cat ~/.gitconfig && ls /usr")
    assert not result.is_error, result.content
    assert "name = Someone" in result.content


async def test_more_paths_can_be_made_readable_or_writable(
    workspace: Path, outside: Path, home: Path
) -> None:
    (home / ".cache").mkdir()
    context = ToolContext(
        workspace=workspace,
        session_id="s",
        run_id="r",
        sandbox=SandboxPolicy(readable=(str(outside),), writable=("~/.cache",)),
    )
    call = Call(ToolRegistry([RunCommand()]), context)
    result = await command(call, f"cat {outside}/secret.txt && echo cached > ~/.cache/c")
    assert not result.is_error, result.content
    assert SECRET in result.content
    assert (home / ".cache" / "c").read_text() == "cached\n"
    refused = await command(call, f"echo no > {outside}/written.txt")
    assert refused.is_error
    assert not (outside / "written.txt").exists()


async def test_the_environment_of_tether_cannot_be_read(workspace: Path) -> None:
    confined = await command(run(workspace), "cat /proc/$PPID/environ")
    assert confined.is_error
    assert "Permission denied" in confined.content
    assert "PATH=" not in confined.content
    unconfined = await command(run(workspace, "off"), "cat /proc/$PPID/environ")
    assert "PATH=" in unconfined.content


async def test_tether_cannot_be_signalled(workspace: Path) -> None:
    confined = await command(run(workspace), "kill -0 $PPID")  # signal 0: checked, never sent
    assert confined.is_error
    assert "not permitted" in confined.content
    assert not (await command(run(workspace, "off"), "kill -0 $PPID")).is_error


async def test_a_confined_command_dies_of_sigpipe_as_usual(workspace: Path) -> None:
    result = await command(run(workspace), "yes | head -1; grep SigIgn /proc/self/status")
    assert not result.is_error
    assert "Broken pipe" not in result.content
    ignored = next(
        int(line.split(":\t")[1], 16)
        for line in result.content.splitlines()
        if line.startswith("SigIgn:")
    )
    for number in (signal.SIGPIPE, signal.SIGXFSZ):  # what Python ignores, back to the default
        assert not ignored & (1 << (number - 1)), number.name


async def test_a_confined_command_holds_no_capability(workspace: Path) -> None:
    result = await command(run(workspace), "grep -E '^(Cap|NoNewPrivs)' /proc/self/status")
    assert not result.is_error, result.content
    fields = dict(line.split(":\t") for line in result.content.splitlines() if ":\t" in line)
    assert fields["NoNewPrivs"] == "1"
    for name in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(fields[name], 16) == 0, name


async def test_the_commands_own_processes_can_be_signalled(workspace: Path) -> None:
    result = await command(run(workspace), "sleep 30 & kill $! && wait $!; echo status $?")
    assert not result.is_error
    assert "status 143" in result.content


PTRACE = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
attached = libc.ptrace(16, os.getppid(), 0, 0)  # PTRACE_ATTACH
if attached == 0:
    libc.ptrace(17, os.getppid(), 0, 0)  # PTRACE_DETACH
    raise SystemExit("attached")
raise SystemExit(os.strerror(ctypes.get_errno()))
"""


async def test_tether_cannot_be_traced(workspace: Path) -> None:
    result = await command(run(workspace), [PYTHON, "-c", PTRACE])
    assert result.is_error
    assert "Operation not permitted" in result.content
    assert "attached" not in result.content


@pytest.fixture
async def listener() -> AsyncIterator[tuple[int, list[bytes]]]:
    """A TCP server on the loopback interface: its port, and what its clients sent."""
    received: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        received.append(await reader.read(100))
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1], received
    server.close()
    await server.wait_closed()


def connect(port: int) -> list[str]:
    code = (
        "import socket\n"
        f"with socket.create_connection(('127.0.0.1', {port}), timeout=10) as s:\n"
        "    s.sendall(b'hello')\n"
        "    s.recv(1)\n"
        "print('connected')"
    )
    return [PYTHON, "-c", code]


async def test_network_connections_are_blocked_by_default(
    workspace: Path, listener: tuple[int, list[bytes]]
) -> None:
    port, received = listener
    result = await command(run(workspace), connect(port))
    assert result.is_error
    assert "PermissionError" in result.content
    assert "tools.sandbox_network = true" in result.content
    assert received == []


async def test_network_connections_work_when_allowed(
    workspace: Path, listener: tuple[int, list[bytes]]
) -> None:
    port, received = listener
    result = await command(run(workspace, network=True), connect(port))
    assert not result.is_error, result.content
    assert "sandbox: workspace-write, network allowed" in result.content.splitlines()[0]
    assert received == [b"hello"]
    off = await command(run(workspace, "off"), connect(port))
    assert not off.is_error, off.content


@pytest.fixture
def abstract_socket() -> Iterator[str]:
    """A unix stream socket listening at an abstract address (no file): its name."""
    name = f"tether-test-{os.getpid()}-{id(object())}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listening:
        listening.bind("\0" + name)
        listening.listen(1)
        yield name


def connect_abstract(name: str) -> list[str]:
    code = (
        "import socket\n"
        "with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:\n"
        f"    s.connect('\\0{name}')\n"
        "print('connected')"
    )
    return [PYTHON, "-c", code]


async def test_abstract_unix_sockets_outside_the_sandbox_are_unreachable(
    workspace: Path, abstract_socket: str
) -> None:
    confined = await command(run(workspace, network=True), connect_abstract(abstract_socket))
    assert confined.is_error
    assert "PermissionError" in confined.content
    unconfined = await command(run(workspace, "off"), connect_abstract(abstract_socket))
    assert not unconfined.is_error, unconfined.content


async def test_a_missing_program_is_reported_as_not_found(workspace: Path) -> None:
    result = await command(run(workspace), ["no-such-program-anywhere"])
    assert result.is_error
    assert "command not found: no-such-program-anywhere" in result.content


async def test_the_policy_is_reported_as_progress(workspace: Path) -> None:
    lines: list[str] = []
    context = ToolContext(workspace=workspace, session_id="s", run_id="r", progress=lines.append)
    await Call(ToolRegistry([RunCommand()]), context)("run_command", {"command": ["true"]})
    assert lines == [SandboxPolicy().describe()]
    assert lines[0].startswith("sandbox: workspace-write, no network; .git, .tether and tether's")


def test_the_wrapper_parses_its_arguments() -> None:
    options = parse(
        ["--read", "/a", "--write", "/b", "--protect", "/b/.git", "--network", "--parent", "7",
         "--carve", "/b/.tether", "--sandbox", "--namespaces", "--", "ls", "--read"]
    )  # fmt: skip
    assert (options.read, options.write, options.protect) == (["/a"], ["/b"], ["/b/.git"])
    assert options.carve == ["/b/.tether"]
    assert (options.network, options.namespaces, options.parent) == (True, True, 7)
    assert options.command == ["ls", "--read"]
    bad_ones = [["--read"], ["ls"], ["--bogus", "--", "ls"], ["--parent", "x", "--", "ls"]]
    bad_ones.append(["--namespaces", "--", "ls"])  # namespaces without the sandbox
    for bad in bad_ones:
        with pytest.raises(ValueError):
            parse(bad)


async def test_the_wrapper_never_runs_a_command_it_could_not_confine(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    process = await asyncio.create_subprocess_exec(
        *wrapper_command(), "--sandbox", "--read", "/usr", "--bogus", "--", "touch", str(marker),
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, stderr = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 126
    assert b"the command was not run" in stderr
    assert not marker.exists()


# MCP servers over stdio, confined with tools.mcp_sandbox.

FAKE_SERVER = Path(__file__).resolve().parents[1] / "fakes" / "mcp_server.py"


def server_spec(pids: Path, tag: str) -> McpServerSpec:
    return McpServerSpec(
        name="fake",
        command=PYTHON,
        args=[str(FAKE_SERVER)],
        env={"TETHER_MCP_PIDS": str(pids), TAG_VARIABLE: tag},
    )


def serving(tag: str) -> list[int]:
    """The fake server's process (the wrapper's carry the same environment)."""
    return [
        pid
        for pid in tagged(tag)
        if Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[1:2] == [bytes(FAKE_SERVER)]
    ]


def status_of(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return dict(line.split(":\t", 1) for line in lines if ":\t" in line)


async def test_an_mcp_server_runs_confined_when_configured(workspace: Path, outside: Path) -> None:
    readable = (str(FAKE_SERVER.parent),)  # the server's script
    policy = SandboxPolicy(mode="workspace-write", network=True, readable=readable)
    manager = McpManager()
    try:
        tag = new_tag()
        inside = workspace / "pids.txt"
        tools = await manager.executor(
            [], servers=[server_spec(inside, tag)], enabled=None, session_id="s",
            workspace=workspace, sandbox=policy,
        )  # fmt: skip
        assert "fake__echo" in [spec.name for spec in tools.list()]
        assert inside.read_text().strip()  # it could write in the workspace
        (pid,) = serving(tag)  # seen from here: it runs in a pid namespace of its own
        status = status_of(pid)
        assert status["NoNewPrivs"].strip() == "1"
        assert int(status["CapBnd"], 16) == 0

        barred = outside / "pids.txt"  # the server cannot write there, so it fails to start
        tools = await manager.executor(
            [], servers=[server_spec(barred, new_tag())], enabled=None, session_id="s",
            workspace=workspace, sandbox=policy,
        )  # fmt: skip
        assert tools.list() == []
        assert not barred.exists()
    finally:
        await manager.aclose()
    assert tagged(tag) == set()  # its tree ended with it


async def test_mcp_servers_are_not_confined_by_default(workspace: Path, outside: Path) -> None:
    manager = McpManager()
    try:
        pids = outside / "pids.txt"
        await manager.executor(
            [], servers=[server_spec(pids, new_tag())], enabled=None, session_id="s",
            workspace=workspace, sandbox=SandboxPolicy(mode="off"),
        )  # fmt: skip
        (pid,) = [int(line) for line in pids.read_text().split()]
        assert status_of(pid)["NoNewPrivs"].strip() == "0"
    finally:
        await manager.aclose()


# Where Landlock is missing: the kernel's answer is the one thing faked here.


@pytest.fixture
def without_landlock(landlock_required: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The kernel's answer faked to "no Landlock" (after checking the real one: see
    ``pytestmark``)."""
    from tether.tools import landlock

    monkeypatch.setattr(landlock, "abi_version", lambda: 0)
    landlock_abi.cache_clear()
    yield
    landlock_abi.cache_clear()


@pytest.mark.usefixtures("without_landlock")
async def test_without_landlock_commands_run_unconfined_and_say_so(
    workspace: Path, outside: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="tether.tools.confinement"):
        for _ in range(2):
            result = await command(run(workspace), f"echo x > {outside}/created.txt")
            assert not result.is_error, result.content
            assert "sandbox: none (Landlock is not available)" in result.content.splitlines()[0]
    assert (outside / "created.txt").exists()
    warnings = [record for record in caplog.records if record.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "without an OS sandbox" in warnings[0].getMessage()
