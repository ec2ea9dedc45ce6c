"""The pieces of slash commands that need no server: how a prompt names a command, how a body is
expanded, how front matter is read, and how command folders are walked."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.kernel.commands import (
    MAX_COMMAND_DEPTH,
    CustomCommand,
    expand,
    invocation,
    load_commands,
    prompt_arguments,
)
from tether.protocol import ImageBlock, InvalidParams, TextBlock
from tether.tools.base import PromptArgument, SourcePrompt


@pytest.mark.parametrize(
    ("prompt", "expected"),
    [
        ("/review src/app.py", ("review", "src/app.py")),
        ("  /help", ("help", "")),
        ("/git:commit  -m  fix\n", ("git:commit", "-m  fix")),
        ("/mode\nread_only", ("mode", "read_only")),
    ],
)
def test_a_prompt_starting_with_slash_name_names_a_command(
    prompt: str, expected: tuple[str, str]
) -> None:
    called = invocation(prompt)
    assert called is not None and (called.name, called.arguments) == expected


@pytest.mark.parametrize("prompt", ["/usr/bin/env is broken", "/", "see /help", "// comment", ""])
def test_a_prompt_that_only_looks_like_one_names_none(prompt: str) -> None:
    assert invocation(prompt) is None


def test_the_first_text_block_of_a_prompt_names_the_command() -> None:
    image = ImageBlock(data="aGk=", mime_type="image/png")
    called = invocation([image, TextBlock(text="/review it"), TextBlock(text="/help")])
    assert called is not None and (called.name, called.arguments) == ("review", "it")


def test_arguments_and_positions_are_replaced_once() -> None:
    body = "Fix #$1 in $2 ($3 is empty). All: $ARGUMENTS"
    assert (
        expand(body, '42 "my file.py"') == 'Fix #42 in my file.py ( is empty). All: 42 "my file.py"'
    )
    # what the arguments contain is not replaced again
    assert expand("Say $1", "$ARGUMENTS") == "Say $ARGUMENTS"


def test_a_body_without_placeholders_gets_the_arguments_appended() -> None:
    assert expand("Review the diff.\n", "focus on tests") == "Review the diff.\n\nfocus on tests"
    assert expand("Review the diff.\n", "") == "Review the diff."


def test_an_unbalanced_quote_splits_the_arguments_on_spaces() -> None:
    assert expand("$1|$2", "it's fine") == "it's|fine"


def command_file(tmp_path: Path, text: str) -> tuple[CustomCommand | None, list[str]]:
    """The command a user file with ``text`` makes (None: left out) and the warnings' reasons."""
    user = tmp_path / "user"
    user.mkdir(exist_ok=True)
    (user / "it.md").write_text(text)
    loaded = load_commands(user, None)
    return loaded.commands.get("it"), [w.data["reason"] for w in loaded.warnings if w.data]


def test_front_matter_keys_are_read_quoted_or_not_and_unknown_ones_ignored(
    tmp_path: Path,
) -> None:
    command, warnings = command_file(
        tmp_path,
        "---\n"
        "# a comment\n"
        'description: "Review: the file"\n'
        "argument-hint: '<file>'\n"
        "allowed-tools: [read_file, search_text]\n"
        "disable-model-invocation: true\n"
        "hooks: &anchor {unknown keys are never read}\n"
        "---\n"
        "Body $1\n",
    )
    assert command is not None and warnings == []
    assert command.description == "Review: the file"
    assert command.argument_hint == "<file>"
    assert command.allowed_tools == ("read_file", "search_text")
    assert command.body == "Body $1\n"


def test_an_argument_hint_in_brackets_is_text_and_tools_may_be_a_block_list(
    tmp_path: Path,
) -> None:
    command, _ = command_file(
        tmp_path,
        "---\nargument-hint: [pr-number] [priority]\nallowed-tools:\n  - read_file\n"
        "  - 'list_files'\n---\nGo.",
    )
    assert command is not None
    assert command.argument_hint == "[pr-number] [priority]"
    assert command.allowed_tools == ("read_file", "list_files")


