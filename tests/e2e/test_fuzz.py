"""The real ``tether serve`` (over stdio and TCP) and ``tether acp`` under mutated input while
runs are in flight.

Seeded: the seed is printed (``-s`` shows it; a failure's report names it too), and
``TETHER_FUZZ_SEED`` replays one. ``bench/fuzz_wire.py`` (``make fuzz``) runs 100,000 frames.
"""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path

import pytest

from tests.wire_fuzz import HUGE_LENGTHS, acp_face, busy_script, fuzz, serve, serve_acp

from .conftest import SERVER

ACP = [sys.executable, "-m", "tether", "acp"]

FRAMES = 2500  # per transport: about 10 s each on 2 busy cores


@pytest.fixture(scope="module")
def seed() -> int:
    chosen = int(os.environ.get("TETHER_FUZZ_SEED") or random.randrange(1 << 32))
    print(f"\nwire fuzz seed: {chosen} (TETHER_FUZZ_SEED={chosen} replays it)")
    return chosen


@pytest.mark.timeout(120)
@pytest.mark.parametrize("tcp", [False, True], ids=["stdio", "tcp"])
async def test_every_valid_request_among_mutated_frames_is_answered_exactly_once(
    tmp_path: Path, seed: int, tcp: bool
):
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    options = busy_script(tmp_path / "script.json", turns=2000, delay=0.05)
    served = await serve(SERVER, workspace, options, tcp=tcp, log=tmp_path / "stderr.log")
    try:
        report = await fuzz(served.client, served.process.pid, seed=seed, frames=FRAMES)
        assert served.process.returncode is None, f"the server died (seed {seed})"
        assert report.kinds["huge_length"] >= len(HUGE_LENGTHS)  # every oversized length sent
        assert report.runs_started >= 2 and report.runs_answered == report.runs_started
        assert report.unanswered == [], f"seed {seed}"
        assert report.answered_twice == [], f"seed {seed}"
        assert report.bad_output == [], f"seed {seed}"
        assert await served.close() == 0
    finally:
        if served.process.returncode is None:
            served.process.kill()
            await served.process.wait()


@pytest.mark.timeout(120)
async def test_tether_acp_answers_every_valid_request_among_mutated_lines_exactly_once(
    tmp_path: Path, seed: int
):
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    busy_script(tmp_path / "script.json", turns=2000, delay=0.05)
    served = await serve_acp(ACP, workspace, tmp_path / "script.json", log=tmp_path / "err.log")
    try:
        face = acp_face(workspace)
        report = await fuzz(served.client, served.process.pid, seed=seed, frames=FRAMES, face=face)
        assert served.process.returncode is None, f"the agent died (seed {seed})"
        assert set(report.kinds) == {m.__name__ for m in face.fuzzer(seed, "s")._mutations}
        assert report.runs_started >= 2 and report.runs_answered == report.runs_started
        assert report.unanswered == [], f"seed {seed}"
        assert report.answered_twice == [], f"seed {seed}"
        assert report.bad_output == [], f"seed {seed}"
        assert await served.close() == 0
    finally:
        if served.process.returncode is None:
            served.process.kill()
            await served.process.wait()
