"""Sessions and the params and results of the ``session/*`` methods."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import orjson
from pydantic import AfterValidator, Field, ValidationInfo, field_validator

from tether.protocol.base import Params, UtcDatetime, WireModel
from tether.protocol.kernel import Usage
from tether.protocol.limits import content_size, limits_of, over_limit
from tether.protocol.messages import Message, MessageInput
from tether.protocol.tools import McpServerSpec, unique_server_names

SessionId = str
MAX_STATE_BYTES = 256 * 1024
"""The most a session's ``state`` may hold, as compact JSON."""


class Session(WireModel):
    session_id: SessionId
    workspace: str
    title: str | None = None
    agent_id: str | None = None
    model: str | None = None
    system_prompt: str | None = None
    settings: dict[str, Any] = Field(default_factory=dict)
    metadata: dict[str, Any] = Field(default_factory=dict)
    tools: list[str] | None = None
    allowed_models: list[str] | None = None
    state: dict[str, Any] = Field(default_factory=dict)
    parent_session_id: SessionId | None = None
    forked_from_message_id: str | None = None
    message_count: int = 0
    usage: Usage = Field(default_factory=Usage, description="token totals of every run")
    created_at: UtcDatetime
    updated_at: UtcDatetime
    running: bool = False


class SessionFields(Params):
    """The fields a client sets on a session, at creation or later."""

    title: str | None = None
    model: str | None = None
    system_prompt: str | None = None
    settings: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    tools: list[str] | None = Field(default=None, description="allow-list of tool names")
    allowed_models: list[str] | None = Field(
        default=None, description="allow-list of models a run may use"
    )
    state: dict[str, Any] | None = Field(
        default=None, description="JSON object kept across turns; replaced whole"
    )

    @field_validator("state")
    @classmethod
    def _state_fits(cls, state: dict[str, Any] | None) -> dict[str, Any] | None:
        if state is not None and len(orjson.dumps(state)) > MAX_STATE_BYTES:
            raise ValueError(f"the state may hold at most {MAX_STATE_BYTES // 1024} KiB of JSON")
        return state


class CreateSessionParams(SessionFields):
    workspace: str | None = Field(
        default=None, description="URI or path; default: the first workspace folder"
    )
    agent_id: str | None = None
    mcp_servers: list[McpServerSpec] | None = Field(
        default=None,
        description="MCP servers of this session alone; kept in the server's memory, not stored",
    )

    _unique_servers = field_validator("mcp_servers")(
        lambda servers: None if servers is None else unique_server_names(servers)
    )


class SessionRef(Params):
    session_id: SessionId = Field(min_length=1)


class GetSessionParams(SessionRef):
    pass


class ConfigureSessionParams(SessionRef, SessionFields):
    """Fields left out stay as they are; ``settings`` and ``metadata`` are replaced whole."""


class ClearSessionParams(SessionRef):
    pass


class DeleteSessionParams(SessionRef):
    pass


class ForkSessionParams(SessionRef):
    """The fork inherits the parent's fields; those given here replace them."""

    at_message_id: str | None = Field(default=None, description="inclusive; default: the last")
    title: str | None = None
    tools: list[str] | None = None
    allowed_models: list[str] | None = None


class ListSessionsParams(Params):
    workspace: str | None = None
    cursor: str | None = None
    limit: int = Field(default=50, ge=1, le=1000)


class ListSessionsResult(WireModel):
    sessions: list[Session]
    next_cursor: str | None = None


class MessagesParams(SessionRef):
    cursor: str | None = None
    limit: int = Field(default=100, ge=1, le=1000)
    order: Literal["asc", "desc"] = "asc"


class MessagesResult(WireModel):
    messages: list[Message]
    total: int
    next_cursor: str | None = None


def _content_fits(message: MessageInput, info: ValidationInfo) -> MessageInput:
    most = limits_of(info).max_message_bytes
    if content_size(message.content) > most:
        raise over_limit(
            "a message's content may weigh at most {value} bytes ({limit})", "maxMessageBytes", most
        )
    return message


AppendedMessage = Annotated[MessageInput, AfterValidator(_content_fits)]
"""A message of ``session/append``: its content within ``maxMessageBytes``."""


class AppendParams(SessionRef):
    messages: list[AppendedMessage] = Field(
        min_length=1, description="at most `maxAppendMessages` (default 100000)"
    )

    @field_validator("messages", mode="before")
    @classmethod
    def _few_enough(cls, messages: Any, info: ValidationInfo) -> Any:
        """Counted before any message is validated: a batch over the limit costs nothing."""
        most = limits_of(info).max_append_messages
        if isinstance(messages, list) and len(messages) > most:
            raise over_limit(
                "at most {value} messages per append ({limit})", "maxAppendMessages", most
            )
        return messages


class AppendResult(WireModel):
    messages: list[Message]


class DeleteResult(WireModel):
    deleted: Literal[True] = True
