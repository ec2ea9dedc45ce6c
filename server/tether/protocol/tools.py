"""How a tool is described: to the model (name, description, JSON Schema) and to editors (kind)."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import Field, model_validator

from tether.protocol.base import WireModel


class ToolKind(StrEnum):
    READ = "read"
    EDIT = "edit"
    EXECUTE = "execute"
    SEARCH = "search"
    OTHER = "other"


class ToolSpec(WireModel):
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str = Field(description="one line the model sees")
    parameters: dict[str, Any] = Field(description="JSON Schema of the arguments object")
    kind: ToolKind = ToolKind.OTHER


class ProposedChange(WireModel):
    """What an edit (``edit_file``, ``write_file``) would make of a file, computed before it is
    asked about or run: the whole text before and after."""

    path: str = Field(description="the file, relative to the session's workspace root")
    old_text: str | None = Field(
        default=None, description="its text now (omitted: the file does not exist yet)"
    )
    new_text: str = Field(description="its text once the edit is made")


MCP_SERVER_NAME_PATTERN = r"^[A-Za-z0-9_-]{1,32}$"


class McpServerSpec(WireModel):
    """An MCP server whose tools the model is offered: a command to run (stdio) or the URL of an
    HTTP endpoint (streamable HTTP, or the older HTTP+SSE transport with ``transport: "sse"``).
    Its tools are named ``<name>__<tool>``."""

    name: str = Field(pattern=MCP_SERVER_NAME_PATTERN, description="prefix of its tool names")
    command: str | None = Field(default=None, min_length=1, description="stdio: the program")
    args: list[str] = Field(default_factory=list, description="stdio: its arguments")
    env: dict[str, str] = Field(
        default_factory=dict, description="stdio: variables added to a minimal environment"
    )
    cwd: str | None = Field(
        default=None, description="stdio: working directory; default: the session's workspace"
    )
    url: str | None = Field(default=None, description="HTTP: the endpoint")
    headers: dict[str, str] = Field(
        default_factory=dict, description="HTTP: sent with each request"
    )
    transport: Literal["streamable-http", "sse"] | None = Field(
        default=None,
        description='HTTP: "streamable-http" (the default) or "sse" (HTTP+SSE)',
    )
    timeout: float = Field(default=120.0, gt=0, description="seconds allowed per tool call")
    oauth: bool = Field(
        default=False,
        description="HTTP: sign in with OAuth 2.1 (tokens kept in the user's data directory)",
    )

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerSpec:
        if (self.command is None) == (self.url is None):
            raise ValueError("give either `command` (stdio) or `url` (streamable HTTP)")
        if self.url is not None:
            if self.args or self.env or self.cwd is not None:
                raise ValueError("`args`, `env` and `cwd` go with `command`, not with `url`")
            if not self.url.startswith(("http://", "https://")):
                raise ValueError("`url` must be an http:// or https:// URL")
            if self.oauth and self.transport == "sse":
                raise ValueError("`oauth` works with streamable HTTP only, not with `sse`")
        elif self.headers or self.transport is not None or self.oauth:
            raise ValueError("`headers`, `transport` and `oauth` go with `url`, not with `command`")
        return self


def unique_server_names(servers: list[McpServerSpec]) -> list[McpServerSpec]:
    """``servers``, or a ValueError naming the first name given twice."""
    seen: set[str] = set()
    for server in servers:
        if server.name in seen:
            raise ValueError(f"two MCP servers are named {server.name!r}")
        seen.add(server.name)
    return servers
