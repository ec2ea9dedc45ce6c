"""The request methods: each validates its params into a model and calls one service method."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from tether.protocol import (
    AppendParams,
    ClearSessionParams,
    ConfigureSessionParams,
    CreateSessionParams,
    DeleteSessionParams,
    ForkSessionParams,
    GetSessionParams,
    ListSessionsParams,
    MessagesParams,
)
from tether.rpc.errors import invalid_params
from tether.sessions import SessionService

P = TypeVar("P", bound=BaseModel)
Handler = Callable[[dict[str, Any] | None], Awaitable[BaseModel]]


def validate_params(params_model: type[P], params: dict[str, Any] | None) -> P:
    """The params as a model (absent params count as ``{}``); InvalidParams naming the fields."""
    try:
        return params_model.model_validate(params or {})
    except ValidationError as exc:
        raise invalid_params(exc) from None


def handler(params_model: type[P], call: Callable[[P], Awaitable[BaseModel]]) -> Handler:
    """A pygls handler: plain-dict params in (absent params count as ``{}``), a model out."""

    async def handle(params: dict[str, Any] | None) -> BaseModel:
        return await call(validate_params(params_model, params))

    handle.__name__ = handle.__qualname__ = f"handle_{params_model.__name__}"
    return handle


def session_methods(sessions: SessionService) -> dict[str, Handler]:
    return {
        "session/create": handler(CreateSessionParams, sessions.create),
        "session/get": handler(GetSessionParams, sessions.get),
        "session/list": handler(ListSessionsParams, sessions.list_sessions),
        "session/messages": handler(MessagesParams, sessions.messages),
        "session/append": handler(AppendParams, sessions.append),
        "session/configure": handler(ConfigureSessionParams, sessions.configure),
        "session/clear": handler(ClearSessionParams, sessions.clear),
        "session/delete": handler(DeleteSessionParams, sessions.delete),
        "session/fork": handler(ForkSessionParams, sessions.fork),
    }
