r"""The Python patterns ``search_text`` takes, on ripgrep: what :func:`rust_pattern` rewrites
matches the same lines on the real ``rg`` as on Python's engine, and what it gives up on (or what
``rg`` refuses) runs on the Python engine for that call, with the Python engine's answer."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.files import write
from tether.tools import ToolContext, ToolRegistry
from tether.tools.base import SearchEngine
from tether.tools.dialect import rust_pattern
from tether.tools.ripgrep import Ripgrep, ripgrep
from tether.tools.search_text import SearchText, _compile
from tether.tools.text import split_lines

from .conftest import Call

# (Python pattern, lines): each rewriting, with lines on which a wrong reading would show
REWRITTEN = [
    (r"foo\Z", ["foo", "foox", "a foo", "foo bar"]),
    (r"caf\u00e9", ["café", "cafe", "cafu00e9"]),
    (r"\U0001F600!", ["😀!", "U0001F600!", "!"]),
    (r"\x41\x2e", ["A.", "Ax", "x41"]),
    (r"\<b\>", ["<b>", "a b c", "b"]),
    (r"\#\ \-\&\~\%", ["# -&~%", "#-&~%"]),
    (r"ab{,2}c", ["ac", "abc", "abbc", "abbbc", "ab{,2}c"]),
    (r"x{", ["x{", "x", "{"]),
    (r"{}", ["{}", "{", "}"]),
    (r"a{1,}b", ["ab", "aab", "b", "a{1,}b"]),
    (r"{foo}", ["{foo}", "foo"]),
    (r"a}", ["a}", "a"]),
    (r"q{2}", ["qq", "q", "q{2}"]),
    (r"[[]", ["[", "]", "a"]),
    (r"[a[b]", ["[", "a", "b", "c"]),
    (r"[[:alpha:]]+1", ["abc1", "[:alpha:]1", "1"]),
    (r"[]a]", ["]", "a", "b"]),
    (r"[^]a]", ["]", "a", "b"]),
    (r"a+?b", ["aab", "b"]),
    (r"(?i)abc", ["ABC", "aBc", "ab"]),
    (r"(?i:abc)d", ["ABCd", "ABCD"]),
    (r"(?s)a.b", ["axb", "ab"]),
    (r"(?m)^x$", ["x", "xx"]),
    (r"(?P<name>ab)+", ["abab", "a"]),
    (r"(?<name>ab)c", ["abc", "ac"]),
    (r"\p{Greek}+", ["αβγ", "abc"]),
    (r"\pL\d", ["é٣", "a1", "11"]),
    (r"^\w+$", ["é", "naïve", "a-b"]),
    (r"\bé\b", ["x é y", "xé"]),
    (r"\s\S", [" a", "\ta", "a"]),
    (r"^abc$", ["abc\r", "abc", "abcd"]),
    (r"\A#", ["# a", "a #"]),
]

# (Python pattern, lines): constructs rg would read otherwise, or refuse
GIVEN_UP = [
    (r"foo(?=bar)", ["foobar", "foobaz"]),
    (r"foo(?!bar)", ["foobar", "foobaz"]),
    (r"(?<=a)b", ["ab", "cb"]),
    (r"(?<!a)b", ["ab", "cb"]),
    (r"(a)\1", ["aa", "ab"]),
    (r"(?P<x>a)(?P=x)", ["aa", "ab"]),
    (r"(?>a+)b", ["aab", "ac"]),
    (r"a++a", ["aa", "a"]),
    (r"a*+a", ["aa", "a"]),
    (r"a{1,2}+a", ["aa", "aaa"]),
    (r"[a&&b]", ["&", "a", "b", "c"]),
    (r"[%--]", ["%", "-", "*", "a"]),
    (r"[a~~b]", ["~", "a", "b", "c"]),
]

# Valid Python, rewritten, but more than rg compiles: the call runs on Python
REFUSED_BY_RG = [(r"(?:\w{500}){500}", ["short line", "x"])]


@pytest.fixture(scope="module")
def rg() -> Ripgrep:
    found = ripgrep()
    assert found is not None, "the ripgrep wheel is a dependency: its rg must run here"
    return found


def rg_lines(rg: Ripgrep, pattern: str, lines: list[str], tmp_path: Path) -> list[int] | None:
    """The numbers of the lines ``rg`` matches with ``pattern`` read as Rust; None when it
    refuses the pattern."""
    sample = tmp_path / "sample.txt"
    sample.write_text("".join(line + "\n" for line in lines))
    done = subprocess.run(
        [rg.path, "--no-config", "--crlf", "--line-number", "--regexp", pattern, str(sample)],
        capture_output=True,
        check=False,
    )
    if done.returncode == 2:
        return None
    return [int(line.split(b":", 1)[0]) for line in done.stdout.splitlines()]


def expected(pattern: str, lines: list[str]) -> str:
    """What ``search_text`` answers over a file ``sample.txt`` of ``lines`` on Python's engine."""
    read = split_lines("".join(line + "\n" for line in lines))
    found = [f"sample.txt:{n}: {read[n - 1]}" for n in python_lines(pattern, lines)]
    return "\n".join(found) or "no matches in 1 files"


