"""How ACP shows a session's modes: as ``modes`` (``session/new``, ``session/load``...) and as
the config option ``mode`` (category ``mode``), kept in sync; the spec asks agents to send both,
and some clients read only the config options.

What each mode does is the kernel's (:mod:`tether.kernel.approval`); the mode is kept with the
session in the store (``Session.mode``), so it holds in every process that shares the store.
"""

from __future__ import annotations

from tether.acp.models import ConfigOption, ConfigOptionValue, SessionMode, SessionModeState
from tether.protocol.sessions import MODES as MODE_IDS

MODE = "mode"
"""The id of the mode config option."""
MODES = {
    "ask": ("Ask", "Ask before edits and commands"),
    "accept_edits": ("Accept edits", "Edit files without asking; ask before commands"),
    "read_only": ("Read only", "Only read and search the workspace"),
}
assert tuple(MODES) == MODE_IDS, "every mode of the kernel is shown"


def mode_state(current: str) -> SessionModeState:
    """The modes as ``session/new`` and ``session/load`` report them (built on first use: a
    model instance at import would cost the handshake its schema)."""
    return SessionModeState(
        current_mode_id=current,
        available_modes=[
            SessionMode(id=mode_id, name=name, description=description)
            for mode_id, (name, description) in MODES.items()
        ],
    )


def mode_option(current: str) -> ConfigOption:
    """The modes as a config option."""
    return ConfigOption(
        id=MODE,
        name="Mode",
        description="How much a turn may do without asking",
        category="mode",
        current_value=current,
        options=[
            ConfigOptionValue(value=mode_id, name=name, description=description)
            for mode_id, (name, description) in MODES.items()
        ],
    )
