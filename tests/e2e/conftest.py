"""End-to-end fixtures: the real ``tether serve`` process over stdio."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_lsp
from lsprotocol import types as lsp
from pytest_lsp import ClientServerConfig, LanguageClient
from pytest_lsp.client import register_lsp_features

from tether.client import Connection
from tether.lsp.converter import make_converter
from tether.testing import scripted_options

SERVER = [sys.executable, "-m", "tether", "serve"]


def make_client() -> LanguageClient:
    """pytest-lsp's client, with tether's converter so custom results stay plain dicts."""
    client = LanguageClient(converter_factory=make_converter)
    register_lsp_features(client)
    return client


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("workspace")


@pytest_lsp.fixture(config=ClientServerConfig(server_command=SERVER, client_factory=make_client))
async def lsp_client(lsp_client: LanguageClient, workspace: Path) -> AsyncIterator[LanguageClient]:
    await lsp_client.initialize_session(
        lsp.InitializeParams(
            capabilities=lsp.ClientCapabilities(),
            workspace_folders=[lsp.WorkspaceFolder(uri=workspace.as_uri(), name="ws")],
        )
    )
    yield lsp_client
    await lsp_client.shutdown_session()


async def call(client: LanguageClient, method: str, params: Any = None) -> Any:
    """A tether request through pytest-lsp's client; errors raise pygls's JsonRpcException."""
    return await client.protocol.send_request_async(method, params if params is not None else {})


@pytest.fixture
async def raw() -> AsyncIterator[Connection]:
    """A bare connection to a fresh server that has not been initialized."""
    connection = await Connection.spawn(SERVER)
    yield connection
    await connection.close()


@pytest.fixture
async def server(raw: Connection, workspace: Path) -> Connection:
    """A bare connection to an initialized server."""
    await raw.request("initialize", {"workspaceFolders": [{"uri": workspace.as_uri()}]})
    raw.notify("initialized", {})
    return raw


async def initialized(
    connection: Connection, project: Path, options: dict[str, Any]
) -> dict[str, Any]:
    """``initialize`` with ``project`` as the workspace folder, then ``initialized``."""
    result: dict[str, Any] = await connection.request(
        "initialize",
        {"workspaceFolders": [{"uri": project.as_uri()}], "initializationOptions": options},
    )
    connection.notify("initialized", {})
    return result


def script_options(
    project: Path, turns: list[dict[str, Any]], *, name: str = "script", **sections: Any
) -> dict[str, Any]:
    """Options that make the server play ``turns`` (written beside ``project``), with
    ``sections`` laid over them key by key (``provider`` keys join the script's)."""
    script = project.parent / f"{name}.json"
    script.write_text(json.dumps(turns))
    options = scripted_options(script)
    for section, values in sections.items():
        options[section] = {**options.get(section, {}), **values}
    return options


async def start_scripted(
    project: Path,
    turns: list[dict[str, Any]],
    *,
    env: dict[str, str] | None = None,
    **sections: Any,
) -> Connection:
    """A real server playing ``turns`` on ``project``, initialized (see :func:`script_options`)."""
    connection = await Connection.spawn(SERVER, env=env)
    await initialized(connection, project, script_options(project, turns, **sections))
    return connection
