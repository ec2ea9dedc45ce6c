"""The JSON Schema of the wire contract, generated from the models.

``make schema`` writes it to ``docs/protocol.schema.json``; a test keeps that file current.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from tether.protocol import checkpoints, commands, kernel, lifecycle, messages, sessions

JsonSchemaMode = Literal["validation", "serialization"]

_INPUTS: list[type[BaseModel]] = [
    lifecycle.InitializeParams,
    sessions.CreateSessionParams,
    sessions.GetSessionParams,
    sessions.ListSessionsParams,
    sessions.MessagesParams,
    sessions.AppendParams,
    sessions.ConfigureSessionParams,
    sessions.ForkSessionParams,
    sessions.ClearSessionParams,
    sessions.DeleteSessionParams,
    checkpoints.CheckpointsParams,
    checkpoints.RewindParams,
    kernel.RunParams,
    kernel.CancelParams,
    kernel.CompactParams,
    commands.CommandsParams,
    kernel.PermissionResult,
    messages.MessageInput,
]

_OUTPUTS: list[type[BaseModel]] = [
    lifecycle.InitializeResult,
    sessions.Session,
    sessions.ListSessionsResult,
    sessions.MessagesResult,
    sessions.AppendResult,
    sessions.DeleteResult,
    checkpoints.CheckpointsResult,
    checkpoints.RewindResult,
    messages.Message,
    kernel.RunResult,
    kernel.CancelResult,
    kernel.CompactResult,
    commands.CommandsResult,
    kernel.ProgressParams,
    kernel.PermissionParams,
]


def protocol_schema() -> dict[str, Any]:
    """One JSON Schema document whose ``$defs`` hold every type of the contract."""
    entries: list[tuple[type[BaseModel], JsonSchemaMode]] = [
        *((model, "validation") for model in _INPUTS),
        *((model, "serialization") for model in _OUTPUTS),
    ]
    _, schema = models_json_schema(entries, by_alias=True, title="tether wire protocol")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["description"] = "Generated from tether.protocol; do not edit by hand."
    return schema
