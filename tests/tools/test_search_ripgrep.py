"""What only the ripgrep engine of ``search_text`` has to take care of: the ``rg`` processes it
starts end with the call."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.files import write
from tether.tools import ToolContext, ToolRegistry, search_text
from tether.tools.search_text import SearchText

from .conftest import Call

# No literal to look for, Unicode word boundaries over non-ASCII text, and a long line: rg's fast
# engines give up on it, and its slowest takes some 20 s a core for each file below, so that rg
# runs for minutes unless it is killed.
SLOW_PATTERN = r"(?:\b\w+\b\W*){200}\d"
LINE = "héllo wörld " * 70_000 + "\n"  # 980 kB: files are searched up to 1 MiB


@pytest.fixture
def call(workspace: Path) -> Call:
    context = ToolContext(workspace=workspace, session_id="s", run_id="r", search="ripgrep")
    return Call(ToolRegistry([SearchText()]), context)


def rg_children(*, searching: bool = False) -> list[int]:
    """The ``rg`` processes this process started that are still there (zombies too); with
    ``searching``, only those that search (not the walk's ``rg --files``)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        parent = int(stat[stat.rindex(")") + 2 :].split()[1])
        if name == "rg" and parent == os.getpid() and (not searching or _searches(entry)):
            found.append(int(entry))
    return found


def _searches(pid: str) -> bool:
    try:
        return b"--files" not in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False


async def until(condition: object, seconds: float = 10.0) -> bool:
    """Whether ``condition()`` came true within ``seconds``."""
    assert callable(condition)
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    while not condition():
        if loop.time() > end:
            return False
        await asyncio.sleep(0.01)
    return True


@pytest.fixture
def no_rg_left() -> Iterator[None]:
    """Whatever the test's outcome, no ``rg`` it started outlives it."""
    yield
    for pid in rg_children():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


async def test_cancelling_a_search_kills_its_rg(
    call: Call, workspace: Path, monkeypatch: pytest.MonkeyPatch, no_rg_left: None
) -> None:
    # only the cancellation may end rg early: not the deadline of the matching
    monkeypatch.setattr(search_text, "TIME_BUDGET_SECONDS", 3600.0)
    for n in range(8):
        write(workspace, f"big/f{n}.txt", LINE)
    assert rg_children() == []
    search = asyncio.ensure_future(call("search_text", {"pattern": SLOW_PATTERN}))
    assert await until(lambda: rg_children(searching=True) or search.done())
    assert not search.done(), search.result().content  # rg was caught in the middle
    search.cancel()
    with pytest.raises(asyncio.CancelledError):
        await search
    assert await until(lambda: not rg_children()), "rg still runs after the call was cancelled"
