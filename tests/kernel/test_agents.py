"""Agent profiles: their files, their front matter, and where they are found."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tether.kernel.agents import (
    MAX_PROFILE_BYTES,
    ProfileError,
    find_profile,
    list_profiles,
    require_profile,
)
from tether.kernel.frontmatter import (
    FrontMatterError,
    RawValue,
    int_field,
    list_field,
    parse_document,
    string_field,
)
from tether.protocol import ErrorCode, InvalidParams


def test_front_matter_keeps_values_as_written_and_the_body_follows():
    document = parse_document(
        "---\n"
        "description: 'Reviews code: never edits'\n"
        'tools: [read_file, "search_text"]\n'
        "also:\n"
        "  - one\n"
        "  - 'two'\n"
        "maxIterations: 8\n"
        "# a comment\n"
        "---\n"
        "\n"
        "You review.\n"
    )
    fields = document.fields
    assert fields["also"] == ["one", "two"]
    assert string_field(fields, "description") == "Reviews code: never edits"
    assert list_field(fields, "tools") == ["read_file", "search_text"]
    assert list_field(fields, "also") == ["one", "two"]
    assert int_field(fields, "maxIterations", 1, 1000) == 8
    assert string_field(fields, "missing") is None
    assert document.body == "\nYou review.\n"


def test_a_file_without_front_matter_is_all_body():
    assert parse_document("Just a prompt.\n---\nmore\n").body == "Just a prompt.\n---\nmore\n"


@pytest.mark.parametrize(
    "front",
    [
        "nested:\n  key: value",  # a map
        "description: one\ndescription: two",  # a key twice
        "- stray",  # a list item outside a list
        "tools:\n  - &anchor x",  # an anchor in a list
    ],
)
def test_front_matter_of_another_shape_is_refused(front: str):
    with pytest.raises(FrontMatterError):
        parse_document(f"---\n{front}\n---\nbody\n")


@pytest.mark.parametrize(
    ("front", "read"),
    [
        ("description: &anchor x", lambda f: string_field(f, "description")),
        ("description: [a, b]", lambda f: string_field(f, "description")),
        ("tools: *anchor", lambda f: list_field(f, "tools")),
        ("tools: [a, b", lambda f: list_field(f, "tools")),
        ("prompt: |", lambda f: string_field(f, "prompt")),
        ("maxIterations: 1001", lambda f: int_field(f, "maxIterations", 1, 1000)),
        ("maxIterations: eight", lambda f: int_field(f, "maxIterations", 1, 1000)),
    ],
)
def test_a_value_beyond_the_small_subset_is_refused_when_read(
    front: str, read: Callable[[dict[str, RawValue]], object]
):
    fields = parse_document(f"---\n{front}\n---\nbody\n").fields
    with pytest.raises(FrontMatterError):
        read(fields)


def test_front_matter_that_never_closes_is_refused():
    with pytest.raises(FrontMatterError, match="closing"):
        parse_document("---\ndescription: x\nbody\n")


@pytest.fixture
def environ(tmp_path: Path) -> dict[str, str]:
    return {"XDG_CONFIG_HOME": str(tmp_path / "config")}


def user_profile(tmp_path: Path, name: str, text: str) -> Path:
    agents = tmp_path / "config" / "tether" / "agents"
    agents.mkdir(parents=True, exist_ok=True)
    (agents / f"{name}.md").write_text(text)
    return agents / f"{name}.md"


def workspace_profile(workspace: Path, name: str, text: str) -> Path:
    agents = workspace / ".tether" / "agents"
    agents.mkdir(parents=True, exist_ok=True)
    (agents / f"{name}.md").write_text(text)
    return agents / f"{name}.md"


def test_a_profile_is_read_with_its_fields_and_a_string_list_of_tools(
    tmp_path: Path, environ: dict[str, str]
):
    user_profile(
        tmp_path,
        "fixer",
        "---\ntools: read_file, edit_file\nmodel: m1\nmaxIterations: 4\n---\nFix.",
    )
    profile = find_profile("fixer", None, environ)
    assert profile is not None and profile.source == "user"
    assert (profile.tools, profile.model, profile.max_iterations) == (
        ("read_file", "edit_file"),
        "m1",
        4,
    )
    assert profile.prompt == "Fix."
    assert profile.narrow(["read_file", "run_command"]) == ["read_file"]
    assert profile.narrow(None) == ["read_file", "edit_file"]


def test_the_user_s_profile_wins_over_the_workspace_s_of_the_same_name(
    tmp_path: Path, environ: dict[str, str]
):
    workspace = tmp_path / "ws"
    user_profile(tmp_path, "reviewer", "Mine.")
    workspace_profile(workspace, "reviewer", "The repository's.")
    workspace_profile(workspace, "local", "Only here.")
    profile = find_profile("reviewer", workspace, environ)
    assert profile is not None and profile.prompt == "Mine."
    assert [(p.name, p.source) for p in list_profiles(workspace, environ)] == [
        ("local", "workspace"),
        ("reviewer", "user"),
    ]


def test_a_workspace_profile_that_leads_outside_the_workspace_is_refused(
    tmp_path: Path, environ: dict[str, str]
):
    workspace = tmp_path / "ws"
    secret = tmp_path / "secret.md"
    secret.write_text("---\ndescription: x\n---\nthe user's secret\n")
    agents = workspace / ".tether" / "agents"
    agents.mkdir(parents=True)
    os.symlink(secret, agents / "leak.md")
    with pytest.raises(ProfileError, match="cannot be read"):
        find_profile("leak", workspace, environ)
    assert list_profiles(workspace, environ) == []  # left out of the list


def test_a_profile_over_the_size_cap_is_refused(tmp_path: Path, environ: dict[str, str]):
    workspace = tmp_path / "ws"
    workspace_profile(workspace, "huge", "x" * (MAX_PROFILE_BYTES + 1))
    with pytest.raises(ProfileError):
        find_profile("huge", workspace, environ)


@pytest.mark.parametrize("name", ["../escape", ".hidden", "", "a/b", "é"])
def test_a_name_that_is_no_profile_name_finds_nothing(
    name: str, tmp_path: Path, environ: dict[str, str]
):
    assert find_profile(name, tmp_path, environ) is None


def test_an_unknown_or_broken_profile_is_invalid_params_naming_it(
    tmp_path: Path, environ: dict[str, str]
):
    user_profile(tmp_path, "known", "Known.")
    user_profile(tmp_path, "broken", "---\nmaxIterations: lots\n---\nx")
    with pytest.raises(InvalidParams) as unknown:
        require_profile("nobody", None, environ)
    assert unknown.value.code == ErrorCode.INVALID_PARAMS
    assert unknown.value.data == {
        "fields": [{"field": "agent", "message": "no agent profile 'nobody' (known: known)"}],
        "agent": "nobody",
    }
    with pytest.raises(InvalidParams, match="maxIterations"):
        require_profile("broken", None, environ)


EXAMPLES = Path(__file__).parents[2] / "examples" / "agents"


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.md")), ids=lambda path: path.stem)
def test_the_example_profiles_are_usable_as_they_are(path: Path, tmp_path: Path):
    agents = tmp_path / "config" / "tether" / "agents"
    agents.mkdir(parents=True)
    (agents / path.name).write_text(path.read_text())
    profile = find_profile(path.stem, None, {"XDG_CONFIG_HOME": str(tmp_path / "config")})
    assert profile is not None and profile.description and profile.tools and profile.prompt
