"""Where tether's own files are, known without importing the configuration's models (the
command line sets up its log before it loads them, if it loads them at all)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path


def user_config_path(environ: Mapping[str, str] = os.environ) -> Path | None:
    """``$XDG_CONFIG_HOME/tether/config.toml``, else ``$HOME/.config/tether/config.toml``.

    A relative ``XDG_CONFIG_HOME`` is ignored, as the XDG spec says. None without either.
    """
    xdg = environ.get("XDG_CONFIG_HOME", "")
    if xdg and Path(xdg).is_absolute():
        base = Path(xdg)
    elif home := environ.get("HOME", ""):
        base = Path(home) / ".config"
    else:
        return None
    return base / "tether" / "config.toml"
