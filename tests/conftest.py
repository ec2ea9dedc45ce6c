"""Settings for the whole suite."""

from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

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
