"""The title every front end shows for a tool call."""

from __future__ import annotations

import pytest

from tether.tools.titles import call_title


@pytest.mark.parametrize(
    ("name", "arguments", "expected"),
    [
        (
            "read_file",
            '{"path": "src/app.py", "startLine": 3, "endLine": 9}',
            "Read src/app.py (lines 3-9)",
        ),
        ("read_file", '{"path": "README.md", "endLine": 12}', "Read README.md (lines 1-12)"),
        ("list_files", '{"path": "src", "glob": "*.py"}', "List src (*.py)"),
        ("search_text", '{"pattern": "TODO"}', "Search 'TODO' in ."),
        ("write_file", '{"path": "a.txt", "content": "x"}', "Write a.txt"),
        ("edit_file", '{"path": "a.txt"}', "Edit a.txt"),
        ("run_command", '{"command": ["pytest", "-q"]}', "Run pytest -q"),
        ("run_command", '{"command": "make\\n  test"}', "Run make test"),
        ("github__create_issue", "{}", "github: create_issue"),
        ("task", '{"prompt": "Find the bug\\nin app.py"}', "Task: Find the bug"),
        (
            "task",
            '{"prompt": "x", "description": "Review", "agent": "reviewer"}',
            "Task (reviewer): Review",
        ),
        ("task", "{}", "Task"),
        ("write_file", "not json", "Write ."),
        ("read_file", "", "Read ."),
    ],
)
def test_a_call_is_titled_the_way_a_person_reads_it(name: str, arguments: str, expected: str):
    assert call_title(name, arguments) == expected


def test_a_long_title_is_cut_with_an_ellipsis():
    text = call_title("run_command", '{"command": "echo ' + "x" * 300 + '"}')
    assert len(text) == 120 and text.endswith("…")
