"""The real ``tether serve`` under mutated input while runs are in flight, over stdio and TCP.

Seeded: the seed is printed (``-s`` shows it; a failure's report names it too), and
``TETHER_FUZZ_SEED`` replays one. ``bench/fuzz_wire.py`` (``make fuzz``) runs 100,000 frames.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from tests.wire_fuzz import HUGE_LENGTHS, busy_script, fuzz, serve

from .conftest import SERVER

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
