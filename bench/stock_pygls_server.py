"""Stock pygls 2.1: its default converter hands unknown-method params over as namedtuples.

The handlers do what the floor's and tether's do (async, like tether's): create a session, return
it, and store appended messages with ids. Only the params they receive are pygls's own.
"""

from __future__ import annotations

import itertools
from typing import Any

from pygls.lsp.server import LanguageServer

server = LanguageServer("stock-pygls", "0")
ids = itertools.count(1)
sessions: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {}


@server.feature("session/create")
async def session_create(params: Any) -> dict[str, Any]:
    session_id = f"s{next(ids)}"
    session: dict[str, Any] = {"sessionId": session_id, "workspace": "stock", "messageCount": 0}
    sessions[session_id] = (session, [])
    return session


@server.feature("session/get")
async def session_get(params: Any) -> dict[str, Any]:
    return sessions[params.sessionId][0]


@server.feature("session/append")
async def session_append(params: Any) -> dict[str, Any]:
    session, history = sessions[params.sessionId]
    stored = [
        {"id": f"m{next(ids)}", "role": message.role, "content": message.content}
        for message in params.messages
    ]
    history.extend(stored)
    session["messageCount"] = len(history)
    return {"messages": stored}


if __name__ == "__main__":
    server.start_io()
