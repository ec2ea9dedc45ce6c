"""Settings for the whole suite."""

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests.postgres import OwnServer, new_database, start_server

# The suite runs on small shared machines: generation speed and per-example time vary with the
# load, so neither may fail a test. Examples are derived from each test (no random seed), so a
# failure shows up the same way on every run.
settings.register_profile(
    "tether",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
)
settings.load_profile("tether")

# The servers the tests start run on asyncio's own loop, as a plain `pip install tether` does;
# the dev group also installs uvloop (the `fast` extra), which tests/e2e/test_cli.py asks for.
os.environ.setdefault("TETHER_EVENT_LOOP", "asyncio")


@pytest.fixture(scope="session", autouse=True)
def tether_data_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """tether's data directory (checkpoints of every run that edits, stores left at their
    default) under the run's temporary directory, for the servers the tests start too: never the
    machine's ``~/.local/share/tether``. A test that wants another sets its own."""
    data = tmp_path_factory.mktemp("xdg-data")
    before = os.environ.get("XDG_DATA_HOME")
    os.environ["XDG_DATA_HOME"] = str(data)
    yield data
    if before is None:
        os.environ.pop("XDG_DATA_HOME", None)
    else:
        os.environ["XDG_DATA_HOME"] = before


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A small workspace: a README and ``src/app.py`` whose ``main`` returns 42."""
    root = tmp_path / "project"
    (root / "src").mkdir(parents=True)
    (root / "README.md").write_text("# Demo\nA small project.\n")
    (root / "src" / "app.py").write_text("def main():\n    return 42\n")
    return root


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """The URL of a real PostgreSQL server, started on first use (see :mod:`tests.postgres`)."""
    yield from start_server()


@pytest.fixture
def postgres_url(postgres_server: str) -> str:
    """The URL of an empty database of this test's own on that server."""
    return new_database(postgres_server)


@pytest.fixture
def own_postgres() -> Iterator[OwnServer]:
    """A PostgreSQL server of this test's own, which it may restart (never the shared one)."""
    if os.environ.get("TETHER_TEST_POSTGRES_URL"):
        pytest.skip("needs a server started here (TETHER_TEST_POSTGRES_URL is set)")
    server = OwnServer()
    try:
        yield server
    finally:
        server.stop()
