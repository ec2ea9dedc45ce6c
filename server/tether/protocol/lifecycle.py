"""``initialize`` params and result, and the capabilities both sides declare."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from tether.protocol.base import Params, WireModel

PROTOCOL_VERSION = 1


class ClientInfo(WireModel):
    name: str
    version: str | None = None


class WorkspaceFolder(WireModel):
    uri: str
    name: str | None = None


class TetherClientCapabilities(WireModel):
    permissions: bool = False


class WindowClientCapabilities(WireModel):
    work_done_progress: bool = False


class ClientCapabilities(WireModel):
    window: WindowClientCapabilities = Field(default_factory=WindowClientCapabilities)
    tether: TetherClientCapabilities = Field(default_factory=TetherClientCapabilities)


class InitializeParams(Params):
    process_id: int | None = None
    client_info: ClientInfo | None = None
    protocol_version: int | None = None
    root_uri: str | None = None
    root_path: str | None = None
    workspace_folders: list[WorkspaceFolder] | None = None
    capabilities: ClientCapabilities = Field(default_factory=ClientCapabilities)
    initialization_options: dict[str, Any] | None = Field(
        default=None, description="a config overlay, same keys as the config file"
    )


class ServerInfo(WireModel):
    name: str
    version: str


class SessionCapabilities(WireModel):
    store: str = Field(description="the session store kind, e.g. memory or sqlite")
    fork: bool
    durable: bool


class ServerCapabilities(WireModel):
    sessions: SessionCapabilities
    methods: list[str] = Field(description="the request methods this server answers")
    providers: list[str] = Field(default_factory=list)
    tools: list[str] = Field(default_factory=list)
    progress: bool = True


class InitializeResult(WireModel):
    protocol_version: int = PROTOCOL_VERSION
    server_info: ServerInfo
    capabilities: ServerCapabilities
