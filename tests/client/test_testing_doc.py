"""docs/testing.md's example runs as written, in pytest-asyncio's strict and auto modes, in a
project of its own (the plugin from its entry point, the turn function imported by the server)."""

from __future__ import annotations

import re
from pathlib import Path

from .test_readme import run_pytest

DOC = Path(__file__).parents[2] / "docs" / "testing.md"


def example() -> str:
    text = DOC.read_text()
    section = text[text.index("## The pytest plugin") :]
    section = section[: section.index("\n## ", 1)]
    (snippet,) = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    return str(snippet)


def test_the_documented_example_passes_unchanged_in_strict_and_auto_mode(tmp_path: Path):
    for mode in ("strict", "auto"):
        project = tmp_path / mode
        project.mkdir()
        (project / "test_example.py").write_text(example())
        done = run_pytest(project, mode)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "3 passed" in done.stdout


def test_without_its_marks_strict_mode_runs_none_of_the_async_tests(tmp_path: Path):
    """The mark the example carries is what strict mode needs (so the test above can fail)."""
    (tmp_path / "test_example.py").write_text(
        example().replace("pytestmark = pytest.mark.asyncio", "")
    )
    done = run_pytest(tmp_path, "strict")
    assert done.returncode != 0
    assert "3 passed" not in done.stdout
