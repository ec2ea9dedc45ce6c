"""The examples of the README's "Python client" section run as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).parents[2] / "README.md"


def examples() -> list[str]:
    text = README.read_text()
    section = text[text.index("## Python client") :]
    section = section[: section.index("\n## ", 1)]
    return re.findall(r"```python\n(.*?)```", section, re.DOTALL)


def test_the_section_has_its_two_examples():
    client, harness = examples()
    assert "TetherClient.spawn" in client and "tether_client" in harness


def test_the_client_example_runs_as_written(tmp_path: Path):
    done = subprocess.run(
        [sys.executable, "-c", examples()[0]],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "1 run_started" and lines[-2].endswith(" run_finished")
    assert [int(line.split()[0]) for line in lines[:-1]] == list(range(1, len(lines)))
    assert any(line.endswith(" tool_call") for line in lines)
    assert lines[-1] == "The notes say: ship on Friday."


def run_pytest(directory: Path, mode: str) -> subprocess.CompletedProcess[str]:
    """pytest in a project of its own, as a harness author runs it (the plugin from its entry
    point)."""
    (directory / "pytest.ini").write_text(
        f"[pytest]\nasyncio_mode = {mode}\nasyncio_default_fixture_loop_scope = function\n"
    )
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly"],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_pytest_example_passes_in_auto_mode_and_marked_in_strict_mode(tmp_path: Path):
    harness = examples()[1]
    auto, strict = tmp_path / "auto", tmp_path / "strict"
    auto.mkdir()
    strict.mkdir()
    (auto / "test_example.py").write_text(harness)
    (strict / "test_example.py").write_text(
        harness.replace("async def test_", "@pytest.mark.asyncio\nasync def test_")
    )
    for directory, mode in ((auto, "auto"), (strict, "strict")):
        done = run_pytest(directory, mode)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "1 passed" in done.stdout
