"""Helpers for tests that build a workspace on disk."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest


def write(root: Path, rel: str, content: str | bytes = "") -> Path:
    """Create ``root/rel`` (and its parents) with ``content``."""
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


def _modes_are_enforced() -> bool:
    """False when this process reads files whatever their mode (root, CAP_DAC_OVERRIDE)."""
    with tempfile.TemporaryDirectory() as directory:
        probe = Path(directory) / "probe"
        probe.write_text("x")
        probe.chmod(0)
        try:
            probe.read_text()
        except PermissionError:
            return True
        return False


needs_enforced_modes = pytest.mark.skipif(
    not _modes_are_enforced(), reason="this process reads files whatever their mode"
)
