"""Fixtures of the client tests: a small project and the scripted provider's options."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tether.testing import scripted_options


def script(tmp_path: Path, turns: list[dict[str, Any]]) -> dict[str, Any]:
    """``initializationOptions`` playing ``turns`` with the scripted provider."""
    path = tmp_path / "script.json"
    path.write_text(json.dumps(turns))
    return scripted_options(path)


def uri_of(path: Path) -> str:
    """The workspace URI the server reports for ``path``."""
    return path.resolve().as_uri()
