"""The ACP v1 messages tether reads and writes, as pydantic models (camelCase on the wire).

Only the fields tether uses are declared; unknown input fields (``_meta`` included) are ignored.
Output models are dumped with unset optionals left out. Nothing outside :mod:`tether.acp` sees
these types.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

PROTOCOL_VERSION = 1


class AcpModel(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", defer_build=True
    )

    def to_wire(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


# --- what the client sends ---------------------------------------------------------------------


class FileSystemCapabilities(AcpModel):
    read_text_file: bool = False
    write_text_file: bool = False


class ClientSessionCapabilities(AcpModel):
    compaction: dict[str, Any] | None = None  # present: it shows compaction_update
    notices: dict[str, Any] | None = None  # present: it shows notice updates


class ClientCapabilities(AcpModel):
    fs: FileSystemCapabilities = Field(default_factory=FileSystemCapabilities)
    terminal: bool = False
    session: ClientSessionCapabilities | None = None

    @property
    def compaction(self) -> bool:
        """Whether the client takes ``compaction_update`` (``session.compaction``)."""
        return self.session is not None and self.session.compaction is not None

    @property
    def notices(self) -> bool:
        """Whether the client takes ``notice`` updates (``session.notices``)."""
        return self.session is not None and self.session.notices is not None


class Implementation(AcpModel):
    name: str
    title: str | None = None
    version: str


class InitializeRequest(AcpModel):
    protocol_version: int = Field(ge=0)
    client_capabilities: ClientCapabilities = Field(default_factory=ClientCapabilities)
    client_info: Implementation | None = None


class NameValue(AcpModel):
    name: str
    value: str


class StdioServer(AcpModel):
    type: Literal["stdio"] = "stdio"
    name: str
    command: str = Field(min_length=1)
    args: list[str] = Field(default_factory=list)
    env: list[NameValue] = Field(default_factory=list)


class HttpServer(AcpModel):
    type: Literal["http", "sse"]
    name: str
    url: str
    headers: list[NameValue] = Field(default_factory=list)


McpServer = HttpServer | StdioServer


class NewSessionRequest(AcpModel):
    cwd: str = Field(min_length=1)
    mcp_servers: list[McpServer] = Field(default_factory=list)


class SessionRequest(AcpModel):
    session_id: str = Field(min_length=1)


class LoadSessionRequest(SessionRequest):
    cwd: str | None = None
    mcp_servers: list[McpServer] = Field(default_factory=list)


class ListSessionsRequest(AcpModel):
    cwd: str | None = None
    cursor: str | None = None


class SetModeRequest(SessionRequest):
    mode_id: str


class TextContent(AcpModel):
    type: Literal["text"]
    text: str


class ImageContent(AcpModel):
    type: Literal["image"]
    mime_type: str
    data: str
    uri: str | None = None


class AudioContent(AcpModel):
    type: Literal["audio"]
    mime_type: str
    data: str


class ResourceLink(AcpModel):
    type: Literal["resource_link"]
    uri: str
    name: str
    title: str | None = None
    mime_type: str | None = None


class ResourceContents(AcpModel):
    uri: str
    mime_type: str | None = None
    text: str | None = None
    blob: str | None = None


class EmbeddedResource(AcpModel):
    type: Literal["resource"]
    resource: ResourceContents


ContentBlock = Annotated[
    TextContent | ImageContent | AudioContent | ResourceLink | EmbeddedResource,
    Field(discriminator="type"),
]


class PromptRequest(SessionRequest):
    prompt: list[ContentBlock]


class PermissionOutcome(AcpModel):
    outcome: Literal["selected", "cancelled"]
    option_id: str | None = None


class RequestPermissionResponse(AcpModel):
    outcome: PermissionOutcome


# --- what tether sends -------------------------------------------------------------------------


class Empty(AcpModel):
    """The result of requests that answer nothing but success."""


class PromptCapabilities(AcpModel):
    image: bool = False
    audio: bool = False
    embedded_context: bool = False


class McpCapabilities(AcpModel):
    http: bool = False
    sse: bool = False


class SessionCapabilities(AcpModel):
    list: Empty | None = None
    delete: Empty | None = None
    resume: Empty | None = None
    close: Empty | None = None
    fork: Empty | None = None


class AgentCapabilities(AcpModel):
    load_session: bool = False
    prompt_capabilities: PromptCapabilities = Field(default_factory=PromptCapabilities)
    mcp_capabilities: McpCapabilities = Field(default_factory=McpCapabilities)
    session_capabilities: SessionCapabilities = Field(default_factory=SessionCapabilities)


class InitializeResponse(AcpModel):
    protocol_version: int
    agent_capabilities: AgentCapabilities
    agent_info: Implementation
    auth_methods: list[dict[str, Any]] = Field(default_factory=list)


# --- session configuration options ---------------------------------------------------------------


class SetConfigOptionRequest(SessionRequest):
    config_id: str
    type: str | None = None  # absent: a value id; "boolean" is not offered
    value: str | bool


class ConfigOptionValue(AcpModel):
    value: str
    name: str
    description: str | None = None


class ConfigOption(AcpModel):
    """A ``select`` option (tether offers no ``boolean`` ones: a client must declare those)."""

    type: Literal["select"] = "select"
    id: str
    name: str
    description: str | None = None
    category: str | None = None
    current_value: str
    options: list[ConfigOptionValue]


class ConfigOptionUpdate(AcpModel):
    session_update: Literal["config_option_update"] = "config_option_update"
    config_options: list[ConfigOption]


class SetConfigOptionResponse(AcpModel):
    config_options: list[ConfigOption]


class SessionMode(AcpModel):
    id: str
    name: str
    description: str | None = None


class SessionModeState(AcpModel):
    current_mode_id: str
    available_modes: list[SessionMode]


class NewSessionResponse(AcpModel):
    session_id: str
    modes: SessionModeState | None = None
    config_options: list[ConfigOption] | None = None


class LoadSessionResponse(AcpModel):
    modes: SessionModeState | None = None
    config_options: list[ConfigOption] | None = None


class SessionInfo(AcpModel):
    session_id: str
    cwd: str
    title: str | None = None
    updated_at: str | None = None


class ListSessionsResponse(AcpModel):
    sessions: list[SessionInfo]
    next_cursor: str | None = None


class PromptResponse(AcpModel):
    stop_reason: Literal["end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled"]


class TextOut(AcpModel):
    type: Literal["text"] = "text"
    text: str


class ImageOut(AcpModel):
    type: Literal["image"] = "image"
    mime_type: str
    data: str


class ResourceLinkOut(AcpModel):
    type: Literal["resource_link"] = "resource_link"
    uri: str
    name: str


ContentOut = TextOut | ImageOut | ResourceLinkOut


class ContentChunk(AcpModel):
    session_update: Literal["user_message_chunk", "agent_message_chunk", "agent_thought_chunk"]
    content: ContentOut
    message_id: str | None = None


class ToolContent(AcpModel):
    """A tool call's content: a block to show."""

    type: Literal["content"] = "content"
    content: TextOut


