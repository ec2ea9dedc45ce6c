"""The open buffers as the file tools' text, in process: the edits sent to the client, and
``read_file``/``search_text`` reading a :class:`FileAccess` before the disk."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from lsprotocol import types as lsp
from pygls.workspace import Workspace

from tether.lsp.documents import Buffers, workspace_edit
from tether.tools.base import ToolContext
from tether.tools.read_file import ReadFile
from tether.tools.search_text import SearchText


def apply(text: str, params: dict) -> str:
    """What a client makes of the edit (ASCII: UTF-16 offsets are characters)."""
    (edits,) = params["edit"]["changes"].values()
    (edit,) = edits
    lines = text.split("\n")

    def offset(position: dict) -> int:
        return sum(len(line) + 1 for line in lines[: position["line"]]) + position["character"]

    start, end = offset(edit["range"]["start"]), offset(edit["range"]["end"])
    return text[:start] + edit["newText"] + text[end:]


def test_the_edit_replaces_only_the_lines_that_changed() -> None:
    params = workspace_edit("file:///p/a.py", "a\nb\nc\n", "a\nB\nc\n", "a.py")
    (edit,) = params["edit"]["changes"]["file:///p/a.py"]
    assert edit == {
        "range": {"start": {"line": 1, "character": 0}, "end": {"line": 2, "character": 0}},
        "newText": "B\n",
    }


def test_any_text_becomes_any_other_through_the_edit() -> None:
    pick = random.Random(7)
    for _ in range(5000):
        old, new = (
            "\n".join(pick.choice(["a", "b", "", "cc"]) for _ in range(pick.randint(0, 6)))
            for _ in range(2)
        )
        assert apply(old, workspace_edit("file:///x", old, new, "x")) == new, (old, new)


def test_a_new_file_is_created_then_filled() -> None:
    params = workspace_edit("file:///p/new.py", None, "print(1)\n", "new.py")
    create, fill = params["edit"]["documentChanges"]
    assert create == {
        "kind": "create",
        "uri": "file:///p/new.py",
        "options": {"ignoreIfExists": True},
    }
    assert fill["edits"][0]["newText"] == "print(1)\n"


def test_positions_count_utf16_units() -> None:
    params = workspace_edit("file:///x", "a\n😀x", "a\n😀y", "x")
    (edit,) = params["edit"]["changes"]["file:///x"]
    assert edit["range"]["end"] == {"line": 1, "character": 3}  # the emoji is two units


class Buffer:
    def __init__(self, texts: dict[Path, str]) -> None:
        self.texts = texts

    def read_text(self, path: Path) -> str | None:
        return self.texts.get(path)

    def write_text(self, path: Path, text: str) -> None:
        raise AssertionError("no writes here")

    def interrupt(self) -> None:
        return None


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    (tmp_path / "a.py").write_text("saved = 1\n")
    (tmp_path / "b.py").write_text("other = 2\n")
    return tmp_path.resolve()


def context(workspace: Path, files: Buffer) -> ToolContext:
    return ToolContext(workspace=workspace, session_id="s", run_id="r", files=files)


async def test_read_file_reads_the_open_buffer(workspace: Path) -> None:
    files = Buffer({workspace / "a.py": "unsaved = 3\n"})
    result = await ReadFile().run({"path": "a.py"}, context(workspace, files))
    assert result.content == "1\tunsaved = 3" and not result.is_error
    other = await ReadFile().run({"path": "b.py"}, context(workspace, files))
    assert other.content == "1\tother = 2"


async def test_search_text_searches_the_open_buffer(workspace: Path) -> None:
    files = Buffer({workspace / "a.py": "unsaved = 3\n"})
    result = await SearchText().run({"pattern": "= [0-9]"}, context(workspace, files))
    assert result.content.splitlines() == ["a.py:1: unsaved = 3", "b.py:1: other = 2"]


def test_a_buffer_in_a_folder_with_a_space_is_found_by_its_path(tmp_path: Path) -> None:
    """Clients percent-encode the URI (``my%20project``); pygls 2.1 keys its documents by the
    decoded URI, 2.0 by the URI as sent: tether finds a buffer by its path either way."""
    folder = tmp_path / "my project"
    folder.mkdir()
    path = (folder / "app.py").resolve()
    uri = path.as_uri()
    assert "%20" in uri
    workspace = Workspace(folder.as_uri(), lsp.TextDocumentSyncKind.Incremental)
    buffers = Buffers(workspace)
    workspace.put_text_document(lsp.TextDocumentItem(uri, "python", 1, "x = 1\n"))
    change = lsp.TextDocumentContentChangePartial(
        range=lsp.Range(lsp.Position(0, 4), lsp.Position(0, 5)), text="2"
    )
    workspace.update_text_document(lsp.VersionedTextDocumentIdentifier(2, uri), change)
    assert buffers.text(path) == "x = 2\n"
    assert buffers.uri(path) == uri
    workspace.remove_text_document(uri)
    assert buffers.text(path) is None
