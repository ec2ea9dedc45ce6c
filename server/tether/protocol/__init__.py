"""The wire contract as pydantic models and error codes. No I/O; imports nothing else of tether.

The ``kernel/*`` models live in :mod:`tether.protocol.kernel`, imported where a run needs them,
so a server start that only answers the handshake does not build them.

Each name is imported from its module on first use (:pep:`562`): ``from tether.protocol import
ConfigError`` loads the errors alone, so the handshake does not build the session, message and
checkpoint models it does not need (they load after it, with the kernel).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.protocol.base import Params, WireModel
    from tether.protocol.errors import (
        ConfigError,
        ErrorCode,
        InvalidParams,
        InvalidRequest,
        PromptRefused,
        ProviderError,
        RequestCancelled,
        RunLeaseLost,
        ServerNotInitialized,
        SessionBusy,
        SessionNotFound,
        StoreError,
        StoreFault,
        TetherError,
        WorkspaceError,
    )
    from tether.protocol.lifecycle import (
        PROTOCOL_VERSION,
        InitializeParams,
        InitializeResult,
        ServerCapabilities,
        ServerInfo,
        SessionCapabilities,
    )
    from tether.protocol.messages import (
        CompactedRange,
        Content,
        ContentBlock,
        ImageBlock,
        Message,
        MessageContent,
        MessageInput,
        ResourceLinkBlock,
        Role,
        TextBlock,
        ToolCall,
        is_blocks,
    )
    from tether.protocol.sessions import (
        AppendParams,
        AppendResult,
        ClearSessionParams,
        ConfigureSessionParams,
        CreateSessionParams,
        DeleteResult,
        DeleteSessionParams,
        ForkSessionParams,
        GetSessionParams,
        ListSessionsParams,
        ListSessionsResult,
        MessagesParams,
        MessagesResult,
        Session,
    )

__all__ = [
    "PROTOCOL_VERSION",
    "AppendParams",
    "AppendResult",
    "ClearSessionParams",
    "CompactedRange",
    "ConfigError",
    "ConfigureSessionParams",
    "Content",
    "ContentBlock",
    "CreateSessionParams",
    "DeleteResult",
    "DeleteSessionParams",
    "ErrorCode",
    "ForkSessionParams",
    "GetSessionParams",
    "ImageBlock",
    "InitializeParams",
    "InitializeResult",
    "InvalidParams",
    "InvalidRequest",
    "ListSessionsParams",
    "ListSessionsResult",
    "Message",
    "MessageContent",
    "MessageInput",
    "MessagesParams",
    "MessagesResult",
    "Params",
    "PromptRefused",
    "ProviderError",
    "RequestCancelled",
    "ResourceLinkBlock",
    "Role",
    "RunLeaseLost",
    "ServerCapabilities",
    "ServerInfo",
    "ServerNotInitialized",
    "Session",
    "SessionBusy",
    "SessionCapabilities",
    "SessionNotFound",
    "StoreError",
    "StoreFault",
    "TetherError",
    "TextBlock",
    "ToolCall",
    "WireModel",
    "WorkspaceError",
    "is_blocks",
]

_WHERE: dict[str, str] = {
    "Params": "base",
    "WireModel": "base",
    "ConfigError": "errors",
    "ErrorCode": "errors",
    "InvalidParams": "errors",
    "InvalidRequest": "errors",
    "PromptRefused": "errors",
    "ProviderError": "errors",
    "RequestCancelled": "errors",
    "RunLeaseLost": "errors",
    "ServerNotInitialized": "errors",
    "SessionBusy": "errors",
    "SessionNotFound": "errors",
    "StoreError": "errors",
    "StoreFault": "errors",
    "TetherError": "errors",
    "WorkspaceError": "errors",
    "InitializeParams": "lifecycle",
    "InitializeResult": "lifecycle",
    "PROTOCOL_VERSION": "lifecycle",
    "ServerCapabilities": "lifecycle",
    "ServerInfo": "lifecycle",
    "SessionCapabilities": "lifecycle",
    "CompactedRange": "messages",
    "Content": "messages",
    "ContentBlock": "messages",
    "ImageBlock": "messages",
    "Message": "messages",
    "MessageContent": "messages",
    "MessageInput": "messages",
    "ResourceLinkBlock": "messages",
    "Role": "messages",
    "TextBlock": "messages",
    "ToolCall": "messages",
    "is_blocks": "messages",
    "AppendParams": "sessions",
    "AppendResult": "sessions",
    "ClearSessionParams": "sessions",
    "ConfigureSessionParams": "sessions",
    "CreateSessionParams": "sessions",
    "DeleteResult": "sessions",
    "DeleteSessionParams": "sessions",
    "ForkSessionParams": "sessions",
    "GetSessionParams": "sessions",
    "ListSessionsParams": "sessions",
    "ListSessionsResult": "sessions",
    "MessagesParams": "sessions",
    "MessagesResult": "sessions",
    "Session": "sessions",
}
"""The module of :mod:`tether.protocol` each name of ``__all__`` is defined in."""


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # found directly from now on
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
