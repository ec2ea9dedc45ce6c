"""The real ``tether serve`` driven as a language server by pytest-lsp's client, declaring what a
generic LSP client declares (progress, window messages, showDocument, applyEdit). The server's
stderr goes to a file, so a test can tell it stayed quiet."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

import pytest
from lsprotocol import types as lsp
from pytest_lsp import ClientServerConfig, LanguageClient
from pytest_lsp.client import register_lsp_features

from tether.lsp.converter import make_converter
from tether.testing import scripted_options

# The server with its stderr appended to $TETHER_TEST_STDERR.
SERVER = ["sh", "-c", 'exec "$0" -m tether serve 2>>"$TETHER_TEST_STDERR"', sys.executable]

TEST_KEY = "sk-lsp-test-key-0123456789"

CAPABILITIES = lsp.ClientCapabilities(
    window=lsp.WindowClientCapabilities(
        work_done_progress=True,
        show_message=lsp.ShowMessageRequestClientCapabilities(),
        show_document=lsp.ShowDocumentClientCapabilities(support=True),
    ),
    workspace=lsp.WorkspaceClientCapabilities(
        apply_edit=True,
        workspace_folders=True,
        workspace_edit=lsp.WorkspaceEditClientCapabilities(
            document_changes=True, resource_operations=[lsp.ResourceOperationKind.Create]
        ),
    ),
)


@dataclass
class Editor:
    """What the client was asked, and how it answers a permission question."""

    answer: str | None = "Allow"  # the action chosen in window/showMessageRequest
    questions: list[dict[str, Any]] = field(default_factory=list)
    edits: list[dict[str, Any]] = field(default_factory=list)
    answers_edits: bool = True  # False: workspace/applyEdit is never answered
    withdrawn: list[dict[str, Any]] = field(default_factory=list)  # edits the server withdrew


@dataclass
class Server:
    client: LanguageClient
    editor: Editor
    workspace: Path
    data: Path
    stderr: Path
    initialized: Any

    def log_lines(self, *levels: str) -> list[str]:
        text = self.stderr.read_text() if self.stderr.exists() else ""
        return [line for line in text.splitlines() if any(f" {lv} " in line for lv in levels)]


def make_client(editor: Editor) -> Callable[[], LanguageClient]:
    def make() -> LanguageClient:
        client = LanguageClient(converter_factory=make_converter)
        register_lsp_features(client)
        converter = client.protocol._converter

        def command_or_action(value: Any, _: Any) -> lsp.Command | lsp.CodeAction:
            """lsprotocol's own hook takes any code action that carries a command for a
            Command; a Command's ``command`` is a string."""
            if isinstance(value.get("command"), str):
                return converter.structure(value, lsp.Command)
            return converter.structure(value, lsp.CodeAction)

        union = Union[lsp.Command, lsp.CodeAction]  # noqa: UP007  (lsprotocol's own key)
        converter.register_structure_hook(union, command_or_action)

        @client.feature(lsp.WINDOW_SHOW_MESSAGE_REQUEST)
        def question(params: lsp.ShowMessageRequestParams) -> Any:
            editor.questions.append(client.protocol._converter.unstructure(params))
            return None if editor.answer is None else lsp.MessageActionItem(title=editor.answer)

        @client.feature(lsp.WORKSPACE_APPLY_EDIT)
        async def apply_edit(params: lsp.ApplyWorkspaceEditParams) -> lsp.ApplyWorkspaceEditResult:
            edit = client.protocol._converter.unstructure(params)
            editor.edits.append(edit)
            if not editor.answers_edits:
                try:
                    await asyncio.Event().wait()  # until the server withdraws the request
                finally:
                    editor.withdrawn.append(edit)
            return lsp.ApplyWorkspaceEditResult(applied=True)

        return client

    return make


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "project"
    path.mkdir()
    return path


@pytest.fixture
def script() -> list[dict[str, Any]]:
    return []


@pytest.fixture
def capabilities() -> lsp.ClientCapabilities:
    """What the client declares (a test parametrizes it)."""
    return CAPABILITIES


@pytest.fixture
def options() -> dict[str, Any]:
    """More ``initializationOptions`` (a test parametrizes it)."""
    return {}


@pytest.fixture
async def server(
    tmp_path: Path,
    workspace: Path,
    script: list[dict[str, Any]],
    options: dict[str, Any],
    capabilities: lsp.ClientCapabilities,
) -> AsyncIterator[Server]:
    editor = Editor()
    data, stderr = tmp_path / "data", tmp_path / "stderr.log"
    env = {
        **os.environ,
        "XDG_DATA_HOME": str(data),
        "TETHER_TEST_STDERR": str(stderr),
        "OPENAI_API_KEY": TEST_KEY,  # for a test whose provider is a loopback endpoint
    }
    env.pop("TETHER_LOG_LEVEL", None)
    config = ClientServerConfig(
        server_command=SERVER, client_factory=make_client(editor), server_env=env
    )
    client = await config.start()
    script_file = tmp_path / "script.json"
    script_file.write_text(json.dumps(script))
    initialized = await client.initialize_session(
        lsp.InitializeParams(
            capabilities=capabilities,
            workspace_folders=[lsp.WorkspaceFolder(uri=workspace.as_uri(), name="project")],
            initialization_options={
                **scripted_options(script_file),
                "sessions": {"store": "memory"},
                **options,
            },
        )
    )
    yield Server(client, editor, workspace, data, stderr, initialized)
    await client.shutdown_session()
    await client.stop()
