"""TetherClient covers every parameter of every request: its signatures are compared with the
protocol's params models, so a field added to the protocol cannot be forgotten here."""

from __future__ import annotations

import inspect
from pathlib import Path

from tether.client import TetherClient
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
    Params,
)
from tether.protocol import checkpoints as checkpoints_protocol
from tether.protocol import commands as commands_protocol
from tether.protocol import kernel as kernel_protocol
from tether.protocol import sessions as sessions_protocol
from tether.protocol.checkpoints import CheckpointsParams, RewindParams
from tether.protocol.commands import CommandsParams
from tether.protocol.kernel import CancelParams, CompactParams, RunParams

from .conftest import script

# request method → (the client's method, the params model the server validates with)
COVERED: dict[str, tuple[str, type[Params]]] = {
    "session/create": ("create_session", CreateSessionParams),
    "session/get": ("get_session", GetSessionParams),
    "session/list": ("list_sessions", ListSessionsParams),
    "session/messages": ("messages", MessagesParams),
    "session/append": ("append", AppendParams),
    "session/configure": ("configure", ConfigureSessionParams),
    "session/fork": ("fork", ForkSessionParams),
    "session/clear": ("clear", ClearSessionParams),
    "session/delete": ("delete", DeleteSessionParams),
    "session/compact": ("compact", CompactParams),
    "session/commands": ("commands", CommandsParams),
    "kernel/run": ("run", RunParams),
    "kernel/cancel": ("cancel", CancelParams),
    "session/checkpoints": ("checkpoints", CheckpointsParams),
    "session/rewind": ("rewind", RewindParams),
}
# Params models that are parts of others, not the params of one request (UndoParams: the params
# of the faces' undo, an ACP extension method and an LSP command).
PARTS = {"SessionFields", "SessionRef", "UndoParams"}


def _parameters(method_name: str) -> set[str]:
    signature = inspect.signature(getattr(TetherClient, method_name))
    return {name for name in signature.parameters if name != "self"}


async def test_every_request_method_the_server_answers_has_a_client_method(
    project: Path, tmp_path: Path
) -> None:
    async with TetherClient.spawn(workspace=project, options=script(tmp_path, [])) as client:
        assert client.initialize_result is not None
        served = set(client.initialize_result.capabilities.methods)
    assert served == set(COVERED)


def test_every_params_model_of_the_protocol_is_the_params_of_a_covered_request() -> None:
    models = {
        name
        for module in (sessions_protocol, kernel_protocol, checkpoints_protocol, commands_protocol)
        for name, value in vars(module).items()
        if inspect.isclass(value)
        and issubclass(value, Params)
        and value.__module__ == module.__name__
    }
    assert models - PARTS == {model.__name__ for _, model in COVERED.values()}


def test_each_client_method_takes_every_field_of_its_params_model() -> None:
    for request, (method_name, model) in COVERED.items():
        fields, taken = set(model.model_fields), _parameters(method_name)
        assert taken == fields, (
            f"TetherClient.{method_name} ({request}): missing {sorted(fields - taken)}, "
            f"unknown {sorted(taken - fields)}"
        )


async def test_create_session_sends_every_field_and_the_server_keeps_them(
    project: Path, tmp_path: Path
) -> None:
    server = {"name": "files", "command": "true"}
    async with TetherClient.spawn(workspace=project, options=script(tmp_path, [])) as client:
        session = await client.create_session(
            session_id="chosen-1",
            title="t",
            agent_id="agent-1",
            model="m1",
            system_prompt="be brief",
            settings={"thinkingLevel": "low"},
            metadata={"k": 1},
            tools=["read_file"],
            allowed_models=["m1", "m2"],
            state={"step": 3},
            mcp_servers=[server],
        )
        assert session.session_id == "chosen-1"
        assert (session.agent_id, session.allowed_models, session.state) == (
            "agent-1",
            ["m1", "m2"],
            {"step": 3},
        )
        configured = await client.configure("chosen-1", allowed_models=["m2"], state={"step": 4})
        assert (configured.allowed_models, configured.state) == (["m2"], {"step": 4})
        fork = await client.fork("chosen-1", tools=[], allowed_models=["m2"])
        assert (fork.tools, fork.allowed_models) == ([], ["m2"])


async def test_open_session_creates_a_missing_session_and_then_returns_it(
    project: Path, tmp_path: Path
) -> None:
    async with TetherClient.spawn(workspace=project, options=script(tmp_path, [])) as client:
        created = await client.open_session("my-id", title="first")
        again = await client.open_session("my-id", title="ignored: it exists")
        assert created.session_id == again.session_id == "my-id"
        assert again.title == "first"
