"""``tether completion``: shtab's scripts, generated from the real parser; bash runs its own."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest


def completion(shell: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "tether", "completion", shell],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def bash_completes(*words: str) -> list[str]:
    """What bash offers for the last of ``words`` after sourcing the script."""
    if shutil.which("bash") is None:
        pytest.skip("no bash here")
    script = f"""
        source /dev/stdin
        COMP_WORDS=(tether {" ".join(words)})
        COMP_CWORD={len(words)}
        COMP_LINE="${{COMP_WORDS[*]}}"
        COMP_POINT=${{#COMP_LINE}}
        _shtab_tether
        printf '%s\\n' "${{COMPREPLY[@]}}"
    """
    done = subprocess.run(
        ["bash", "--norc", "-c", script],
        input=completion("bash"),
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.split()


def test_bash_completes_subcommands_and_their_options() -> None:
    assert bash_completes("do") == ["doctor"]
    assert bash_completes("co") == ["config", "completion"]
    assert "--workspace" in bash_completes("doctor", "--")
    assert bash_completes("completion", "") == ["bash", "zsh", "fish"]


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_zsh_and_fish_scripts_name_every_subcommand(shell: str) -> None:
    script = completion(shell)
    for command in ("serve", "acp", "run", "doctor", "config", "completion"):
        assert command in script


def test_an_unknown_shell_is_refused_with_the_choices() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tether", "completion", "csh"], capture_output=True, text=True
    )
    assert done.returncode == 2
    assert "invalid choice" in done.stderr
    assert "bash" in done.stderr and "fish" in done.stderr
