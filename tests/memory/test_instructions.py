"""The instruction files loader: places and order, the cache by file identity, refusals."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from tether.config import InstructionsConfig
from tether.memory.instructions import InstructionLoader


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "a" / "b").mkdir(parents=True)
    (root / "AGENTS.md").write_text("root\n")
    (root / "a" / "b" / "AGENTS.md").write_text("deep\n")
    return root


def test_the_nested_files_come_after_the_roots_and_a_missing_one_is_no_problem(
    workspace: Path,
) -> None:
    loader = InstructionLoader(None)
    found = loader.load(workspace, workspace / "a" / "b", ["AGENTS.md"])
    assert found.paths == ["AGENTS.md", "a/b/AGENTS.md"]  # a/AGENTS.md does not exist
    assert found.problems == ()


def test_an_unchanged_file_is_answered_from_the_cache_and_a_changed_one_is_read_again(
    workspace: Path,
) -> None:
    loader = InstructionLoader(None)
    assert loader.cached(workspace, None, ["AGENTS.md"]) is None  # never read yet
    assert loader.load(workspace, None, ["AGENTS.md"]).text.endswith("root")
    cached = loader.cached(workspace, None, ["AGENTS.md"])
    assert cached is not None and cached.paths == ["AGENTS.md"]
    (workspace / "AGENTS.md").write_text("changed root\n")
    assert loader.cached(workspace, None, ["AGENTS.md"]) is None
    assert loader.load(workspace, None, ["AGENTS.md"]).text.endswith("changed root")
    (workspace / "AGENTS.md").unlink()
    gone = loader.cached(workspace, None, ["AGENTS.md"])
    assert gone is not None and gone.files == ()


def test_the_users_file_comes_first_and_one_that_is_a_device_is_refused(
    workspace: Path, tmp_path: Path
) -> None:
    user = tmp_path / "user"
    user.mkdir()
    (user / "AGENTS.md").write_text("mine\n")
    found = InstructionLoader(user).load(workspace, None, ["AGENTS.md"])
    assert found.paths == [str(user / "AGENTS.md"), "AGENTS.md"]
    (user / "AGENTS.md").unlink()
    (user / "AGENTS.md").symlink_to("/dev/zero")
    refused = InstructionLoader(user).load(workspace, None, ["AGENTS.md"])
    assert refused.paths == ["AGENTS.md"]
    [problem] = refused.problems
    assert problem.data == {
        "key": "instructions.files",
        "path": str(user / "AGENTS.md"),
        "reason": "not_regular",
    }


def test_files_over_the_budget_together_are_left_out_one_by_one(workspace: Path) -> None:
    (workspace / "a" / "AGENTS.md").write_text("x" * 60)
    found = InstructionLoader(None, max_bytes=64).load(
        workspace, workspace / "a" / "b", ["AGENTS.md"]
    )
    assert found.paths == ["AGENTS.md", "a/b/AGENTS.md"]
    assert [p.data["path"] for p in found.problems] == ["a/AGENTS.md"]


def test_a_hard_link_to_a_file_outside_the_workspace_is_refused(
    workspace: Path, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("password\n")
    (workspace / "AGENTS.md").unlink()
    os.link(secret, workspace / "AGENTS.md")
    found = InstructionLoader(None).load(workspace, None, ["AGENTS.md"])
    assert found.files == ()
    assert [p.data["reason"] for p in found.problems] == ["hard_links"]


@pytest.mark.parametrize("name", ["", "docs/AGENTS.md", "..", "a\\b"])
def test_instruction_files_are_plain_names(name: str) -> None:
    with pytest.raises(ValidationError, match="not a file name"):
        InstructionsConfig(files=[name])
