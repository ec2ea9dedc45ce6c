"""ACP's MCP server entries (``stdio``, ``http`` and ``sse``; names free, env and headers as
name/value lists) as tether's :class:`McpServerSpec`."""

from __future__ import annotations

import re

from tether.acp.models import McpServer, StdioServer
from tether.protocol.tools import McpServerSpec

_NOT_IN_NAME = re.compile(r"[^A-Za-z0-9_-]")
_MAX_NAME = 32


def mcp_servers(servers: list[McpServer]) -> list[McpServerSpec] | None:
    """The servers as tether's; names are made to fit tether's (``[A-Za-z0-9_-]{1,32}``,
    unique)."""
    specs: list[McpServerSpec] = []
    taken: set[str] = set()
    for server in servers:
        name = _unique(_NOT_IN_NAME.sub("_", server.name)[:_MAX_NAME] or "mcp", taken)
        if isinstance(server, StdioServer):
            specs.append(
                McpServerSpec(
                    name=name,
                    command=server.command,
                    args=server.args,
                    env={variable.name: variable.value for variable in server.env},
                )
            )
        else:
            specs.append(
                McpServerSpec(
                    name=name,
                    url=server.url,
                    headers={header.name: header.value for header in server.headers},
                    transport="sse" if server.type == "sse" else None,
                )
            )
    return specs or None


def _unique(name: str, taken: set[str]) -> str:
    candidate, n = name, 1
    while candidate in taken:
        n += 1
        suffix = f"_{n}"
        candidate = name[: _MAX_NAME - len(suffix)] + suffix
    taken.add(candidate)
    return candidate