def test_a_file_without_front_matter_is_all_body(tmp_path: Path) -> None:
    command, _ = command_file(tmp_path, "Just do it.\n---\n")
    assert command is not None and command.body == "Just do it.\n---\n"


@pytest.mark.parametrize(
    "text",
    [
        "---\ndescription: never closed\n",
        "---\ndescription: x\n  nested: line\n---\n",
        "---\nno colon here\n---\n",
        "---\nmodel: a\nmodel: b\n---\n",
        "---\nargument-hint: x\nargumentHint: y\n---\n",
        "---\nallowed-tools: [read_file\n---\n",
        "---\nallowed-tools: *alias\n---\n",
    ],
)
def test_front_matter_that_is_not_plain_key_value_lines_is_refused(
    tmp_path: Path, text: str
) -> None:
    command, warnings = command_file(tmp_path, text)
    assert command is None
    assert warnings == ["front_matter"]


def test_nested_folders_name_commands_and_links_to_folders_are_not_followed(
    tmp_path: Path,
) -> None:
    user = tmp_path / "user"
    deep = user.joinpath(*[f"d{i}" for i in range(MAX_COMMAND_DEPTH + 1)])
    deep.mkdir(parents=True)
    (deep / "too_deep.md").write_text("x")
    (user / "d0" / "inner.md").write_text("---\nallowed-tools: read_file list_files\n---\nI.")
    (user / "notes.txt").write_text("not a command")
    (user / "bad name.md").write_text("x")
    (user / "linked").symlink_to(user / "d0")
    loaded = load_commands(user, None)
    assert sorted(loaded.commands) == ["d0:inner"]
    assert loaded.commands["d0:inner"].allowed_tools == ("read_file", "list_files")
    assert loaded.commands["d0:inner"].description == "I."
    assert [w.data["reason"] for w in loaded.warnings if w.data] == ["bad_name"]


def test_a_workspace_commands_folder_that_leads_outside_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "steal.md").write_text("x")
    workspace = tmp_path / "ws"
    (workspace / ".tether").mkdir(parents=True)
    (workspace / ".tether" / "commands").symlink_to(elsewhere)
    loaded = load_commands(None, workspace)
    assert loaded.commands == {}
    assert [w.data["reason"] for w in loaded.warnings if w.data] == ["outside"]


# -- MCP prompts' arguments ---------------------------------------------------------------------


def review_prompt(*arguments: tuple[str, bool]) -> SourcePrompt:
    async def render(values: object) -> str:
        return ""

    declared = tuple(PromptArgument(name=name, required=required) for name, required in arguments)
    return SourcePrompt(name="mcp__gh__review", description="", arguments=declared, render=render)


@pytest.mark.parametrize(
    ("typed", "expected"),
    [
        ("456", {"pr": "456"}),
        ("456 tests", {"pr": "456", "focus": "tests"}),
        ("456 the tests and docs", {"pr": "456", "focus": "the tests and docs"}),
        ("focus=docs 456", {"pr": "456", "focus": "docs"}),
        ("'4 5 6' focus='a b'", {"pr": "4 5 6", "focus": "a b"}),
        ("pr=1 2", {"pr": "1", "focus": "2"}),
        ("x=1", {"pr": "x=1"}),  # not an argument's name: a word like any other
    ],
)
def test_a_prompts_arguments_come_by_position_or_by_name(typed: str, expected: dict[str, str]):
    prompt = review_prompt(("pr", True), ("focus", False))
    assert prompt_arguments(prompt, typed) == expected


def test_a_missing_required_argument_or_extra_words_are_refused_with_the_usage():
    prompt = review_prompt(("pr", True), ("focus", False))
    with pytest.raises(InvalidParams) as raised:
        prompt_arguments(prompt, "focus=docs")
    assert raised.value.message.endswith("needs pr (usage: /mcp__gh__review <pr> [focus])")
    with pytest.raises(InvalidParams):
        prompt_arguments(review_prompt(), "words")
    assert prompt_arguments(review_prompt(), "") == {}