def python_lines(pattern: str, lines: list[str]) -> list[int]:
    """The numbers of the lines Python's engine matches, read as ``search_text`` reads them."""
    regex = _compile(pattern, False)
    read = split_lines("".join(line + "\n" for line in lines))
    return [number for number, line in enumerate(read, 1) if regex.search(line)]


@pytest.mark.parametrize(("pattern", "lines"), REWRITTEN, ids=[p for p, _ in REWRITTEN])
async def test_a_rewritten_pattern_matches_the_same_lines_on_rg(
    rg: Ripgrep, workspace: Path, tmp_path: Path, pattern: str, lines: list[str]
) -> None:
    translated = rust_pattern(pattern)
    assert translated is not None
    assert rg_lines(rg, translated, lines, tmp_path) == python_lines(pattern, lines)
    results = await answers(workspace, pattern, lines)
    assert results["ripgrep"] == results["python"] == expected(pattern, lines)


def search(workspace: Path, engine: SearchEngine) -> Call:
    context = ToolContext(workspace=workspace, session_id="s", run_id="r", search=engine)
    return Call(ToolRegistry([SearchText()]), context)


async def answers(workspace: Path, pattern: str, lines: list[str]) -> dict[str, str]:
    """The search's answer on each engine, over one file of ``lines``."""
    write(workspace, "sample.txt", "".join(line + "\n" for line in lines))
    results = {}
    engines: tuple[SearchEngine, ...] = ("ripgrep", "python")
    for engine in engines:
        result = await search(workspace, engine)("search_text", {"pattern": pattern})
        assert not result.is_error, result.content
        results[engine] = result.content
    return results


@pytest.mark.parametrize(("pattern", "lines"), GIVEN_UP, ids=[p for p, _ in GIVEN_UP])
async def test_a_construct_rg_reads_otherwise_runs_on_the_python_engine(
    rg: Ripgrep, workspace: Path, tmp_path: Path, pattern: str, lines: list[str]
) -> None:
    # as it stands, the pattern is refused by rg or matches other lines there
    assert rg_lines(rg, pattern, lines, tmp_path) != python_lines(pattern, lines)
    assert rust_pattern(pattern) is None
    results = await answers(workspace, pattern, lines)
    assert results["ripgrep"] == results["python"] == expected(pattern, lines)


@pytest.mark.parametrize(("pattern", "lines"), REFUSED_BY_RG, ids=["size limit"])
async def test_a_pattern_rg_refuses_runs_on_the_python_engine(
    rg: Ripgrep, workspace: Path, tmp_path: Path, pattern: str, lines: list[str]
) -> None:
    translated = rust_pattern(pattern)
    assert translated is not None and rg_lines(rg, translated, lines, tmp_path) is None
    results = await answers(workspace, pattern, lines)
    assert results["ripgrep"] == results["python"] == "no matches in 1 files"
