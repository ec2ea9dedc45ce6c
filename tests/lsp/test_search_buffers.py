"""``search_text`` through the real ``tether serve``: a document the client opened is searched
from its buffer, not from the disk, on each search engine (``tools.search``)."""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import Server
from .test_language_server import answered, open_document, request

SEARCH = [
    {
        "text": "Searching.",
        "toolCalls": [{"name": "search_text", "arguments": {"pattern": r"value = \d+"}}],
    },
    {"text": "Found it."},
]


@pytest.mark.parametrize("script", [SEARCH])
@pytest.mark.parametrize(
    "options",
    [{"tools": {"search": "ripgrep"}}, {"tools": {"search": "python"}}],
    ids=["ripgrep", "python"],
)
async def test_search_text_searches_the_open_buffer_not_the_disk(
    server: Server, options: dict[str, Any]
) -> None:
    (server.workspace / "a.py").write_text("value = 1  # a, saved\n")
    opened = server.workspace / "b.py"
    opened.write_text("value = 2  # b, saved\n")
    (server.workspace / "c.py").write_text("value = 3  # c, saved\n")
    open_document(server, opened, "first = 0\nvalue = 20  # b, unsaved\n")
    answer, _ = await answered(server, {"prompt": "Where is value set?"})
    messages = await request(server, "session/messages", {"sessionId": answer["sessionId"]})
    [result] = [m for m in messages["messages"] if m["role"] == "tool"]
    assert "a.py:1: value = 1  # a, saved" in str(result)
    assert "b.py:2: value = 20  # b, unsaved" in str(result)
    assert "c.py:1: value = 3  # c, saved" in str(result)
    assert "b, saved" not in str(result)
