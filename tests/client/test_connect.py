"""``TetherClient.connect``: a client of a server started with ``tether serve --tcp``."""

from __future__ import annotations

import asyncio
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tether.client import TetherClient

from .conftest import script, uri_of


@pytest.fixture
async def tcp_server() -> AsyncIterator[tuple[asyncio.subprocess.Process, int]]:
    """A real ``tether serve --tcp`` on a free loopback port."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tether", "serve", "--tcp", f"127.0.0.1:{port}",
        stdin=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:
        yield process, port
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def connect_when_listening(port: int, **options: object) -> TetherClient:
    async with asyncio.timeout(20):
        while True:
            try:
                return await TetherClient.connect("127.0.0.1", port, **options)  # type: ignore[arg-type]
            except ConnectionRefusedError:
                await asyncio.sleep(0.05)  # the server is still starting: poll its port


async def test_a_client_connected_over_tcp_runs_a_turn_and_ends_the_server(
    tcp_server: tuple[asyncio.subprocess.Process, int], tmp_path: Path
):
    process, port = tcp_server
    options = script(tmp_path, [{"text": "Over TCP."}])
    client = await connect_when_listening(port, workspace=tmp_path, options=options)
    session = await client.create_session()
    result = await client.run(session.session_id, "hi")

    assert client.initialize_result is not None
    assert session.workspace == uri_of(tmp_path)
    assert result.response == "Over TCP."
    assert await client.close() is None
    assert client.returncode is None  # not this side's process
    async with asyncio.timeout(20):
        assert await process.wait() == 0  # shutdown, then exit: the server ended cleanly


async def test_a_bad_configuration_over_tcp_raises_and_closes(
    tcp_server: tuple[asyncio.subprocess.Process, int], tmp_path: Path
):
    from tether.client import ConfigInvalidError

    process, port = tcp_server
    with pytest.raises(ConfigInvalidError):
        await connect_when_listening(port, options={"provider": {"type": "nonsense"}})
    async with asyncio.timeout(20):
        await process.wait()
