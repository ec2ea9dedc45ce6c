"""Settings for the whole suite."""

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests.postgres import new_database, start_server

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
