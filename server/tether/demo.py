"""``tether demo``: spawn a real ``tether serve`` and walk a session through the protocol."""

from __future__ import annotations

import json
from typing import Any

from tether.client import Connection


async def run_demo(workspace: str) -> int:
    connection = await Connection.spawn()
    try:
        init = await connection.request(
            "initialize",
            {"clientInfo": {"name": "tether-demo"}, "workspaceFolders": [{"uri": workspace}]},
        )
        connection.notify("initialized", {})
        _show("initialize", init)
        session = await connection.request("session/create", {"title": "demo"})
        _show("session/create", session)
        sid = session["sessionId"]
        await connection.request(
            "session/append",
            {
                "sessionId": sid,
                "messages": [
                    {"role": "user", "content": "What is in README.md?", "author": "demo"},
                    {
                        "role": "assistant",
                        "toolCalls": [
                            {
                                "id": "call_1",
                                "name": "read_file",
                                "arguments": '{"path":"README.md"}',
                            }
                        ],
                    },
                    {"role": "tool", "toolCallId": "call_1", "content": "# tether ..."},
                    {"role": "assistant", "content": "It introduces tether."},
                ],
            },
        )
        page = await connection.request("session/messages", {"sessionId": sid, "limit": 10})
        _show("session/messages", page)
        _show("session/list", await connection.request("session/list", {}))
    finally:
        code = await connection.close()
    print(f"server exited with code {code}")
    return code


def _show(method: str, result: Any) -> None:
    print(f"--> {method}\n{json.dumps(result, indent=2)}\n")
