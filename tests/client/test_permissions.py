"""``tool/requestPermission`` answered by ``on_permission``.

These tests run the client against a small stand-in peer (``permission_peer.py``) that asks,
over the same wire, and reports the answers as it saw them; ``tests/e2e/test_permission.py`` drives
the real server.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from tether.client import PermissionOutcome, TetherClient
from tether.protocol.kernel import PermissionParams

PEER = [sys.executable, str(Path(__file__).with_name("permission_peer.py"))]


async def notifications(client: TetherClient, method: str, count: int) -> list[Any]:
    found = []
    async with asyncio.timeout(20):
        while len(found) < count:
            name, params = await client.connection.notifications.get()
            if name == method:
                found.append(params)
    return found


async def test_the_callback_answers_each_request_and_the_capability_is_declared(tmp_path: Path):
    asked: list[PermissionParams] = []

    async def decide(request: PermissionParams) -> PermissionOutcome:
        asked.append(request)
        await asyncio.sleep(0)
        return "allow" if request.tool_call.name == "read_file" else "reject"

    async with TetherClient.spawn(
        workspace=tmp_path, argv=[*PEER, "read_file", "write_file"], on_permission=decide
    ) as client:
        [initialize] = await notifications(client, "test/initialize", 1)
        answers = await notifications(client, "test/answer", 2)

    assert initialize["capabilities"]["tether"]["permissions"] is True
    assert [(a.session_id, a.run_id, a.tool_call.name) for a in asked] == [
        ("s", "r", "read_file"),
        ("s", "r", "write_file"),
    ]
    by_id = {a["id"]: a for a in answers}
    assert by_id["ask-0"]["result"] == {"outcome": "allow"}
    assert by_id["ask-1"]["result"] == {"outcome": "reject"}


async def test_a_plain_function_can_answer_too(tmp_path: Path):
    async with TetherClient.spawn(
        workspace=tmp_path, argv=[*PEER, "read_file"], on_permission=lambda _: "allow_always"
    ) as client:
        [answer] = await notifications(client, "test/answer", 1)
    assert answer["result"] == {"outcome": "allow_always"}


async def test_without_a_callback_the_request_is_method_not_found(tmp_path: Path):
    async with TetherClient.spawn(workspace=tmp_path, argv=[*PEER, "read_file"]) as client:
        [initialize] = await notifications(client, "test/initialize", 1)
        [answer] = await notifications(client, "test/answer", 1)
    assert initialize["capabilities"]["tether"]["permissions"] is False
    assert answer["error"]["code"] == -32601


async def test_a_callback_that_fails_or_answers_nonsense_is_an_internal_error(tmp_path: Path):
    def nonsense(_: PermissionParams) -> Any:
        return "maybe"

    async def failing(_: PermissionParams) -> PermissionOutcome:
        raise RuntimeError("the user closed the dialog")

    codes = []
    for callback in (nonsense, failing):
        async with TetherClient.spawn(
            workspace=tmp_path, argv=[*PEER, "read_file"], on_permission=callback
        ) as client:
            [answer] = await notifications(client, "test/answer", 1)
        codes.append(answer["error"]["code"])
    assert codes == [-32603, -32603]
