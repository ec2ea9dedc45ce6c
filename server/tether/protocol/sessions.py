"""Sessions and the params and results of the ``session/*`` methods."""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeGuard

import orjson
from pydantic import AfterValidator, BeforeValidator, Field, ValidationInfo, field_validator

from tether.protocol.base import Params, UtcDatetime, WireModel
from tether.protocol.errors import InvalidParams
from tether.protocol.limits import (
    Limits,
    content_size,
    limits_of,
    over_limit,
    shallow_json,
    utf8_size,
)
from tether.protocol.messages import Message, MessageInput, Role
from tether.protocol.plans import MAX_PLAN_ENTRIES, PlanEntry
from tether.protocol.tools import McpServerSpec, unique_server_names
from tether.protocol.usage import Usage

SessionId = str
SESSION_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$"
"""A session id a client chooses: 1 to 128 letters, digits and ``. _ : @ -``, not starting with
a punctuation mark."""
MAX_STATE_BYTES = 256 * 1024
"""The most a session's ``state`` may hold, as compact JSON."""
THINKING_LEVELS = ("off", "low", "medium", "high")
"""The values of ``settings.thinkingLevel``: how much the model reasons before it answers."""
MODES = ("ask", "accept_edits", "read_only")
"""A session's modes, each narrowing what ``tools.approval`` allows (see
:mod:`tether.kernel.approval`): ``ask`` (the policy as configured), ``accept_edits`` (edits run
without asking), ``read_only`` (only the tools that read and search are offered)."""
DEFAULT_MODE = "ask"


class ToolPermissions(WireModel):
    """The answers a session remembers: the tools the user allowed or rejected always."""

    allow_always: list[str] = Field(
        default_factory=list, description="tools that run without asking in this session"
    )
    reject_always: list[str] = Field(
        default_factory=list, description="tools refused without asking in this session"
    )


AGENT_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
"""An agent profile's name: its file's name without ``.md``."""


class SpawnedBy(WireModel):
    """Where a sub-agent's session comes from: the ``task`` tool call of a run."""

    session_id: SessionId = Field(description="the session of the run that called `task`")
    run_id: str
    tool_call_id: str


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
    mode: str = Field(default=DEFAULT_MODE, description="ask, accept_edits or read_only")
    permissions: ToolPermissions = Field(
        default_factory=ToolPermissions, description="the always answers the session remembers"
    )
    plan: list[PlanEntry] | None = Field(
        default=None, description="the steps `update_plan` last set (omitted: no plan yet)"
    )
    parent_session_id: SessionId | None = None
    forked_from_message_id: str | None = None
    agent: str | None = Field(
        default=None, description="the agent profile the session runs under (omitted: none)"
    )
    spawned_by: SpawnedBy | None = Field(
        default=None, description="a sub-agent's session: the `task` call that started it"
    )
    message_count: int = 0
    usage: Usage = Field(default_factory=Usage, description="token totals of every run")
    created_at: UtcDatetime
    updated_at: UtcDatetime
    running: bool = False
    instructions: list[str] | None = Field(
        default=None,
        description="session/get only: the instruction files (AGENTS.md) a run at the workspace "
        "root reads (omitted: none)",
    )


ShallowObject = Annotated[dict[str, Any] | None, BeforeValidator(shallow_json)]
"""A JSON object a session keeps, within ``maxJsonDepth``."""


class SessionFields(Params):
    """The fields a client sets on a session, at creation or later."""

    title: str | None = None
    model: str | None = None
    system_prompt: str | None = None
    settings: ShallowObject = None
    metadata: ShallowObject = None
    tools: list[str] | None = Field(default=None, description="allow-list of tool names")
    allowed_models: list[str] | None = Field(
        default=None, description="allow-list of models a run may use"
    )
    state: ShallowObject = Field(
        default=None, description="JSON object kept across turns; replaced whole"
    )
    mode: str | None = Field(default=None, description="ask, accept_edits or read_only")
    permissions: ToolPermissions | None = Field(
        default=None, description="the remembered always answers; replaced whole (null: none)"
    )
    plan: list[PlanEntry] | None = Field(
        default=None,
        max_length=MAX_PLAN_ENTRIES,
        description="the session's plan; replaced whole (null: none); `update_plan` sets it",
    )
    agent: str | None = Field(
        default=None,
        pattern=AGENT_NAME_PATTERN,
        description="the agent profile to run under (null: none); an unknown one is -32602",
    )

    @field_validator("mode")
    @classmethod
    def _known_mode(cls, mode: str | None) -> str:
        """A given ``null`` is the default mode (a validator runs only on a given value)."""
        if mode is None:
            return DEFAULT_MODE
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; the modes are {', '.join(MODES)}")
        return mode

    @field_validator("permissions")
    @classmethod
    def _no_permissions(cls, permissions: ToolPermissions | None) -> ToolPermissions:
        """A given ``null`` forgets every remembered answer."""
        return ToolPermissions() if permissions is None else permissions

    @field_validator("settings")
    @classmethod
    def _known_thinking_level(cls, settings: dict[str, Any] | None) -> dict[str, Any] | None:
        for key in ("thinkingLevel", "thinking_level"):
            level = (settings or {}).get(key)
            if level is not None and level not in THINKING_LEVELS:
                raise ValueError(
                    f"settings.{key} must be one of {', '.join(THINKING_LEVELS)}; got {level!r}"
                )
        return settings

    @field_validator("state")
    @classmethod
    def _state_fits(cls, state: dict[str, Any] | None) -> dict[str, Any] | None:
        if state is not None and len(orjson.dumps(state)) > MAX_STATE_BYTES:
            raise ValueError(f"the state may hold at most {MAX_STATE_BYTES // 1024} KiB of JSON")
        return state


