"""``initialize`` params and result, and the capabilities both sides declare.

A nested default is made by ``model_construct`` (its defaults, not validated again): a model's
validator is built on its first validation, and the handshake would otherwise build one per
nested capability model it leaves out, for nothing."""

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
    show_message: dict[str, Any] | None = Field(
        default=None,
        description="LSP's: declared by clients that show window messages; they also get "
        "tether's warnings as window/logMessage",
    )
    show_document: dict[str, Any] | None = Field(
        default=None, description="LSP's: `{support: bool}` when window/showDocument is served"
    )


class WorkspaceClientCapabilities(WireModel):
    apply_edit: bool = False


class ClientCapabilities(WireModel):
    window: WindowClientCapabilities = Field(
        default_factory=WindowClientCapabilities.model_construct
    )
    workspace: WorkspaceClientCapabilities = Field(
        default_factory=WorkspaceClientCapabilities.model_construct
    )
    tether: TetherClientCapabilities = Field(
        default_factory=TetherClientCapabilities.model_construct
    )


class InitializeParams(Params):
    process_id: int | None = None
    client_info: ClientInfo | None = None
    protocol_version: int | None = None
    root_uri: str | None = None
    root_path: str | None = None
    workspace_folders: list[WorkspaceFolder] | None = None
    capabilities: ClientCapabilities = Field(default_factory=ClientCapabilities.model_construct)
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


LSP_COMMANDS = ("tether.ask", "tether.cancel", "tether.newSession", "tether.undo")
"""The commands of ``workspace/executeCommand`` (served by :mod:`tether.lsp`)."""

LSP_CODE_ACTION_KINDS = ("quickfix", "refactor.rewrite", "source")


class SaveOptions(WireModel):
    include_text: bool = False


class TextDocumentSyncOptions(WireModel):
    """LSP's: open/close and incremental changes (``TextDocumentSyncKind.Incremental``)."""

    open_close: bool = True
    change: int = Field(default=2, description="2: incremental")
    save: SaveOptions = Field(default_factory=SaveOptions.model_construct)


class ExecuteCommandOptions(WireModel):
    commands: list[str] = Field(default_factory=lambda: list(LSP_COMMANDS))


class CodeActionOptions(WireModel):
    code_action_kinds: list[str] = Field(default_factory=lambda: list(LSP_CODE_ACTION_KINDS))


class WorkspaceFoldersCapabilities(WireModel):
    supported: bool = True
    change_notifications: bool = True


class WorkspaceCapabilities(WireModel):
    workspace_folders: WorkspaceFoldersCapabilities = Field(
        default_factory=WorkspaceFoldersCapabilities.model_construct
    )


class ServerCapabilities(WireModel):
    """tether's own capabilities beside LSP's standard ``ServerCapabilities`` (text sync,
    commands, code actions, workspace folders), so a generic LSP client knows what to send."""

    sessions: SessionCapabilities
    methods: list[str] = Field(description="the request methods this server answers")
    providers: list[str] = Field(default_factory=list)
    tools: list[str] = Field(default_factory=list)
    progress: bool = True
    text_document_sync: TextDocumentSyncOptions = Field(
        default_factory=TextDocumentSyncOptions.model_construct
    )
    execute_command_provider: ExecuteCommandOptions = Field(
        default_factory=ExecuteCommandOptions.model_construct
    )
    code_action_provider: CodeActionOptions = Field(
        default_factory=CodeActionOptions.model_construct
    )
    workspace: WorkspaceCapabilities = Field(default_factory=WorkspaceCapabilities.model_construct)


class InitializeResult(WireModel):
    protocol_version: int = PROTOCOL_VERSION
    server_info: ServerInfo
    capabilities: ServerCapabilities
