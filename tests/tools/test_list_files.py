"""list_files: sorted workspace-relative paths, ignored directories skipped, globs, caps."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.files import write
from tether.tools import ToolContext
from tether.tools.list_files import MAX_LIMIT

from .conftest import Call


@pytest.fixture
def context(engine_context: ToolContext) -> ToolContext:
    """Every test of this module runs on each search engine (``tools.search``)."""
    return engine_context


@pytest.fixture
def tree(workspace: Path) -> Path:
    for rel in [
        "README.md",
        "setup.py",
        "src/app.py",
        "src/app.pyi",
        "src/util/strings.py",
        "src/util/data.json",
        "tests/test_app.py",
        ".github/workflows/ci.yml",
        ".env.example",
        ".git/config",
        "node_modules/left-pad/index.js",
        "src/__pycache__/app.cpython-311.pyc",
        ".venv/lib/site.py",
        "pkg/node_modules/x.js",
    ]:
        write(workspace, rel, "x\n")
    return workspace


async def test_every_file_is_listed_sorted_without_ignored_dirs(call: Call, tree: Path) -> None:
    result = await call("list_files")
    assert not result.is_error
    assert result.content.splitlines() == [
        ".env.example",
        ".github/workflows/ci.yml",
        "README.md",
        "setup.py",
        "src/app.py",
        "src/app.pyi",
        "src/util/data.json",
        "src/util/strings.py",
        "tests/test_app.py",
    ]


async def test_a_recursive_glob_matches_at_any_depth(call: Call, tree: Path) -> None:
    result = await call("list_files", {"glob": "**/*.py"})
    assert result.content.splitlines() == [
        "setup.py",
        "src/app.py",
        "src/util/strings.py",
        "tests/test_app.py",
    ]


async def test_a_glob_without_a_slash_matches_file_names(call: Call, tree: Path) -> None:
    result = await call("list_files", {"glob": "*.{py,pyi}"})
    assert result.content.splitlines() == [
        "setup.py",
        "src/app.py",
        "src/app.pyi",
        "src/util/strings.py",
        "tests/test_app.py",
    ]


async def test_a_glob_with_a_slash_is_anchored_at_the_listed_directory(
    call: Call, tree: Path
) -> None:
    result = await call("list_files", {"glob": "src/*.py"})
    assert result.content.splitlines() == ["src/app.py"]


async def test_a_subdirectory_lists_paths_relative_to_the_workspace(call: Call, tree: Path) -> None:
    result = await call("list_files", {"path": "src/util", "glob": "*.py"})
    assert result.content.splitlines() == ["src/util/strings.py"]


async def test_an_ignored_directory_named_explicitly_is_listed(call: Call, tree: Path) -> None:
    result = await call("list_files", {"path": "node_modules"})
    assert result.content.splitlines() == ["node_modules/left-pad/index.js"]


async def test_the_limit_cuts_the_list_with_a_note(call: Call, tree: Path) -> None:
    result = await call("list_files", {"limit": 3})
    lines = result.content.splitlines()
    assert lines[:3] == [".env.example", ".github/workflows/ci.yml", "README.md"]
    assert len(lines) == 4
    assert "9" in lines[3] and "limit" in lines[3]


async def test_a_limit_above_the_maximum_fails_validation(call: Call, tree: Path) -> None:
    result = await call("list_files", {"limit": MAX_LIMIT + 1})
    assert result.is_error


async def test_no_match_is_not_an_error(call: Call, tree: Path) -> None:
    result = await call("list_files", {"glob": "*.rs"})
    assert not result.is_error
    assert result.content == "no files match"


async def test_nested_braces_pick_files_in_any_alternative(call: Call, tree: Path) -> None:
    expected = await call("list_files", {"glob": "**/*.py"})
    nested = await call("list_files", {"glob": "{**/*.{py,pyc},nothing/{x,y}}"})
    assert not nested.is_error
    assert nested.content == expected.content


@pytest.mark.parametrize("glob", ["[abc", "*.{py", "{a,../b}", "", "/abs/*", "a//b", "[z-a]"])
async def test_a_bad_glob_is_an_error(call: Call, tree: Path, glob: str) -> None:
    result = await call("list_files", {"glob": glob})
    assert result.is_error


async def test_a_file_passed_as_the_directory_is_an_error(call: Call, tree: Path) -> None:
    result = await call("list_files", {"path": "README.md"})
    assert result.is_error


async def test_a_missing_directory_is_an_error(call: Call, tree: Path) -> None:
    result = await call("list_files", {"path": "nope"})
    assert result.is_error