class CreateSessionParams(SessionFields):
    session_id: SessionId | None = Field(
        default=None,
        pattern=SESSION_ID_PATTERN,
        description="create under this id (unique; default: a new UUIDv7)",
    )
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
    restore_files: bool = Field(
        default=False,
        description="also restore the workspace's files to that point (session/checkpoints)",
    )
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


def session_exists(session_id: str) -> InvalidParams:
    """The error of ``session/create`` under an id a session already has."""
    message = f"a session with id {session_id!r} exists already"
    return InvalidParams(
        f"sessionId: {message}",
        {"fields": [{"field": "sessionId", "message": message}], "sessionId": session_id},
    )


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


def plain_session_id(params: Any) -> str | None:
    """The session id of params that are exactly ``{"sessionId": "<a string>"}`` (not empty),
    what :class:`SessionRef` validates them to, checked without pydantic; None for any other
    params, which pydantic then validates (and refuses with the errors it names)."""
    if type(params) is not dict or len(params) != 1:
        return None
    session_id = params.get("sessionId")
    return session_id if _plain_id(session_id) else None


def _plain_id(session_id: Any) -> TypeGuard[str]:
    """A non-empty string of ASCII: any other id is left to pydantic, which refuses some (a lone
    surrogate, which no JSON decoder lets through)."""
    return type(session_id) is str and session_id.isascii() and bool(session_id)


_PLAIN_ROLES = {"user": Role.USER, "assistant": Role.ASSISTANT, "system": Role.SYSTEM}
_SET_ATTR = object.__setattr__


def plain_append(params: Any, limits: Limits, most: int) -> tuple[str, list[MessageInput]] | None:
    """The params of the usual ``session/append``, checked without pydantic: ``{"sessionId":
    "...", "messages": [{"role": "user", "content": "text"}, ...]}`` with 1 to ``most`` messages
    (and within ``limits``), each of exactly a ``user``, ``assistant`` or ``system`` role and a
    text content. Returns what :class:`AppendParams` makes of them (its session id and
    messages), or None for any other shape, even a valid one, which pydantic then validates
    (and refuses with the errors it names). Half the cost of a small append was pydantic's
    generic path through the message model's validators, which a plain text message never needs.
    """
    if type(params) is not dict or len(params) != 2:
        return None
    session_id = params.get("sessionId")
    messages = params.get("messages")
    if (
        not _plain_id(session_id)
        or type(messages) is not list
        or not 0 < len(messages) <= min(most, limits.max_append_messages)
    ):
        return None
    most_bytes = limits.max_message_bytes
    plain: list[MessageInput] = []
    for message in messages:
        if type(message) is not dict or len(message) != 2:
            return None
        name, content = message.get("role"), message.get("content")
        role = _PLAIN_ROLES.get(name) if type(name) is str else None
        if role is None or type(content) is not str or utf8_size(content) > most_bytes:
            return None
        plain.append(_plain_message(role, content))
    return session_id, plain


_PLAIN_FIELDS = dict.fromkeys(MessageInput.model_fields)


def _plain_message(role: Role, content: str) -> MessageInput:
    """The :class:`MessageInput` pydantic validates from ``{"role": role, "content": content}``
    (every other field None, these two set), without its generic path."""
    message = MessageInput.__new__(MessageInput)
    fields = _PLAIN_FIELDS.copy()
    fields["role"] = role
    fields["content"] = content
    _SET_ATTR(message, "__dict__", fields)
    _SET_ATTR(message, "__pydantic_fields_set__", {"role", "content"})
    _SET_ATTR(message, "__pydantic_extra__", None)
    _SET_ATTR(message, "__pydantic_private__", None)
    return message


class AppendResult(WireModel):
    messages: list[Message]


class DeleteResult(WireModel):
    deleted: Literal[True] = True
