"""The change an edit proposes, computed before it is asked about or run: what the built-in
edits would make of their file, and nothing for a call that will fail or edits no file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.files import write
from tether.protocol.tools import ProposedChange
from tether.tools import ToolContext, ToolRegistry

CRLF = "one\r\ntwo\r\n"


async def proposed(
    registry: ToolRegistry, context: ToolContext, name: str, arguments: dict[str, Any]
) -> ProposedChange | None:
    return await registry.proposed_change(name, json.dumps(arguments), context)


async def test_an_edit_proposes_the_whole_file_with_its_replacement_made(
    registry: ToolRegistry, context: ToolContext, workspace: Path
) -> None:
    write(workspace, "src/a.py", CRLF)
    change = await proposed(
        registry,
        context,
        "edit_file",
        {"path": "src/a.py", "oldString": "one\ntwo", "newString": "1\n2"},
    )
    assert change == ProposedChange(path="src/a.py", old_text=CRLF, new_text="1\r\n2\r\n")
    assert (workspace / "src/a.py").read_bytes() == CRLF.encode()  # nothing written yet


async def test_a_write_proposes_the_old_text_or_none_for_a_new_file(
    registry: ToolRegistry, context: ToolContext, workspace: Path
) -> None:
    write(workspace, "a.txt", "old\n")
    replace = await proposed(registry, context, "write_file", {"path": "a.txt", "content": "new\n"})
    create = await proposed(registry, context, "write_file", {"path": "b/c.txt", "content": "c"})
    assert replace == ProposedChange(path="a.txt", old_text="old\n", new_text="new\n")
    assert create == ProposedChange(path="b/c.txt", new_text="c")
    assert not (workspace / "b").exists()


async def test_a_call_that_will_fail_or_edits_no_file_proposes_nothing(
    registry: ToolRegistry, context: ToolContext, workspace: Path
) -> None:
    write(workspace, "a.txt", "x x\n")
    (workspace / "bin").write_bytes(b"\x00\x01\x02")
    failing: list[tuple[str, dict[str, Any]]] = [
        ("edit_file", {"path": "a.txt", "oldString": "x", "newString": "y"}),  # not unique
        ("edit_file", {"path": "a.txt", "oldString": "z", "newString": "y"}),  # not found
        ("edit_file", {"path": "gone.txt", "oldString": "x", "newString": "y"}),
        ("edit_file", {"path": "bin", "oldString": "\u0001", "newString": "y"}),
        ("write_file", {"path": "../outside.txt", "content": "x"}),
        ("write_file", {"path": "a.txt"}),  # no content
        ("read_file", {"path": "a.txt"}),
        ("no_such_tool", {}),
    ]
    for name, arguments in failing:
        assert await proposed(registry, context, name, arguments) is None, (name, arguments)