class DiffContent(AcpModel):
    type: Literal["diff"] = "diff"
    path: str
    old_text: str | None = None
    new_text: str


class TerminalContent(AcpModel):
    """A terminal of the editor's, embedded in a tool call."""

    type: Literal["terminal"] = "terminal"
    terminal_id: str


class Location(AcpModel):
    path: str
    line: int | None = Field(default=None, ge=0)


ToolStatus = Literal["pending", "in_progress", "completed", "failed"]
AcpToolKind = Literal[
    "read", "edit", "delete", "move", "search", "execute", "think", "fetch", "switch_mode", "other"
]


class ToolCallFields(AcpModel):
    """What ``tool_call`` and ``tool_call_update`` (and a permission request) say of a call."""

    tool_call_id: str
    title: str | None = None
    kind: AcpToolKind | None = None
    status: ToolStatus | None = None
    content: list[ToolContent | DiffContent | TerminalContent] | None = None
    locations: list[Location] | None = None
    raw_input: Any = None
    raw_output: Any = None


class ToolCallStart(ToolCallFields):
    session_update: Literal["tool_call"] = "tool_call"
    title: str


class ToolCallProgress(ToolCallFields):
    session_update: Literal["tool_call_update"] = "tool_call_update"


class SessionInfoUpdate(AcpModel):
    session_update: Literal["session_info_update"] = "session_info_update"
    title: str | None = None
    updated_at: str | None = None


class CurrentModeUpdate(AcpModel):
    session_update: Literal["current_mode_update"] = "current_mode_update"
    current_mode_id: str


class UsageUpdate(AcpModel):
    """The tokens a turn used and the context window's size (``context.max_tokens``)."""

    session_update: Literal["usage_update"] = "usage_update"
    used: int
    size: int


class CompactionUpdate(AcpModel):
    """A compaction of the context, upserted by id (sent only to a client that advertised
    ``session.compaction``)."""

    session_update: Literal["compaction_update"] = "compaction_update"
    compaction_id: str
    status: Literal["in_progress", "completed", "failed"]
    summary: list[ContentOut] | None = None
    error: str | None = None


class NoticeUpdate(AcpModel):
    """Information for the user that is not the agent's answer nor part of the history (sent
    only to a client that advertised ``session.notices``)."""

    session_update: Literal["notice"] = "notice"
    severity: Literal["info", "warning", "error"]
    title: str = Field(min_length=1)
    description: str | None = None


class PlanEntryOut(AcpModel):
    content: str
    priority: Literal["high", "medium", "low"]
    status: Literal["pending", "in_progress", "completed"]


class PlanUpdate(AcpModel):
    """The whole plan of the session, replacing the one shown before."""

    session_update: Literal["plan"] = "plan"
    entries: list[PlanEntryOut]


class CommandInput(AcpModel):
    """What to type after a command's name (ACP's unstructured input)."""

    hint: str


class AvailableCommand(AcpModel):
    name: str
    description: str
    input: CommandInput | None = None


class AvailableCommandsUpdate(AcpModel):
    """The slash commands of the session (sent after ``session/new``, ``session/load`` and
    whenever the set changes)."""

    session_update: Literal["available_commands_update"] = "available_commands_update"
    available_commands: list[AvailableCommand]


SessionUpdate = (
    ContentChunk
    | ToolCallStart
    | ToolCallProgress
    | SessionInfoUpdate
    | CurrentModeUpdate
    | ConfigOptionUpdate
    | UsageUpdate
    | CompactionUpdate
    | NoticeUpdate
    | PlanUpdate
    | AvailableCommandsUpdate
)


class SessionNotification(AcpModel):
    session_id: str
    update: SessionUpdate


class PermissionOption(AcpModel):
    option_id: str
    name: str
    kind: Literal["allow_once", "allow_always", "reject_once", "reject_always"]


class RequestPermissionRequest(AcpModel):
    session_id: str
    tool_call: ToolCallFields
    options: list[PermissionOption]
