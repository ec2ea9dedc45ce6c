"""What a type checker sees of the client: ``output`` typed by the run's output model."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mypy")

CHECKED = """
from typing import Any, assert_type
from pydantic import BaseModel
from tether.client import TetherClient
from tether.protocol.kernel import RunResult

class Answer(BaseModel):
    city: str

async def main(client: TetherClient) -> None:
    typed = await client.run("s", "q", output_schema=Answer)
    assert_type(typed, RunResult[Answer])
    assert_type(typed.output, Answer | None)
    plain = await client.run("s", "q")
    assert_type(plain.output, Any | None)
    schema = await client.run("s", "q", output_schema={"type": "object"})
    assert_type(schema.output, Any | None)
"""


def mypy(source: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    (tmp_path / "example.py").write_text(source)
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path / "cache"),
         str(tmp_path / "example.py")],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_a_run_with_an_output_model_has_its_output_typed_by_it(tmp_path: Path):
    done = mypy(CHECKED, tmp_path)
    assert done.returncode == 0, done.stdout


def test_the_checker_notices_an_output_of_the_wrong_type(tmp_path: Path):
    wrong = CHECKED.replace(
        "assert_type(typed.output, Answer | None)", "assert typed.output; typed.output.town"
    )
    done = mypy(wrong, tmp_path)
    assert done.returncode == 1
    assert '"Answer" has no attribute "town"' in done.stdout, done.stdout
